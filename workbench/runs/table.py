"""Runs as tables: :func:`load_runs` (one row per run, the input of every dashboard) and
:func:`load_metrics` (their step-by-step records), labelled by paradigm, joined, filtered and
summarised. No plotting and no launching here: :mod:`workbench.analysis.figures` draws these tables,
:mod:`workbench.variants` launches the runs.

Conventions: bytes in MiB (2**20); a run is labelled by its *paradigm* (the trainer's own label,
``ps/async``, ``compressed/powersgd``), plus its workers and the ``by`` columns where labels collide.
"""
from __future__ import annotations

import glob as globmod
from pathlib import Path
from typing import Iterable, List, Optional, Sequence, Tuple, Union

import numpy as np
import pandas as pd

from workbench.runs import store
from workbench.runs.handle import Run

MiB = float(2**20)
COMPRESSION_COLUMNS = ("compression_ratio", "encode_ms", "decode_ms", "compress_comm_ms", "payload_bytes", "dense_bytes")


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
    return pd.DataFrame(rows)


def load_metrics(paths: Union[str, Path, Iterable] = "experiments") -> pd.DataFrame:
    """Every run's metrics.jsonl records, with ``run_dir`` and ``run`` columns."""
    frames = []
    for d in _run_dirs(paths):
        m = Run(d).metrics()
        if len(m):
            m.insert(0, "run", d.name)
            m.insert(0, "run_dir", str(d))
            frames.append(m)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def paradigm_of(row) -> str:
    """The run's paradigm label (``ps/async``, ``staleness/n=3``, ``stanza/n_f=2``,
    ``compressed/powersgd``; ``sync``) from its flattened ``cfg.*`` columns: each trainer's own
    ``paradigm`` (workbench.trainers.paradigm_of), the labels ``workbench.plan`` uses too. A run
    records its label in ``summary.json`` (``paradigm``); only a run without one (written before
    that field, or still running) has it derived from its config."""
    recorded = row.get("paradigm")
    if isinstance(recorded, str) and recorded:
        return recorded
    from workbench.trainers import paradigm_of as label
    name = row.get("cfg.trainer.name") or row.get("trainer")
    return label(lambda k: name if k == "trainer.name" else row.get(f"cfg.{k}"))


def label_runs(runs: pd.DataFrame, by: Optional[Sequence[str]] = None) -> pd.DataFrame:
    """Add ``paradigm`` and a unique, readable ``label`` per run (``paradigm W=<workers>``, plus the
    values of the ``by`` columns, plus the run name where that still collides)."""
    runs = runs.copy()
    if runs.empty:
        for c in ("paradigm", "label"):
            runs[c] = pd.Series(dtype=str)
        return runs
    runs["paradigm"] = [paradigm_of(r) for r in runs.to_dict("records")]
    workers = runs["workers"] if "workers" in runs else runs.get("cfg.cluster.nproc")
    labels = []
    for i, r in enumerate(runs.to_dict("records")):
        w = workers.iloc[i] if workers is not None else None
        lab = r["paradigm"] + (f" W={int(w)}" if w is not None and not pd.isna(w) else "")
        for col in by or ():
            lab += f" {col.split('.')[-1]}={r.get(col)}"
        labels.append(lab)
    runs["label"] = labels
    dup = runs["label"].duplicated(keep=False)
    runs.loc[dup, "label"] = runs.loc[dup, "label"] + " (" + runs.loc[dup, "run"].astype(str) + ")"
    return runs


def with_variants(runs: pd.DataFrame, table: pd.DataFrame) -> pd.DataFrame:
    """Replace each run's label by the notebook's variant name (from :func:`workbench.variants.launch_variants`)."""
    names = dict(zip(table["run_dir"], table["variant"]))
    runs = runs.copy()
    runs["label"] = [names.get(d, l) for d, l in zip(runs["run_dir"], runs["label"])]
    return runs


def attach(metrics: pd.DataFrame, runs: pd.DataFrame, columns: Sequence[str] = ("paradigm", "label", "workers")) -> pd.DataFrame:
    """The step records with the run table's ``columns`` joined on ``run_dir``."""
    if metrics.empty:
        return metrics
    cols = ["run_dir"] + [c for c in columns if c in runs and c not in metrics]
    return metrics.merge(runs[cols], on="run_dir", how="left")


def load(paths="experiments", by: Optional[Sequence[str]] = None, completed_only: bool = True,
         variants: Optional[pd.DataFrame] = None) -> Tuple[pd.DataFrame, pd.DataFrame]:
    """``(runs, metrics)`` for every run under ``paths`` (directories, globs or Run objects), both
    labelled (``paradigm``, ``label``; the variant names of :func:`workbench.variants.launch_variants`' table when
    ``variants`` is given); failed runs are dropped unless ``completed_only=False``."""
    if not isinstance(paths, (str, Path)):
        paths = [str(getattr(p, "path", p)) for p in paths]
    runs = load_runs(paths)
    if runs.empty:
        return label_runs(runs), pd.DataFrame()
    if completed_only and "status" in runs:
        runs = runs[runs["status"] == "completed"].reset_index(drop=True)
    runs = label_runs(runs, by)
    if variants is not None and len(variants):
        runs = with_variants(runs, variants)
    metrics = load_metrics(list(runs["run_dir"])) if len(runs) else pd.DataFrame()
    return runs, attach(metrics, runs)


