"""Checkpoints: everything a rank needs to continue exactly where it stopped.

Every ``checkpoint.every`` steps each rank writes its own file
``checkpoints/step<NNNNNNNN>/rank<r>.pt`` (write to a temporary name, then rename: a crash never
leaves half a file). Ranks hold different state (parameter-server shards, compressor error buffers,
staleness clocks, RNG streams), so there is one file per rank and no barrier: a checkpoint is
*complete* when all ranks' files exist, and a restart resumes from the newest complete one. Each rank
keeps its ``checkpoint.keep`` (>= 2) newest files, so the previous complete checkpoint survives a
crash in the middle of writing the next.

Files hold only tensors, numbers, strings, lists and dicts, and are read with
``torch.load(weights_only=True)``: loading a checkpoint never unpickles arbitrary objects.
"""
from __future__ import annotations

import os
import random
import re
import shutil
from pathlib import Path
from typing import Optional

import numpy as np
import torch

_STEP = re.compile(r"^step(\d{8})$")


def rng_state() -> dict:
    st = np.random.get_state()
    out = {"torch": torch.get_rng_state(), "python": list(random.getstate()[1]), "python_version": random.getstate()[0],
           "python_gauss": random.getstate()[2],
           "numpy": {"key": torch.from_numpy(st[1].astype(np.int64)), "pos": int(st[2]), "has_gauss": int(st[3]),
                     "cached": float(st[4])}}
    if torch.cuda.is_available():
        out["cuda"] = torch.cuda.get_rng_state_all()
    return out


def set_rng_state(s: dict) -> None:
    torch.set_rng_state(s["torch"])
    random.setstate((s["python_version"], tuple(s["python"]), s["python_gauss"]))
    n = s["numpy"]
    np.random.set_state(("MT19937", n["key"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["cached"]))
    if "cuda" in s and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(s["cuda"])


def step_dir(root: Path, step: int) -> Path:
    return Path(root) / "checkpoints" / f"step{step:08d}"


def save(root: Path, rank: int, step: int, state: dict, keep: int = 2) -> Path:
    d = step_dir(root, step)
    d.mkdir(parents=True, exist_ok=True)
    path = d / f"rank{rank}.pt"
    tmp = d / f".rank{rank}.pt.tmp"
    torch.save(state, tmp)
    os.replace(tmp, path)
    # keep this rank's `keep` newest files; drop emptied step folders
    mine = sorted(p for p in (Path(root) / "checkpoints").glob(f"step*/rank{rank}.pt"))
    for old in mine[:-max(2, keep)]:
        old.unlink(missing_ok=True)
        try:
            old.parent.rmdir()
        except OSError:
            pass
    return path


def latest_complete(root: Path, world_size: int) -> Optional[int]:
    """The newest step for which every rank's file exists, or None."""
    base = Path(root) / "checkpoints"
    if not base.is_dir():
        return None
    steps = []
    for d in base.iterdir():
        m = _STEP.match(d.name)
        if m and all((d / f"rank{r}.pt").exists() for r in range(world_size)):
            steps.append(int(m.group(1)))
    return max(steps) if steps else None


def load(root: Path, rank: int, step: int) -> dict:
    return torch.load(step_dir(root, step) / f"rank{rank}.pt", weights_only=True, map_location="cpu")


def resume(root: Path, rank: int, world_size: int, meter, apply) -> Optional[dict]:
    """The one resume path of every rank (a trainer's worker or a parameter server): load this
    rank's file of the newest complete checkpoint, hand it to ``apply`` (the rank's own state), then
    restore the RNG and the meter's totals. None when there is no complete checkpoint."""
    step = latest_complete(root, world_size)
    if step is None:
        return None
    state = load(root, rank, step)
    apply(state)
    set_rng_state(state["rng"])
    meter.restore_totals(state.get("meter", {}))
    return state


def discard_after(root: Path, step: int) -> None:
    """Remove (incomplete) checkpoints newer than ``step``: they belong to the attempt that failed."""
    base = Path(root) / "checkpoints"
    for d in base.glob("step*"):
        m = _STEP.match(d.name)
        if m and int(m.group(1)) > step:
            shutil.rmtree(d, ignore_errors=True)
