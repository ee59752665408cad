"""Experiment trackers: rank 0 also logs the run where the team keeps its runs (``tracking=``).

    python -m workbench tracking=mlflow                    # MLflow SQLite store <output_root>/mlflow.db
    mlflow ui --backend-store-uri sqlite:///experiments/mlflow.db   # browse it (docs/tracking.md)
    python -m workbench tracking=mlflow tracking.uri=http://mlflow.internal:5000 tracking.experiment=ps-sweep
    python -m workbench tracking=wandb                     # W&B offline, under <output_root>/wandb; `wandb sync` later
    python -m workbench tracking=wandb tracking.mode=online tracking.experiment=my-project

What rank 0 logs: the resolved config as parameters (dotted keys: ``trainer.name``), every train and
eval record of metrics.jsonl as step metrics (``train/loss``, ``eval/test_accuracy``), the summary
(numbers as ``summary/<key>`` metrics, status, verdict and error as tags) and the run directory
without ``checkpoints/`` as an artifact. ``tracking.json`` in the run directory says where it went
(backend, URI, run id) or why it did not.

Never in the way of training: the step loop does not know the tracker exists. A background thread in
rank 0 starts the tracker (a slow server costs the run nothing) and follows metrics.jsonl, which rank 0
flushes every second anyway. At the end rank 0 waits at most ``tracking.timeout_s`` for it. Any
exception of the tracker gives one line ``workbench: tracking (<name>) disabled: <why>`` (rank 0's log,
tracking.json, and the launcher prints it again) and the run goes on untracked.

What is an error and what a warning: ``tracking.name=<unknown>`` (or ``tracking=<unknown>``) is a
config error, exit 2 before anything starts: it is a typo. The tracker's package not installed, or a
store that cannot be reached, is a warning: the run is what matters, and a sweep must not die on a node
that lacks mlflow.

Afterwards the launcher, which writes the final summary (failure cause, verdict), hands it to the
tracker too where the backend can reopen a run from another process (MLflow); W&B keeps the summary
rank 0 logged.

A tracker is one module here with a :class:`Tracker` subclass registered in :data:`TRACKERS`.
"""
from __future__ import annotations

import importlib.util
import json
import math
import os
import sys
import threading
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple

from omegaconf import DictConfig, OmegaConf

from workbench.runs import store as runstore

# name -> (module under workbench.tracking, the package it needs, the extra that installs it)
TRACKERS: Dict[str, Tuple[str, str, str]] = {
    "mlflow": ("mlflow", "mlflow", "mlflow"),
    "wandb": ("wandb", "wandb", "wandb"),
}
INFO_FILE = "tracking.json"


class Tracker:
    """One backend. Every method may raise; the caller turns that into one warning."""

    def __init__(self, cfg: DictConfig, run_dir: Path) -> None:
        self.cfg, self.run_dir = cfg, Path(run_dir)

    def start(self, params: Dict[str, str]) -> dict:
        """Open a run, log the parameters; return what tracking.json records (uri, run_id...)."""
        raise NotImplementedError

    def log_metrics(self, rows: List[Tuple[int, Dict[str, float]]]) -> None:
        """``rows``: (step, {key: value}) in step order."""
        raise NotImplementedError

    def log_summary(self, summary: dict) -> None:
        raise NotImplementedError

    def log_run_dir(self) -> None:
        raise NotImplementedError

    def log_file(self, path: Path) -> None:
        """One file into the run's artifacts (the launcher's final summary.json)."""

    def end(self, status: str) -> None:
        raise NotImplementedError

    @classmethod
    def reopen(cls, cfg: DictConfig, run_dir: Path, info: dict) -> Optional["Tracker"]:
        """The same run, from another process (the launcher), or None where the backend cannot."""
        return None


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text[:300]}" if text else type(e).__name__


def _warn(name: str, why: str) -> str:
    line = f"workbench: tracking ({name}) disabled: {why}"
    print(line, file=sys.stderr, flush=True)
    return line


