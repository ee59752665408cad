"""One run directory read back: :class:`Run`, what :func:`workbench.launch` returns (its summary,
config, records; tables of many runs are :mod:`workbench.runs.table`'s)."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, List, Optional

from workbench.runs import store

if TYPE_CHECKING:
    import pandas as pd


def _pd():
    """pandas, imported when a table is asked for: the launcher builds a :class:`Run` at the end of
    every run, and the CLI should not pay pandas' import (most of a second of CPU) before its ranks start."""
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
        return store.read_json(self.path / "summary.json")

    @property
    def status(self) -> Optional[str]:
        return (self.summary or {}).get("status")

    @property
    def config(self):
        return store.load_config(self.path)

    @property
    def env(self) -> Optional[dict]:
        return store.read_json(self.path / "env.json")

    def records(self) -> List[dict]:
        return store.read_jsonl(self.path / "metrics.jsonl")

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
            d = store.read_json(p)
            if d:
                out[str(d["rank"])] = {cat: c["sent"] for cat, c in d["comm"].items()}
        return out

    def diverged_rank(self) -> Optional[dict]:
        """The first rank (by number) whose loop stopped on a NaN/inf loss, from its totals file:
        ``{"rank", "error"}``, or None. Any rank may diverge first; the others then lose a peer."""
        found = [d for d in map(store.read_json, (self.path / "ranks").glob("rank*_totals.json"))
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
