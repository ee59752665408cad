"""Start a run's processes with PyTorch's own elastic agent (what ``torchrun`` runs).

``launch(cfg)`` validates the config, prepares the run directory, and runs the per-rank entry
(:mod:`workbench.worker`, on ``--run-dir <dir>``) as ``cluster.nproc`` local ranks through
:func:`torch.distributed.launcher.api.elastic_launch` with a c10d rendezvous; the default starter
forks the ranks from a forkserver that has imported torch once (``workbench/starters/elastic.py``). The agent watches the
ranks every ``cluster.monitor_interval_s``; when one dies it stops the others, so a failure ends the
whole run within seconds, and ``summary.json`` records which rank failed and why.

Ranks' stdout/stderr go to ``logs/`` in the run directory; the launcher draws the progress bar
itself from rank 0's metrics.jsonl (tqdm.auto: a text bar in a terminal, a widget in Jupyter).
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Optional

from omegaconf import DictConfig

from workbench import tracking
from workbench.runs import store as runstore
from workbench.config import validate
from workbench.core import world_size
from workbench.data import fetch as fetch_data
from workbench.starters.local import describe_failure, free_port, port_free  # noqa: F401  (their old import path)
from workbench.trainers import paradigm_of_config


class RunFailed(RuntimeError):
    """A run ended with a failed or diverged rank; ``.run`` is the :class:`~workbench.runs.handle.Run`."""

    def __init__(self, message: str, run) -> None:
        super().__init__(message)
        self.run = run


class _Progress(threading.Thread):
    """Follow rank 0's metrics.jsonl and draw a tqdm.auto bar (terminal or notebook widget)."""

    def __init__(self, run_dir: Path, desc: str) -> None:
        super().__init__(daemon=True)
        self.path = Path(run_dir) / "metrics.jsonl"
        self.desc = desc
        self.stop_evt = threading.Event()

    def run(self) -> None:
        from tqdm.auto import tqdm
        bar, pos, acc, buf = None, 0, None, ""
        while True:
            stopping = self.stop_evt.is_set()
            if self.path.exists():
                with open(self.path) as f:
                    f.seek(pos)
                    buf += f.read()
                    pos = f.tell()
                *lines, buf = buf.split("\n")
                for line in lines:
                    try:
                        r = json.loads(line)
                    except json.JSONDecodeError:
                        continue
                    if r.get("kind") == "start" and bar is None:
                        bar = tqdm(total=r["total_steps"], desc=self.desc, unit="step", dynamic_ncols=True,
                                   mininterval=1.0)
                    elif r.get("kind") == "train" and bar is not None:
                        bar.set_postfix(loss=f"{r['loss']:.3f}", **({"test_acc": f"{acc:.3f}"} if acc is not None else {}),
                                        refresh=False)
                        bar.update(r["step"] - bar.n)
                    elif r.get("kind") == "eval" and bar is not None:
                        acc = r["test_accuracy"]
            if stopping:
                break
            self.stop_evt.wait(0.25)
        if bar is not None:
            bar.close()

    def stop(self) -> None:
        self.stop_evt.set()
        self.join(timeout=5)


