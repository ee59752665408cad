"""Reading runs back: :class:`Run` for one run directory, :func:`load_runs` for a table of many
(the input of every dashboard), :func:`load_metrics` for their step-by-step records."""
from __future__ import annotations

import glob as globmod
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, List, Optional, Union

from workbench import runstore

if TYPE_CHECKING:
    import pandas as pd


def _pd():
    """pandas, imported when a table is asked for: the launcher builds a :class:`Run` at the end of
    every run, and the CLI should not pay pandas' import (about 0.7 s of CPU) before its ranks start."""
    import pandas
    return pandas


class Run:
    """One run directory."""

    def __init__(self, path) -> None:
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"Run({str(self.path)!r}, status={self.status!r})"

    @property
    def summary(self) -> Optional[dict]:
        return runstore.read_json(self.path / "summary.json")

    @property
    def status(self) -> Optional[str]:
        return (self.summary or {}).get("status")

    @property
    def config(self):
        return runstore.load_config(self.path)

    @property
    def env(self) -> Optional[dict]:
        return runstore.read_json(self.path / "env.json")

    def records(self) -> List[dict]:
        return runstore.read_jsonl(self.path / "metrics.jsonl")

    def metrics(self) -> pd.DataFrame:
        """metrics.jsonl as a DataFrame; ``comm`` is flattened to ``bytes.<category>`` / ``comm_time.<category>``."""
        rows = []
        for r in self.records():
            comm = r.pop("comm", None) or {}
            for cat, c in comm.items():
                r[f"bytes.{cat}"] = c["sent"]
                r[f"comm_time.{cat}"] = c["time"]
            rows.append(r)
        return _pd().DataFrame(rows)

    def system(self) -> pd.DataFrame:
        pd = _pd()
        frames = [pd.read_json(p, lines=True) for p in sorted((self.path / "system").glob("rank*.jsonl"))
                  if p.stat().st_size > 0]
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()

    def rank_totals(self) -> dict:
        out = {}
        for p in sorted((self.path / "ranks").glob("rank*_totals.json")):
            d = runstore.read_json(p)
            if d:
                out[str(d["rank"])] = {cat: c["sent"] for cat, c in d["comm"].items()}
        return out

    def diverged_rank(self) -> Optional[dict]:
        """The first rank (by number) whose loop stopped on a NaN/inf loss, from its totals file:
        ``{"rank", "error"}``, or None. Any rank may diverge first; the others then lose a peer."""
        found = [d for d in map(runstore.read_json, (self.path / "ranks").glob("rank*_totals.json"))
                 if d and d.get("status") == "diverged"]
        if not found:
            return None
        d = min(found, key=lambda d: d["rank"])
        return {"rank": d["rank"], "error": d.get("error", f"rank {d['rank']}: the loss became NaN/inf")}

    def partial_summary(self) -> dict:
        """What the metrics written so far say (for runs that stopped early)."""
        recs = self.records()
        train = [r for r in recs if r.get("kind") == "train"]
        evals = [r for r in recs if r.get("kind") == "eval"]
        out = {"steps": train[-1]["step"] if train else 0}
        if evals:
            out["final_test_accuracy"] = evals[-1]["test_accuracy"]
            out["final_test_loss"] = evals[-1]["test_loss"]
        return out


def _run_dirs(paths: Union[str, Path, Iterable]) -> List[Path]:
    if isinstance(paths, (str, Path)):
        paths = [paths]
    dirs = []
    for p in paths:
        matches = globmod.glob(str(p), recursive=True) or []
        for m in matches:
            m = Path(m)
            if (m / "config.yaml").exists():
                dirs.append(m)
            elif m.is_dir():
                dirs.extend(sorted(c.parent for c in m.rglob("config.yaml") if c.parent.name != ".hydra"))
    return sorted(set(dirs))


def _flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def load_runs(paths: Union[str, Path, Iterable] = "experiments") -> pd.DataFrame:
    """One row per run found under ``paths`` (directories or globs): the summary's fields (among
    them ``verdict``: learned | did_not_learn | unstable | diverged, see :mod:`workbench.verdict`)
    plus the resolved config flattened as ``cfg.<key>`` columns."""
    from omegaconf import OmegaConf
    rows = []
    for d in _run_dirs(paths):
        run = Run(d)
        s = run.summary or {"status": "running-or-lost"}
        s = {k: v for k, v in s.items() if k not in ("bytes_by_category", "bytes_by_rank")}
        try:
            config = run.config
            cfg = _flatten(OmegaConf.to_container(config, resolve=True), "cfg.")
        except Exception:
            config, cfg = None, {}
        if "verdict" not in s and config is not None and s.get("status") != "running-or-lost":
            from workbench import verdict  # runs written before summaries carried one
            s.update(verdict.summarize(run.records(), config, s.get("status")))
        rows.append({"run_dir": str(d), "run": d.name, **s, **cfg})
    return _pd().DataFrame(rows)


def load_metrics(paths: Union[str, Path, Iterable] = "experiments") -> pd.DataFrame:
    """Every run's metrics.jsonl records, with ``run_dir`` and ``run`` columns."""
    frames = []
    for d in _run_dirs(paths):
        m = Run(d).metrics()
        if len(m):
            m.insert(0, "run", d.name)
            m.insert(0, "run_dir", str(d))
            frames.append(m)
    pd = _pd()
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