def tracker_name(cfg: DictConfig) -> str:
    """``none`` also for the config of a run made before trackers existed (``workbench resume``)."""
    return OmegaConf.select(cfg, "tracking.name", default="none") or "none"


def tracker_class(name: str):
    import importlib
    module, _, _ = TRACKERS[name]
    return importlib.import_module(f"{__name__}.{module}").TRACKER


def preflight(cfg: DictConfig) -> Optional[str]:
    """Before launch: ConfigError for an unknown tracker; the warning line (printed) if its package
    is missing, else None."""
    from workbench.core import ConfigError
    name = tracker_name(cfg)
    if name == "none":
        return None
    if name not in TRACKERS:
        raise ConfigError(f"invalid value {name!r} for tracking.name: one of none, {', '.join(TRACKERS)}")
    _, package, extra = TRACKERS[name]
    if importlib.util.find_spec(package) is None:
        return _warn(name, f"the {package} package is not installed (pip install 'workbench[{extra}]'); the run goes on untracked")
    return None


def flatten(d, prefix: str = "") -> Iterator[Tuple[str, object]]:
    if isinstance(d, dict):
        for k, v in d.items():
            yield from flatten(v, f"{prefix}{k}." if not isinstance(v, dict) or v else f"{prefix}{k}")
    elif prefix:
        yield prefix.rstrip("."), d


def config_params(cfg: DictConfig) -> Dict[str, str]:
    """The resolved config as flat ``{"trainer.name": "sync"}`` strings (lists as JSON)."""
    out = {}
    for k, v in flatten(OmegaConf.to_container(cfg, resolve=True)):
        out[k] = json.dumps(v) if isinstance(v, (list, tuple)) else str(v)
    return out


def split_summary(summary: dict) -> Tuple[Dict[str, float], Dict[str, str]]:
    """Numbers (finite, not bools) become metrics ``summary/<key>``; everything else tags."""
    metrics, tags = {}, {}
    for k, v in flatten(summary or {}):
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            if math.isfinite(v):
                metrics[f"summary/{k}"] = float(v)
        elif v is not None:
            tags[k] = (json.dumps(v) if isinstance(v, (list, tuple)) else str(v))[:5000]
    return metrics, tags


def record_metrics(r: dict) -> Optional[Tuple[int, Dict[str, float]]]:
    """A metrics.jsonl train/eval record as (step, {"train/loss": ...}); None for other kinds."""
    kind = r.get("kind")
    if kind not in ("train", "eval"):
        return None
    vals = {f"{kind}/{k}": float(v) for k, v in r.items()
            if k not in ("step", "kind") and isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}
    return int(r.get("step", 0)), vals


def run_dir_files(run_dir: Path) -> Iterator[Path]:
    """What the artifact holds: the run directory without checkpoints (big, and not a result)."""
    for p in sorted(Path(run_dir).rglob("*")):
        rel = p.relative_to(run_dir)
        if p.is_file() and rel.parts[0] != "checkpoints" and not p.name.endswith(".tmp"):
            yield p


