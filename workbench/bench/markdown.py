"""Keep BENCHMARKS.md up to date: each benchmark owns one section, replaced in place. Every section
says where and when it was measured (machine, load average before and after, date), so a reader can
tell a quiet machine's figures from a busy one's."""
from __future__ import annotations

import os
import platform
import re
from datetime import datetime, timezone
from pathlib import Path

from workbench.bench import STARTED


def _cpu_model() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine() -> str:
    """One line: CPU, cores, memory, GPU, torch, the load average (1 min) when the suite started and
    now, and the date."""
    import torch
    try:
        mem = f", {os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GiB"
    except (ValueError, OSError, AttributeError):
        mem = ""
    dev = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    now = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    began = datetime.fromtimestamp(STARTED[0], timezone.utc)
    return (f"{_cpu_model()}, {os.cpu_count()} cores{mem}, {dev}, torch {torch.__version__}; "
            f"load average {STARTED[1][0]:.1f} before, {now:.1f} after; {began:%Y-%m-%d %H:%M} UTC")


def update_section(path: Path, title: str, body: str) -> None:
    """Replace (or append) the section ``<!-- bench:title -->`` … ``<!-- /bench:title -->``."""
    path = Path(path)
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    block = (f"<!-- bench:{title} -->\n### {title}\n\n_Measured by the command below; regenerate it the same way. "
             f"Machine: {machine()}._\n\n{body.strip()}\n<!-- /bench:{title} -->")
    pat = re.compile(rf"<!-- bench:{re.escape(title)} -->.*?<!-- /bench:{re.escape(title)} -->", re.S)
    text = pat.sub(lambda _: block, text) if pat.search(text) else text.rstrip() + "\n\n" + block + "\n"
    path.write_text(text)