def launch(cfg: DictConfig, run_dir: Optional[os.PathLike] = None, progress: Optional[bool] = None,
           check: bool = True):
    """Run ``cfg`` to completion and return its :class:`~workbench.runs.handle.Run`.

    ``run_dir``: where to write (default: a new ``experiments/runs/<date>/<time>_<name>``).
    ``progress``: draw a progress bar (default: ``cfg.trainer.progress``).
    ``check``: raise :class:`RunFailed` if the run fails or diverges (else return the failed Run).
    Raises :class:`~workbench.config.ConfigError` before starting anything if ``cfg`` is invalid.
    """
    from workbench.runs.handle import Run
    from workbench.starters import STARTERS, check_names

    validate(cfg)
    check_names(cfg)
    tracking.preflight(cfg)
    from workbench.config import warnings
    for w in warnings(cfg):  # known-unstable settings: said once, before launch, never refused
        print(f"workbench: warning: {w}", file=sys.stderr)
    starter = STARTERS[cfg.network.starter or cfg.cluster.starter]()
    starter.check(cfg)
    fetch_data(cfg)  # data.download=true: missing files fetched once, here, never in a rank
    run_dir = Path(run_dir) if run_dir is not None else runstore.new_run_dir(cfg)
    runstore.prepare(run_dir, cfg)
    show = cfg.trainer.progress if progress is None else progress
    bar = _Progress(run_dir, f"{cfg.trainer.name} {cfg.model.name}/{cfg.data.name} x{world_size(cfg)}") if show else None
    old_env = os.environ.get("WORKBENCH_LAUNCHER")
    os.environ["WORKBENCH_LAUNCHER"] = "1"
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # each rank sets its own torch thread count
    t0 = time.time()
    error: Optional[dict] = None
    if bar:
        bar.start()
    try:
        error = starter.start(cfg, run_dir)
    except KeyboardInterrupt:
        error = {"error": "interrupted (KeyboardInterrupt)", "failed_rank": None}
    except Exception as e:  # rendezvous or agent failures: no rank ran
        error = {"error": f"launch failed: {type(e).__name__}: {e}", "failed_rank": None}
    finally:
        if bar:
            bar.stop()
        if old_env is None:
            os.environ.pop("WORKBENCH_LAUNCHER", None)
        else:
            os.environ["WORKBENCH_LAUNCHER"] = old_env
    run = Run(run_dir)
    if not starter.finalises():
        if error is not None and check:
            raise RunFailed(f"run failed: {error['error']} (run dir: {run_dir})", run)
        return run
    summary = run.summary or {}
    if error is not None:
        # rank 0 writes the summary, but any rank may hit the NaN first and the rest then only lose
        # a peer: a run is diverged if any rank's totals say so (the staleness suite saw ranks 2-7
        # diverge at steps 25-27 while rank 0 was recorded as 'failed')
        div = run.diverged_rank()
        status = "diverged" if summary.get("status") == "diverged" or div else "failed"
        if status == "diverged":
            error["error"] = summary.get("error") if summary.get("status") == "diverged" else div["error"]
        summary = {**run.partial_summary(), **summary, **error, "status": status,
                   "wall_time_s": time.time() - t0, "run_dir": str(run_dir)}
    summary["bytes_by_rank"] = run.rank_totals()
    summary["paradigm"] = paradigm_of_config(cfg)  # the trainer's own label (ps/async, compressed/topk ...)
    if "verdict" not in summary:  # rank 0 never got to write it (a failed run): judge what it logged
        from workbench import verdict
        summary.update(verdict.summarize(run.records(), cfg, summary.get("status")))
    runstore.write_json(run_dir / "summary.json", summary)
    tracking.finalise(cfg, run_dir, summary)
    if error is not None and check:
        raise RunFailed(f"run {summary['status']}: {summary['error']} (run dir: {run_dir})", run)
    return run


def resume(run_dir: os.PathLike, progress: Optional[bool] = None, check: bool = True):
    """Continue a stopped run in place from its newest complete checkpoint (``workbench resume``)."""
    from workbench import checkpoint as ckpt
    from workbench.core import ConfigError
    run_dir = Path(run_dir)
    if not (run_dir / "config.yaml").is_file():
        raise ConfigError(f"invalid run directory {str(run_dir)!r}: no config.yaml")
    cfg = runstore.load_config(run_dir)
    world = world_size(cfg)
    step = ckpt.latest_complete(run_dir, world)
    if step is None:
        raise ConfigError(f"invalid run directory {str(run_dir)!r}: no complete checkpoint under checkpoints/ "
                          "(the run needs checkpoint.every > 0)")
    ckpt.discard_after(run_dir, step)
    return launch(cfg, run_dir=run_dir, progress=progress, check=check)


def discard(run_dir: os.PathLike, keep: os.PathLike = ".") -> None:
    """Remove a run directory that never started (invalid config), and the date folders above it
    that are left empty (up to, not including, ``keep``)."""
    run_dir = Path(run_dir).resolve()
    shutil.rmtree(run_dir, ignore_errors=True)
    keep = Path(keep).resolve()
    for parent in run_dir.parents:
        if parent == keep or keep not in parent.parents:
            break
        try:
            parent.rmdir()  # only succeeds when empty
        except OSError:
            break