def labelled(metrics: pd.DataFrame) -> pd.DataFrame:
    m = metrics.copy()
    if "label" not in m:
        m["label"] = m["run"] if "run" in m else "run"
    if "paradigm" not in m:
        m["paradigm"] = m["label"]
    return m


def select(runs: pd.DataFrame, metrics: pd.DataFrame, query: str = "") -> Tuple[pd.DataFrame, pd.DataFrame]:
    """Keep the runs matching a pandas ``query`` on the run table (e.g.
    ``"`cfg.model.name` == 'small_cnn' and workers <= 4"``) and their step records."""
    if not query or runs.empty:
        return runs, metrics
    runs = runs.query(query).reset_index(drop=True)
    return runs, (metrics[metrics["run_dir"].isin(runs["run_dir"])] if not metrics.empty else metrics)


def summary_table(runs: pd.DataFrame, columns: Optional[Sequence[str]] = None) -> pd.DataFrame:
    """One readable row per run: accuracy, throughput, MiB per step, wall time."""
    cols = columns or ["label", "paradigm", "workers", "steps", "final_test_accuracy", "samples_per_s",
                       "bytes_per_step", "wall_time_s", "status", "verdict"]
    out = runs[[c for c in cols if c in runs]].copy()
    if "bytes_per_step" in out:
        out["bytes_per_step"] = out["bytes_per_step"] / MiB
        out = out.rename(columns={"bytes_per_step": "MiB_per_step"})
    return out.reset_index(drop=True)


def time_to_accuracy_table(metrics: pd.DataFrame, target: float) -> pd.DataFrame:
    """Per run: the first evaluation whose test accuracy reaches ``target`` — its wall-clock time and
    step (NaN if never reached), and the best accuracy seen."""
    cols = ["label", "paradigm", "time_to_target_s", "steps_to_target", "best_accuracy", "reached"]
    if metrics.empty or "test_accuracy" not in metrics:
        return pd.DataFrame(columns=cols)
    m = labelled(metrics)
    ev = m[m["kind"] == "eval"].sort_values(["label", "step"])
    rows = []
    for label, g in ev.groupby("label", sort=True):
        hit = g[g["test_accuracy"] >= target]
        rows.append({"label": label, "paradigm": g["paradigm"].iloc[0],
                     "time_to_target_s": float(hit["time"].iloc[0]) if len(hit) else float("nan"),
                     "steps_to_target": float(hit["step"].iloc[0]) if len(hit) else float("nan"),
                     "best_accuracy": float(g["test_accuracy"].max()), "reached": bool(len(hit))})
    return pd.DataFrame(rows, columns=cols)


def bytes_columns(frame: pd.DataFrame) -> List[str]:
    return sorted(c for c in frame.columns if c.startswith("bytes.") and c != "bytes.eval")


def rank_bytes(runs: pd.DataFrame) -> pd.DataFrame:
    """Long table (label, rank, category, MiB_per_step) from each run's summary ``bytes_by_rank``
    (training traffic of every rank, eval excluded)."""
    rows = []
    for r in runs.to_dict("records"):
        s = store.read_json(Path(r["run_dir"]) / "summary.json") or {}
        steps = max(1, int(s.get("steps") or 1))
        for rank, cats in (s.get("bytes_by_rank") or {}).items():
            for cat, sent in cats.items():
                if cat != "eval":
                    rows.append({"label": r.get("label", r.get("run")), "rank": int(rank), "category": cat,
                                 "MiB_per_step": sent / steps / MiB})
    return pd.DataFrame(rows, columns=["label", "rank", "category", "MiB_per_step"])


def pareto_mask(df: pd.DataFrame, x: str, y: str) -> np.ndarray:
    """True for the rows no other row beats on both ``x`` and ``y`` (higher is better for both)."""
    xs, ys = df[x].to_numpy(float), df[y].to_numpy(float)
    keep = np.ones(len(df), dtype=bool)
    for i in range(len(df)):
        dominated = (xs >= xs[i]) & (ys >= ys[i]) & ((xs > xs[i]) | (ys > ys[i]))
        keep[i] = not dominated.any()
    return keep


def compression_table(runs: pd.DataFrame, metrics: pd.DataFrame, reference: str = "none") -> pd.DataFrame:
    """Per run: the mean of the compressor's per-step records (ratio, encode/decode ms, payload …)
    where the trainer writes them, its bytes per step, throughput and accuracy, and throughput
    relative to the ``reference`` variant (the uncompressed all-reduce)."""
    if runs.empty:
        return pd.DataFrame()
    out = runs[["label", "paradigm", "samples_per_s", "final_test_accuracy", "bytes_per_step"]].copy()
    if not metrics.empty:
        tr = metrics[metrics["kind"] == "train"]
        cols = [c for c in COMPRESSION_COLUMNS if c in tr]
        if cols:
            means = tr.groupby("run_dir")[cols].mean()
            out = out.assign(**{c: runs["run_dir"].map(means[c]).to_numpy() for c in cols})
    ref = out[out["label"] == reference]
    if len(ref):
        out["speed_vs_" + reference] = out["samples_per_s"] / float(ref["samples_per_s"].iloc[0])
        if "compression_ratio" not in out:
            out["compression_ratio"] = float(ref["bytes_per_step"].iloc[0]) / out["bytes_per_step"]
    out["bytes_per_step"] = out["bytes_per_step"] / MiB
    return out.rename(columns={"bytes_per_step": "MiB_per_step"}).reset_index(drop=True)
