"""The run directory: everything a run leaves behind, in files a person and pandas can read.

::

    experiments/runs/<date>/<time>_<name>/
        config.yaml        the resolved config (the workers read it; `workbench resume` too)
        env.json           package versions, git commit, host, CPU/GPU
        metrics.jsonl      rank 0: one JSON record per train step ("kind": "train") and evaluation ("eval")
        events.*           the same scalars as TensorBoard event files (`tensorboard --logdir experiments`)
        ranks/rank<r>.jsonl  per rank, per step: bytes sent/received and comm time by category
        system/rank<r>.jsonl per rank, every second: CPU %, memory, GPU utilisation/memory
        logs/              each rank's stdout/stderr and error file (elastic agent)
        summary.json       status completed | failed | diverged, error, final accuracy, throughput, bytes

Lines are flushed as they are written, so a run that dies keeps everything up to its last step.
"""
from __future__ import annotations

import json
import os
import platform
import socket
import subprocess
import sys
import time
from datetime import datetime
from importlib import metadata
from pathlib import Path
from typing import Optional

from omegaconf import DictConfig, OmegaConf


def new_run_dir(cfg: DictConfig, now: Optional[datetime] = None) -> Path:
    """``<output_root>/runs/<YYYY-MM-DD>/<HH-MM-SS>_<name>``, unique even for runs in the same second."""
    now = now or datetime.now()
    base = Path(cfg.output_root) / "runs" / now.strftime("%Y-%m-%d")
    stem = f"{now.strftime('%H-%M-%S')}_{cfg.name}"
    path, i = base / stem, 1
    while path.exists():
        i += 1
        path = base / f"{stem}_{i}"
    return path


