"""``--verify``: each planned paradigm briefly, here (loopback, or every rank behind its own shaped
link), its rank 0's step time and bytes per step beside the prediction.

Progress: a bar across the paradigms (tqdm.auto: a terminal bar, a widget in a notebook) with each
run's own step bar from the launcher; where stderr is no terminal (a log file, CI), one line per
paradigm with i/N and an estimate of the time left."""
from __future__ import annotations

import math
import statistics
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from workbench.plan.rows import EMULATED, LOOPBACK, Variant, here

VERIFY_SKIP = 12  # steps left out of a verification run (DDP's bucket rebuild, PowerSGD's start)
VERIFY_STEPS = 8  # steps measured after them, at least: a whole number of BMUF blocks and EASGD periods
VERIFY_SECONDS = 1.0  # ... and as many more whole periods as fill about this long (predicted): a
# median of 8 small-CNN steps of 5-15 ms is one scheduler quantum's noise
# (docs/notes/2026-12-06-bench-history.md)
VERIFY_MAX_STEPS = 400


def network_overrides(bw: str) -> List[str]:
    """The run that verifies a row at ``bw``: loopback, or every rank behind its own shaped link."""
    if bw.startswith(EMULATED):
        return ["network=emulated", f"network.bandwidth={bw[len(EMULATED):]}"]
    return ["network=loopback"]


def link_from_overrides(overrides: Sequence[str]) -> Tuple[Optional[str], List[str]]:
    """The link that Hydra overrides naming a network stand for (``network=emulated
    network.bandwidth=700mbit`` -> ``emulated:700mbit``; ``network=loopback`` -> ``loopback``), or
    None where they name none, and the overrides without them. What the planner cannot plan or
    verify (a latency, jitter or per-node rate, another network) is one ConfigError."""
    mine = [o for o in overrides if o.split("=", 1)[0].lstrip("+~").split(".")[0] == "network"]
    if not mine:
        return None, list(overrides)
    import workbench
    from workbench.core import ConfigError
    from workbench.network import parse_time
    net = workbench.compose(mine).network
    if net.name not in ("emulated", "loopback"):
        raise ConfigError(f"invalid value {net.name!r} for network: the planner plans and verifies network=loopback "
                          f"or network=emulated (or --bandwidth)")
    for key in ("latency", "jitter"):
        if parse_time(net.get(key, "0ms"), f"network.{key}") > 0:
            raise ConfigError(f"invalid value {net[key]!r} for network.{key}: the planner plans a link's rate only "
                              f"(its --latency is the model's per-message cost)")
    if net.get("node_bandwidth"):
        raise ConfigError("invalid value for network.node_bandwidth: the planner plans one rate for every link")
    rest = [o for o in overrides if o not in mine]
    return (f"{EMULATED}{net.bandwidth}" if net.name == "emulated" else LOOPBACK), rest


def check_verifiable(bandwidths: Sequence[str]) -> None:
    """--verify with emulated links needs root and iproute2: say so before anything is profiled."""
    if any(b.startswith(EMULATED) for b in bandwidths):
        from workbench.network import require_host
        require_host("'emulated:…' for --bandwidth with --verify", "verify on loopback")


def verify_variant(v: Variant, root: Path, steps: int = VERIFY_STEPS, skip: int = VERIFY_SKIP,
                   bw: str = LOOPBACK, progress: bool = False) -> dict:
    """Run ``v`` for skip + steps steps here (loopback, or ``emulated:<rate>`` links; ``skip`` at
    least the paradigm's :attr:`~workbench.spec.ParadigmSpec.steady_after`) and measure rank
    0's step time (the median; the mean over whole periods where the bytes differ by step) and its
    bytes per step by category over the last ``steps`` steps. ``progress``: the launcher's step bar."""
    import workbench
    from workbench.spec import spec_of
    skip = max(skip, spec_of(v.cfg.trainer.name).steady_after(v.cfg))  # e.g. PowerSGD's start under BMUF, in rounds
    cfg = workbench.compose([*v.overrides, *network_overrides(bw), f"trainer.max_steps={skip + steps}",
                             "trainer.eval_every=100000", "trainer.progress=false", "checkpoint.every=0",
                             f"output_root={root}"])
    return measured_of(workbench.launch(cfg, progress=progress, check=False), skip)


