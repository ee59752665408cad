"""Per-rank system metrics, sampled in a daemon thread while the run goes (Alchemist's
system-level monitoring): process and machine CPU %, resident memory, and for a CUDA rank the GPU's
utilisation and memory through NVML. One JSON line per sample in ``system/rank<r>.jsonl``."""
from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Optional

import psutil


class SystemMonitor:
    def __init__(self, path: Path, rank: int, gpu_index: Optional[int] = None, interval_s: float = 1.0) -> None:
        self.path, self.rank, self.interval = Path(path), rank, interval_s
        self._stop = threading.Event()
        self._nvml = None
        if gpu_index is not None:
            try:
                import pynvml
                pynvml.nvmlInit()
                self._nvml = (pynvml, pynvml.nvmlDeviceGetHandleByIndex(gpu_index))
            except Exception:  # no driver / no NVML: CPU metrics only
                self._nvml = None
        self._thread = threading.Thread(target=self._loop, name=f"sysmon-{rank}", daemon=True)

    def sample(self, proc: psutil.Process) -> dict:
        mem = proc.memory_info()
        rec = {"time": time.time(), "rank": self.rank, "cpu_percent": proc.cpu_percent(None),
               "system_cpu_percent": psutil.cpu_percent(None), "rss_mb": mem.rss / 2**20,
               "system_mem_percent": psutil.virtual_memory().percent}
        if self._nvml:
            nv, h = self._nvml
            try:
                u = nv.nvmlDeviceGetUtilizationRates(h)
                m = nv.nvmlDeviceGetMemoryInfo(h)
                rec.update(gpu_util_percent=u.gpu, gpu_mem_mb=m.used / 2**20, gpu_mem_total_mb=m.total / 2**20)
            except Exception:
                pass
        return rec

    def _loop(self) -> None:
        proc = psutil.Process()
        proc.cpu_percent(None)
        psutil.cpu_percent(None)
        with open(self.path, "a", buffering=1) as f:  # line-buffered: survives a crash
            while not self._stop.wait(self.interval):
                f.write(json.dumps(self.sample(proc)) + "\n")

    def start(self) -> "SystemMonitor":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2 * self.interval + 1)