class Session(threading.Thread):
    """Rank 0's tracker thread: start, follow metrics.jsonl, finish. Never raises."""

    def __init__(self, cfg: DictConfig, run_dir: Path) -> None:
        super().__init__(daemon=True, name="workbench-tracking")
        self.cfg, self.run_dir, self.name_ = cfg, Path(run_dir), tracker_name(cfg)
        self.stop_evt = threading.Event()
        self.final: Optional[Tuple[str, Optional[dict]]] = None
        self.info: dict = {"backend": self.name_}

    def _write_info(self, **kw) -> None:
        self.info.update(kw)
        try:
            runstore.write_json(self.run_dir / INFO_FILE, self.info)
        except OSError:
            pass

    def _follow(self, tracker: Tracker, pos: int, buf: str) -> Tuple[int, str]:
        path = self.run_dir / "metrics.jsonl"
        if not path.exists():
            return pos, buf
        with open(path) as f:
            f.seek(pos)
            buf += f.read()
            pos = f.tell()
        *lines, buf = buf.split("\n")
        rows = []
        for line in lines:
            try:
                row = record_metrics(json.loads(line))
            except (json.JSONDecodeError, TypeError, ValueError):
                continue
            if row and row[1]:
                rows.append(row)
        if rows:
            tracker.log_metrics(rows)
        return pos, buf

    def run(self) -> None:
        tracker = None
        _, package, extra = TRACKERS[self.name_]
        if importlib.util.find_spec(package) is None:
            why = f"the {package} package is not installed (pip install 'workbench[{extra}]'); the run goes on untracked"
            launched = os.environ.get("WORKBENCH_LAUNCHER") == "1"  # the launcher said so already (preflight)
            line = f"workbench: tracking ({self.name_}) disabled: {why}" if launched else _warn(self.name_, why)
            self._write_info(state="disabled", warning=line, warned_at_launch=launched)
            return
        try:
            tracker = tracker_class(self.name_)(self.cfg, self.run_dir)
            self._write_info(**tracker.start(config_params(self.cfg)), state="running")
            pos, buf = 0, ""
            while True:
                stopping = self.stop_evt.is_set()
                pos, buf = self._follow(tracker, pos, buf)
                if stopping:
                    break
                self.stop_evt.wait(1.0)
            status, summary = self.final or ("failed", None)
            if summary:
                tracker.log_summary(summary)
            if self.cfg.tracking.artifacts:
                tracker.log_run_dir()
            tracker.end(status)
            self._write_info(state="ended", status=status)
        except BaseException as e:  # noqa: BLE001 - a tracker must never take the run down
            self._write_info(state="disabled", warning=_warn(self.name_, _one_line(e)))
            if tracker is not None:
                try:
                    tracker.end("failed")
                except BaseException:  # noqa: BLE001
                    pass

    def finish(self, status: str, summary: Optional[dict], timeout_s: Optional[float] = None) -> None:
        """Log what is left, the summary and the run directory; wait at most ``timeout_s``."""
        self.final = (status, summary)
        self.stop_evt.set()
        timeout = self.cfg.tracking.timeout_s if timeout_s is None else timeout_s
        self.join(timeout=timeout)
        if self.is_alive():
            self._write_info(state="abandoned", warning=_warn(
                self.name_, f"still logging after tracking.timeout_s={timeout:g} s; the run ends without waiting"))


def start(cfg: DictConfig, run_dir: Path) -> Optional[Session]:
    """Rank 0: start the tracker thread (None for tracking=none or an unusable tracker)."""
    name = tracker_name(cfg)
    if name == "none":
        return None
    if name not in TRACKERS:
        _warn(name, "unknown tracker")
        return None
    s = Session(cfg, run_dir)
    s.start()
    return s


def finalise(cfg: DictConfig, run_dir: Path, summary: dict, timeout_s: float = 30.0) -> None:
    """Launcher, after the final summary: repeat rank 0's warning, and hand the final summary (failure
    cause, verdict) to backends that can reopen the run. Never raises; waits at most ``timeout_s``."""
    name = tracker_name(cfg)
    if name not in TRACKERS:
        return
    info = runstore.read_json(Path(run_dir) / INFO_FILE) or {}
    if info.get("warning") and not info.get("warned_at_launch"):
        print(info["warning"], file=sys.stderr, flush=True)
    if not info.get("run_id") or info.get("state") == "disabled":
        return

    def update():
        try:
            t = tracker_class(name).reopen(cfg, Path(run_dir), info)
            if t is None:
                return
            t.log_summary(summary)
            t.log_file(Path(run_dir) / "summary.json")
            t.end(summary.get("status", "failed"))
        except BaseException as e:  # noqa: BLE001
            _warn(name, f"final summary not logged: {_one_line(e)}")

    th = threading.Thread(target=update, daemon=True)
    th.start()
    th.join(timeout_s)