def measured_of(run, skip: int = VERIFY_SKIP) -> dict:
    """Rank 0's step time and bytes per step by category of a finished run, over its steps after
    ``skip`` (:func:`verify_variant`'s measurement)."""
    if run.summary.get("status") != "completed":
        return {"measured_status": run.summary.get("status"), "run_dir": str(run.path)}
    recs = [r for r in run.records() if r.get("kind") == "train" and r["step"] > skip]
    by: Dict[str, float] = {}
    for r in recs:  # whole bytes summed, then one division: exact where every step's count is
        for cat, c in (r.get("comm") or {}).items():
            by[cat] = by.get(cat, 0) + c["sent"]
    by = {k: v_ / len(recs) for k, v_ in by.items() if v_}
    # A paradigm that communicates every few steps (BMUF's block, EASGD's period) has one slow step
    # per period, which a median drops: its step is the mean over the whole periods measured, what
    # the model predicts. Every step alike: the median, robust to a descheduled step.
    periodic = len({r.get("bytes_sent") for r in recs}) > 1
    step = (statistics.mean if periodic else statistics.median)(r["step_time"] for r in recs)
    return {"measured_step_s": step, "measured_step_stat": "mean" if periodic else "median",
            "measured_bytes_per_step": sum(by.values()),
            "measured_bytes_by_category": by, "measured_steps": len(recs), "run_dir": str(run.path)}


def verify_steps(predicted_step_s: float) -> int:
    """Steps a verification measures: whole periods of VERIFY_STEPS filling about VERIFY_SECONDS
    by the prediction, at least one period, at most VERIFY_MAX_STEPS."""
    periods = max(1, math.ceil(VERIFY_SECONDS / max(predicted_step_s, 1e-6) / VERIFY_STEPS))
    return min(VERIFY_MAX_STEPS // VERIFY_STEPS, periods) * VERIFY_STEPS


def verify(rows: List[dict], vs: Dict[int, List[Variant]], root: Path, log=print,
           bars: Optional[bool] = None) -> List[dict]:
    """Measure every row on a bandwidth here (:func:`here`) with :func:`verify_variant`, in place.
    ``bars``: draw a bar across the rows and the launcher's step bar per run (default: where stderr
    is a terminal or in a notebook); otherwise ``log`` gets one line per row, ``verify i/N: …``,
    with an estimate of the time left."""
    by_label = {(w, v.label): v for w in vs for v in vs[w]}
    todo = [r for r in rows if here(r["bandwidth"])]
    progress = Progress(len(todo), log, interactive() if bars is None else bars)
    for r in todo:
        v = by_label[(r["workers"], r["paradigm"])]
        steps = verify_steps(r["predicted_step_s"])
        progress.start(f"{r['paradigm']} on {r['workers']} ranks, {r['bandwidth']}, {steps} steps")
        scored(r, verify_variant(v, root, steps=steps, bw=r["bandwidth"], progress=progress.bars))
        progress.done()
    progress.close()
    return rows


def interactive() -> bool:
    """Whether bars can be drawn: stderr is a terminal, or this runs in a notebook's kernel, where
    tqdm.auto draws a widget (the kernel test is tqdm.autonotebook's)."""
    if sys.stderr.isatty():
        return True
    ipython = sys.modules.get("IPython")
    try:
        shell = ipython.get_ipython() if ipython is not None else None
    except Exception:  # an IPython without a shell
        return False
    return shell is not None and "IPKernelApp" in getattr(shell, "config", {})


class Progress:
    """Progress across ``total`` verification runs: a tqdm.auto bar (``bars``), or one line per run
    through ``log``, ``verify i/N: <what> ...`` with the time left estimated from the runs done."""

    def __init__(self, total: int, log=print, bars: bool = False) -> None:
        self.total, self.log, self.bars = total, log, bars
        self.i, self.t0 = 0, time.monotonic()
        self.bar = None
        if bars and total:
            from tqdm.auto import tqdm
            self.bar = tqdm(total=total, desc="verify", unit="run", dynamic_ncols=True)

    def start(self, what: str) -> None:
        self.i += 1
        if self.bar is not None:
            self.bar.set_postfix_str(what)
            return
        done = self.i - 1
        left = f" (about {_duration((time.monotonic() - self.t0) / done * (self.total - done))} left)" if done else ""
        self.log(f"verify {self.i}/{self.total}: {what} ...{left}")

    def done(self) -> None:
        if self.bar is not None:
            self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _duration(s: float) -> str:
    return f"{s:.0f} s" if s < 90 else f"{s / 60:.0f} min"


def scored(row: dict, measured: dict) -> dict:
    """``row`` (a prediction) with ``measured`` (what :func:`verify_variant` returned) and the
    errors of its step time and bytes against them."""
    row.update(measured)
    if "measured_step_s" in measured:
        row["error"] = row["predicted_step_s"] / measured["measured_step_s"] - 1
        mb = measured["measured_bytes_per_step"]
        row["bytes_error"] = (row["predicted_bytes_per_step"] / mb - 1) if mb else (0.0 if not row["predicted_bytes_per_step"] else math.inf)
    return row