def write_text(path: Path, text: str) -> None:
    """Atomic: write a temporary file of this process's own, then rename, so readers never see half
    a file and processes writing the same file at once (every SLURM task of a job) never collide."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def write_json(path: Path, obj) -> None:
    write_text(path, json.dumps(obj, indent=2, default=str))


def read_json(path: Path):
    try:
        return json.loads(Path(path).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def read_jsonl(path) -> list:
    """Every whole record of a JSON-lines file ([] if there is none); a line cut short by a crash is skipped."""
    out = []
    path = Path(path)
    for line in path.read_text().splitlines() if path.exists() else []:
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            pass
    return out


def _git_commit() -> dict:
    root = Path(__file__).resolve().parent.parent
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=5).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=5).stdout.strip() != ""
        return {"commit": commit or None, "dirty": dirty}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}


def environment() -> dict:
    import torch
    pkgs = {}
    for name in ("torch", "torchvision", "hydra-core", "omegaconf", "numpy", "pandas", "scikit-learn",
                 "tensorboard", "plotly", "papermill", "workbench"):
        try:
            pkgs[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pkgs[name] = None
    gpus = []
    if torch.cuda.is_available():
        gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    cpu = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "python": sys.version.split()[0], "packages": pkgs, "git": _git_commit(),
        "host": socket.gethostname(), "platform": platform.platform(), "cpu": cpu,
        "cpu_count": os.cpu_count(), "gpus": gpus, "cuda": torch.version.cuda,
        "cuda_available": torch.cuda.is_available(), "created": datetime.now().isoformat(timespec="seconds"),
    }


def prepare(run_dir: Path, cfg: DictConfig) -> Path:
    """Create the run directory with config.yaml and env.json (before any worker starts)."""
    run_dir = Path(run_dir)
    for sub in ("ranks", "system", "logs"):
        (run_dir / sub).mkdir(parents=True, exist_ok=True)
    if not (run_dir / "config.yaml").exists():
        write_text(run_dir / "config.yaml", OmegaConf.to_yaml(cfg, resolve=True))
    if not (run_dir / "env.json").exists():
        write_json(run_dir / "env.json", environment())
    return run_dir


def load_config(run_dir: Path) -> DictConfig:
    return OmegaConf.load(Path(run_dir) / "config.yaml")


class JsonlWriter:
    """Append-only JSON lines, flushed at most every ``flush_s`` seconds and on close."""

    def __init__(self, path: Path, flush_s: float = 1.0) -> None:
        self.f = open(path, "a", buffering=1 << 16)
        self.flush_s = flush_s
        self._last = time.monotonic()

    def write(self, record: dict) -> None:
        self.f.write(json.dumps(record, default=float) + "\n")
        now = time.monotonic()
        if now - self._last >= self.flush_s:
            self.f.flush()
            self._last = now

    def flush(self) -> None:
        self.f.flush()

    def close(self) -> None:
        if not self.f.closed:
            self.f.flush()
            self.f.close()


class RunLog:
    """What one rank writes into the run directory during training.

    Rank 0 owns metrics.jsonl and the TensorBoard events; every rank writes its own
    ranks/rank<r>.jsonl (communication per step)."""

    def __init__(self, run_dir: Path, rank: int, tensorboard: bool = True) -> None:
        self.run_dir = Path(run_dir)
        self.rank = rank
        self.main = rank == 0
        for sub in ("ranks", "system"):  # another node without a shared file system
            (self.run_dir / sub).mkdir(parents=True, exist_ok=True)
        self.comm = JsonlWriter(self.run_dir / "ranks" / f"rank{rank}.jsonl")
        self.metrics = JsonlWriter(self.run_dir / "metrics.jsonl") if self.main else None
        self.tb = None
        if self.main and tensorboard:
            from torch.utils.tensorboard import SummaryWriter
            self.tb = SummaryWriter(log_dir=str(self.run_dir), flush_secs=5)

    def truncate_after(self, step: int) -> None:
        """Drop records past ``step`` (written by an attempt that died after its last checkpoint),
        so a resumed run's files read as one uninterrupted run."""
        files = [self.run_dir / "ranks" / f"rank{self.rank}.jsonl"] + ([self.run_dir / "metrics.jsonl"] if self.main else [])
        writers = [self.comm] + ([self.metrics] if self.main else [])
        for path, w in zip(files, writers):
            w.flush()
            keep = []
            for line in path.read_text().splitlines() if path.exists() else []:
                try:
                    r = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if r.get("step", 0) <= step or r.get("kind") in ("start", "resume"):
                    keep.append(line)
            tmp = path.with_name(f".{path.name}.tmp")
            tmp.write_text("".join(l + "\n" for l in keep))
            os.replace(tmp, path)
            w.f.close()
            w.f = open(path, "a", buffering=1 << 16)

    def records(self) -> list:
        """This run's metrics.jsonl records so far (rank 0; [] elsewhere)."""
        return read_jsonl(self.run_dir / "metrics.jsonl") if self.main else []

    def comm_step(self, step: int, window: dict, **extra) -> None:
        self.comm.write({"step": step, "rank": self.rank, **extra, "comm": window})

    def log(self, record: dict) -> None:
        """A metrics.jsonl record (rank 0 only); numeric top-level fields also go to TensorBoard."""
        if not self.main:
            return
        self.metrics.write(record)
        # TensorBoard's protobuf writes cost a fraction of a millisecond per scalar on rank 0, which every other rank
        # then waits for at the next collective: train scalars go to TensorBoard every 10th step
        # (metrics.jsonl keeps every step).
        if self.tb is not None and (record.get("kind") != "train" or record.get("step", 0) % 10 == 0):
            prefix = record.get("kind", "train")
            step = record.get("step", 0)
            for k, v in record.items():
                if k in ("step", "kind") or isinstance(v, bool) or not isinstance(v, (int, float)):
                    continue
                self.tb.add_scalar(f"{prefix}/{k}", v, step)
            for cat, c in (record.get("comm") or {}).items():
                self.tb.add_scalar(f"bytes_sent/{cat}", c["sent"], step)
                self.tb.add_scalar(f"comm_time/{cat}", c["time"], step)

    def flush(self) -> None:
        self.comm.flush()
        if self.metrics:
            self.metrics.flush()
        if self.tb:
            self.tb.flush()

    def close(self) -> None:
        self.comm.close()
        if self.metrics:
            self.metrics.close()
        if self.tb:
            self.tb.close()
