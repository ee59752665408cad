"""The trade-off dashboard's figure builders: each a function from the run table
(:func:`workbench.load_runs`) or the step records (:func:`workbench.load_metrics`) to a plotly figure.
Notebooks and the HTML report (``python -m workbench.report``) call these; no plotting logic lives
only in a notebook, so pytest covers all of it (tests/test_dashboards.py).

    from workbench import dashboards as db
    runs, metrics = db.load("experiments/runs/**")       # + paradigm / label columns
    db.accuracy_vs_time(metrics).show()                   # accuracy vs wall-clock per paradigm
    db.throughput_vs_workers(runs).show()
    db.time_to_accuracy(metrics, target=0.9).show()
    db.bytes_per_step(metrics).show()                     # stacked by meter category (rank 0)
    db.pareto_front(runs).show()                          # accuracy / throughput Pareto front
    db.whatif_curves(db.whatif_profile(["model=small_cnn"])).show()  # the planner's what-if curves

Conventions: times in seconds of wall-clock since the first step, throughput in samples/s, bytes in
MiB (2**20). A run is labelled by its *paradigm*: the trainer's name, qualified by its mode or
protocol and its compressor where it has them (``ps/async``, ``compressed/powersgd``). Only completed runs are plotted unless ``completed_only=False``.

The what-if curves, the allocation figure's prediction and the compression crossover come from
the one calibrated performance model, :mod:`workbench.perfmodel`, through :func:`workbench.plan.plan`
(docs/planner.md), on a profile of the model measured on this machine.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np
import pandas as pd
import plotly.express as px
import plotly.graph_objects as go
from plotly.subplots import make_subplots

if TYPE_CHECKING:
    from workbench.perfmodel.profile import Profile

MiB = float(2**20)
COLORS = px.colors.qualitative.Plotly


# ---------------------------------------------------------------------------------------------
# Loading and labelling runs

def paradigm_of(row) -> str:
    """The run's paradigm label (``ps/async``, ``staleness/n=3``, ``stanza/n_f=2``,
    ``compressed/powersgd``; ``sync``) from its flattened ``cfg.*`` columns: each trainer's own
    ``paradigm`` (workbench.trainers.paradigm_of), the labels ``workbench.plan`` uses too."""
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


def attach(metrics: pd.DataFrame, runs: pd.DataFrame, columns: Sequence[str] = ("paradigm", "label", "workers")) -> pd.DataFrame:
    """The step records with the run table's ``columns`` joined on ``run_dir``."""
    if metrics.empty:
        return metrics
    cols = ["run_dir"] + [c for c in columns if c in runs and c not in metrics]
    return metrics.merge(runs[cols], on="run_dir", how="left")


def load(paths="experiments", by: Optional[Sequence[str]] = None, completed_only: bool = True,
         variants: Optional[pd.DataFrame] = None) -> Tuple[pd.DataFrame, pd.DataFrame]:
    """``(runs, metrics)`` for every run under ``paths`` (directories, globs or Run objects), both
    labelled (``paradigm``, ``label``; the variant names of :func:`launch_variants`' table when
    ``variants`` is given); failed runs are dropped unless ``completed_only=False``."""
    from workbench.runs import load_metrics, load_runs
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


def summary_table(runs: pd.DataFrame, columns: Optional[Sequence[str]] = None) -> pd.DataFrame:
    """One readable row per run: accuracy, throughput, MiB per step, wall time."""
    cols = columns or ["label", "paradigm", "workers", "steps", "final_test_accuracy", "samples_per_s",
                       "bytes_per_step", "wall_time_s", "status", "verdict"]
    out = runs[[c for c in cols if c in runs]].copy()
    if "bytes_per_step" in out:
        out["bytes_per_step"] = out["bytes_per_step"] / MiB
        out = out.rename(columns={"bytes_per_step": "MiB_per_step"})
    return out.reset_index(drop=True)


def _empty(title: str, why: str) -> go.Figure:
    fig = go.Figure()
    fig.update_layout(title=title, xaxis={"visible": False}, yaxis={"visible": False},
                      annotations=[{"text": why, "showarrow": False, "xref": "paper", "yref": "paper", "x": 0.5, "y": 0.5}])
    return fig


def _color_map(values: Iterable[str]) -> Dict[str, str]:
    return {v: COLORS[i % len(COLORS)] for i, v in enumerate(sorted(set(values)))}


def _labelled(metrics: pd.DataFrame) -> pd.DataFrame:
    m = metrics.copy()
    if "label" not in m:
        m["label"] = m["run"] if "run" in m else "run"
    if "paradigm" not in m:
        m["paradigm"] = m["label"]
    return m


# ---------------------------------------------------------------------------------------------
# Figures

def accuracy_vs_time(metrics: pd.DataFrame, x: str = "time", title: Optional[str] = None) -> go.Figure:
    """Test accuracy at every evaluation against wall-clock seconds (``x="time"``) or optimizer steps
    (``x="step"``); one line per run, one colour per paradigm."""
    title = title or ("Test accuracy vs wall-clock time" if x == "time" else "Test accuracy vs steps")
    if metrics.empty or "test_accuracy" not in metrics:
        return _empty(title, "no evaluation records")
    m = _labelled(metrics)
    ev = m[m["kind"] == "eval"].sort_values(["label", x])
    colors = _color_map(ev["paradigm"])
    fig = go.Figure()
    for label, g in ev.groupby("label", sort=True):
        p = g["paradigm"].iloc[0]
        fig.add_trace(go.Scatter(x=g[x], y=g["test_accuracy"], mode="lines+markers", name=label,
                                 legendgroup=p, line={"color": colors[p]},
                                 hovertemplate=f"{label}<br>%{{x:.3g}} {'s' if x == 'time' else 'steps'}<br>accuracy %{{y:.2%}}<extra></extra>"))
    fig.update_layout(title=title, legend_title_text="run",
                      xaxis_title="wall-clock time (s)" if x == "time" else "optimizer steps",
                      yaxis_title="test accuracy", yaxis_tickformat=".0%")
    return fig


def throughput_vs_workers(runs: pd.DataFrame, y: str = "samples_per_s") -> go.Figure:
    """Training throughput (samples/s, mean over repeated runs, every run as a marker) against the
    number of worker ranks, one line per paradigm."""
    title = "Throughput vs workers"
    if runs.empty or y not in runs or "workers" not in runs:
        return _empty(title, "no completed runs with a throughput")
    r = runs.dropna(subset=[y, "workers"])
    colors = _color_map(r["paradigm"])
    fig = go.Figure()
    for p, g in r.groupby("paradigm", sort=True):
        mean = g.groupby("workers", as_index=False)[y].mean().sort_values("workers")
        fig.add_trace(go.Scatter(x=mean["workers"], y=mean[y], mode="lines+markers", name=p, legendgroup=p,
                                 line={"color": colors[p]}, marker={"size": 9}))
        if len(g) > len(mean):  # repeats: show the spread
            fig.add_trace(go.Scatter(x=g["workers"], y=g[y], mode="markers", name=f"{p} (runs)", legendgroup=p,
                                     showlegend=False, marker={"color": colors[p], "opacity": 0.4, "size": 6}))
    fig.update_layout(title=title, xaxis_title="worker ranks", yaxis_title="samples/s", legend_title_text="paradigm",
                      xaxis={"dtick": 1})
    return fig


def time_to_accuracy_table(metrics: pd.DataFrame, target: float) -> pd.DataFrame:
    """Per run: the first evaluation whose test accuracy reaches ``target`` — its wall-clock time and
    step (NaN if never reached), and the best accuracy seen."""
    cols = ["label", "paradigm", "time_to_target_s", "steps_to_target", "best_accuracy", "reached"]
    if metrics.empty or "test_accuracy" not in metrics:
        return pd.DataFrame(columns=cols)
    m = _labelled(metrics)
    ev = m[m["kind"] == "eval"].sort_values(["label", "step"])
    rows = []
    for label, g in ev.groupby("label", sort=True):
        hit = g[g["test_accuracy"] >= target]
        rows.append({"label": label, "paradigm": g["paradigm"].iloc[0],
                     "time_to_target_s": float(hit["time"].iloc[0]) if len(hit) else float("nan"),
                     "steps_to_target": float(hit["step"].iloc[0]) if len(hit) else float("nan"),
                     "best_accuracy": float(g["test_accuracy"].max()), "reached": bool(len(hit))})
    return pd.DataFrame(rows, columns=cols)


def time_to_accuracy(metrics: pd.DataFrame, target: float = 0.9) -> go.Figure:
    """Bars: wall-clock seconds until each run first reaches ``target`` test accuracy. Runs that
    never reach it are listed at zero height with their best accuracy."""
    title = f"Time to {target:.0%} test accuracy"
    t = time_to_accuracy_table(metrics, target)
    if t.empty:
        return _empty(title, "no evaluation records")
    colors = _color_map(t["paradigm"])
    t = t.sort_values(["reached", "time_to_target_s"], ascending=[False, True])
    text = [f"{v:.1f} s" if ok else f"not reached (best {b:.1%})"
            for v, ok, b in zip(t["time_to_target_s"], t["reached"], t["best_accuracy"])]
    fig = go.Figure(go.Bar(x=t["label"], y=t["time_to_target_s"].fillna(0.0), text=text, textposition="outside",
                           marker_color=[colors[p] for p in t["paradigm"]],
                           customdata=t["steps_to_target"], hovertemplate="%{x}<br>%{y:.2f} s, step %{customdata}<extra></extra>"))
    fig.update_layout(title=title, xaxis_title="run", yaxis_title="seconds to target")
    return fig


def bytes_columns(frame: pd.DataFrame) -> List[str]:
    return sorted(c for c in frame.columns if c.startswith("bytes.") and c != "bytes.eval")


def bytes_per_step(metrics: pd.DataFrame) -> go.Figure:
    """Stacked bars: MiB sent per training step by rank 0, by meter category (``allreduce``,
    ``grad_push``, ``activations`` …), averaged over the logged steps of each run."""
    title = "Bytes sent per step (rank 0), by category"
    cats = bytes_columns(metrics) if not metrics.empty else []
    if not cats:
        return _empty(title, "no communication records")
    m = _labelled(metrics)
    tr = m[m["kind"] == "train"]
    per = tr.groupby("label", sort=True)[cats].mean().fillna(0.0) / MiB
    fig = go.Figure()
    for i, c in enumerate(cats):
        fig.add_trace(go.Bar(x=per.index, y=per[c], name=c.split(".", 1)[1], marker_color=COLORS[i % len(COLORS)],
                             hovertemplate="%{x}<br>%{y:.4g} MiB<extra>" + c.split(".", 1)[1] + "</extra>"))
    fig.update_layout(title=title, barmode="stack", xaxis_title="run", yaxis_title="MiB per step",
                      legend_title_text="category")
    return fig


def rank_bytes(runs: pd.DataFrame) -> pd.DataFrame:
    """Long table (label, rank, category, MiB_per_step) from each run's summary ``bytes_by_rank``
    (training traffic of every rank, eval excluded)."""
    from workbench import runstore
    rows = []
    for r in runs.to_dict("records"):
        s = runstore.read_json(Path(r["run_dir"]) / "summary.json") or {}
        steps = max(1, int(s.get("steps") or 1))
        for rank, cats in (s.get("bytes_by_rank") or {}).items():
            for cat, sent in cats.items():
                if cat != "eval":
                    rows.append({"label": r.get("label", r.get("run")), "rank": int(rank), "category": cat,
                                 "MiB_per_step": sent / steps / MiB})
    return pd.DataFrame(rows, columns=["label", "rank", "category", "MiB_per_step"])


def bytes_per_rank(frame: pd.DataFrame) -> go.Figure:
    """Stacked bars per rank (one panel per run) from :func:`rank_bytes`: which ranks carry the
    traffic (a parameter server's servers, Stanza's FC workers)."""
    title = "Bytes sent per step by each rank"
    if frame.empty:
        return _empty(title, "no per-rank totals")
    fig = px.bar(frame, x="rank", y="MiB_per_step", color="category", facet_col="label", facet_col_wrap=3,
                 title=title, labels={"MiB_per_step": "MiB per step", "rank": "rank"})
    fig.update_layout(barmode="stack")
    fig.for_each_annotation(lambda a: a.update(text=a.text.split("=", 1)[-1]))
    return fig


def pareto_mask(df: pd.DataFrame, x: str, y: str) -> np.ndarray:
    """True for the rows no other row beats on both ``x`` and ``y`` (higher is better for both)."""
    xs, ys = df[x].to_numpy(float), df[y].to_numpy(float)
    keep = np.ones(len(df), dtype=bool)
    for i in range(len(df)):
        dominated = (xs >= xs[i]) & (ys >= ys[i]) & ((xs > xs[i]) | (ys > ys[i]))
        keep[i] = not dominated.any()
    return keep


def pareto_front(runs: pd.DataFrame, x: str = "samples_per_s", y: str = "final_test_accuracy") -> go.Figure:
    """Every run as a point (throughput, accuracy), coloured by paradigm; the runs on the Pareto front
    (no run is both faster and more accurate) are joined by a line."""
    title = "Accuracy / throughput trade-off"
    if runs.empty or x not in runs or y not in runs:
        return _empty(title, "no completed runs")
    r = runs.dropna(subset=[x, y]).reset_index(drop=True)
    if r.empty:
        return _empty(title, "no completed runs")
    colors = _color_map(r["paradigm"])
    fig = go.Figure()
    for p, g in r.groupby("paradigm", sort=True):
        fig.add_trace(go.Scatter(x=g[x], y=g[y], mode="markers", name=p, marker={"size": 11, "color": colors[p]},
                                 text=g["label"], hovertemplate="%{text}<br>%{x:,.0f} samples/s<br>accuracy %{y:.2%}<extra></extra>"))
    front = r[pareto_mask(r, x, y)].sort_values(x)
    fig.add_trace(go.Scatter(x=front[x], y=front[y], mode="lines", name="Pareto front",
                             line={"color": "black", "dash": "dash"}, hoverinfo="skip"))
    fig.update_layout(title=title, xaxis_title="throughput (samples/s)", yaxis_title="final test accuracy",
                      yaxis_tickformat=".0%", legend_title_text="paradigm")
    return fig


def metric_histogram(metrics: pd.DataFrame, column_contains: str = "staleness", xaxis_title: Optional[str] = None) -> go.Figure:
    """Histogram of a per-step quantity recorded by a trainer, e.g. gradient staleness τ. Columns
    holding a histogram (a ``{value: count}`` dict or a list of counts per value) are summed over the
    records of each run; plain numeric columns are histogrammed directly."""
    title = f"{column_contains} histogram"
    m = _labelled(metrics) if not metrics.empty else metrics
    cols = [c for c in m.columns if column_contains in c] if not m.empty else []
    if not cols:
        return _empty(title, f"no '{column_contains}' records in these runs")
    col = next((c for c in cols if "hist" in c), cols[0])
    fig = go.Figure()
    for label, g in m.dropna(subset=[col]).groupby("label", sort=True):
        vals = g[col].tolist()
        if vals and isinstance(vals[0], (dict, list)):
            counts: Dict[float, float] = {}
            for v in vals:
                items = v.items() if isinstance(v, dict) else enumerate(v)
                for k, n in items:
                    counts[float(k)] = counts.get(float(k), 0.0) + float(n)
            ks = sorted(counts)
            fig.add_trace(go.Bar(x=ks, y=[counts[k] for k in ks], name=label))
        else:
            fig.add_trace(go.Histogram(x=g[col], name=label, opacity=0.7))
    fig.update_layout(title=title, barmode="group", xaxis_title=xaxis_title or col, yaxis_title="count", legend_title_text="run")
    return fig


def metric_vs_step(metrics: pd.DataFrame, column: str, kind: str = "train", title: Optional[str] = None,
                   yaxis_title: Optional[str] = None) -> go.Figure:
    """Any recorded per-step column (encode time, compression ratio, lr …) against the step."""
    title = title or f"{column} per step"
    if metrics.empty or column not in metrics:
        return _empty(title, f"no '{column}' records")
    m = _labelled(metrics)
    m = m[(m["kind"] == kind) & m[column].notna()]
    fig = px.line(m, x="step", y=column, color="label", title=title)
    fig.update_layout(yaxis_title=yaxis_title or column, legend_title_text="run")
    return fig


def select(runs: pd.DataFrame, metrics: pd.DataFrame, query: str = "") -> Tuple[pd.DataFrame, pd.DataFrame]:
    """Keep the runs matching a pandas ``query`` on the run table (e.g.
    ``"`cfg.model.name` == 'small_cnn' and workers <= 4"``) and their step records."""
    if not query or runs.empty:
        return runs, metrics
    runs = runs.query(query).reset_index(drop=True)
    return runs, (metrics[metrics["run_dir"].isin(runs["run_dir"])] if not metrics.empty else metrics)


def allocation_figure(runs: pd.DataFrame, profile: Optional["Profile"] = None, gbps: float = 10.0,
                      key: str = "cfg.trainer.fc_workers", trainer: str = "stanza") -> go.Figure:
    """Stanza's allocation sweep: measured samples/s of each run against its number of FC workers
    n_f; the prediction the run made itself (``summary.json`` ``stanza.predicted_samples_per_s``,
    from :mod:`workbench.perfmodel.stanza` calibrated on the cluster, when the run profiled); the
    analytic model of this file for a ``profile`` and ``gbps``; and the other paradigms' measured
    throughput as horizontal lines."""
    title = "Throughput by CONV/FC allocation: measured vs predicted"
    if runs.empty or "samples_per_s" not in runs:
        return _empty(title, "no completed runs")
    st = runs[runs["paradigm"] == trainer].copy()
    fig = go.Figure()
    if len(st):
        info = st[trainer] if trainer in st else pd.Series([{}] * len(st), index=st.index)
        info = info.apply(lambda d: d if isinstance(d, dict) else {})
        cfg_nf = pd.to_numeric(st[key], errors="coerce") if key in st else pd.Series(np.nan, index=st.index)
        st["n_f"] = [d.get("fc_workers", c) for d, c in zip(info, cfg_nf)]
        st["own_prediction"] = [d.get("predicted_samples_per_s") for d in info]
        st = st.dropna(subset=["n_f"]).sort_values("n_f")
        fig.add_trace(go.Bar(x=st["n_f"], y=st["samples_per_s"], name=f"{trainer} measured", text=st["label"]))
        own = st.dropna(subset=["own_prediction"])
        if len(own):
            fig.add_trace(go.Scatter(x=own["n_f"], y=own["own_prediction"], mode="markers", marker={"size": 12, "symbol": "x"},
                                     name="predicted by the run (perfmodel, calibrated)"))
        if profile is not None:
            from workbench.perfmodel import paradigms
            nodes = st["world_size"] if "world_size" in st else st["cfg.cluster.nproc"]
            pred = []
            for n, n_f in zip(nodes.astype(int), st["n_f"].astype(int)):
                cl = paradigms.Cluster(int(n), gbps * 1e9 / 8, 50e-6)
                pred.append(paradigms.stanza(profile, cl, n_f).samples_per_s if n - n_f >= 1 else float("nan"))
            fig.add_trace(go.Scatter(x=st["n_f"], y=pred, mode="lines+markers", name=f"perfmodel at {gbps:g} Gbit/s"))
    others = runs[runs["paradigm"] != trainer].dropna(subset=["samples_per_s"])
    for i, r in enumerate(others.to_dict("records")):
        fig.add_hline(y=r["samples_per_s"], line_dash="dot", line_color=COLORS[(i + 2) % len(COLORS)],
                      annotation_text=r["label"], annotation_position="top left")
    if not len(st) and not len(others):
        return _empty(title, f"no {trainer} runs")
    fig.update_layout(title=title, xaxis_title="FC workers n_f", yaxis_title="samples/s", xaxis={"dtick": 1})
    return fig


COMPRESSION_COLUMNS = ("compression_ratio", "encode_ms", "decode_ms", "compress_comm_ms", "payload_bytes", "dense_bytes")


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


def crossover_table(table: pd.DataFrame, profile: "Profile", workers: int = 8, speedup: float = 1.0) -> pd.DataFrame:
    """For each compressor row of :func:`compression_table` (paradigm ``compressed/<name>``): its
    measured ratio and encode+decode time, and the bandwidth below which the calibrated model says
    it beats plain all-reduce on ``workers`` ranks (from the profile's codec measurement)."""
    rows = []
    for r in table.to_dict("records"):
        name = str(r.get("paradigm", "")).partition("/")[2]
        if not name or name not in profile.codecs:
            continue
        enc = ((r.get("encode_ms") or 0.0) + (r.get("decode_ms") or 0.0))
        rows.append({"label": r["label"], "compression_ratio": r.get("compression_ratio"), "encode_decode_ms": enc,
                     "crossover_gbps": crossover_gbps(profile, workers, name, speedup)})
    return pd.DataFrame(rows, columns=["label", "compression_ratio", "encode_decode_ms", "crossover_gbps"])


def available_compressors() -> List[str]:
    """The compressor config files in conf/compressor/ (each one a ``compressor=<name>`` choice)."""
    from workbench.core import conf_dir
    return sorted(p.stem for p in (conf_dir() / "compressor").glob("*.yaml"))


def dashboard(runs: pd.DataFrame, metrics: pd.DataFrame, target: float = 0.9,
              profile: Optional["Profile"] = None) -> Dict[str, go.Figure]:
    """Every panel of the trade-off dashboard, by name, in display order."""
    figs = {
        "accuracy_vs_time": accuracy_vs_time(metrics),
        "throughput_vs_workers": throughput_vs_workers(runs),
        "time_to_accuracy": time_to_accuracy(metrics, target),
        "bytes_per_step": bytes_per_step(metrics),
        "pareto_front": pareto_front(runs),
    }
    if profile is not None:
        figs["whatif"] = whatif_curves(profile)
    return figs


# ---------------------------------------------------------------------------------------------
# What-if: the planner's calibrated model (workbench.perfmodel, through workbench.plan)

def whatif_profile(overrides: Sequence[str] = (), ranks: int = 2, root: Optional[str] = None) -> "Profile":
    """This machine's profile of the model the ``overrides`` name (measured once with ``ranks``
    processes and every compressor's codec, then read from ``experiments/profiles/``)."""
    import workbench
    from workbench.perfmodel.profile import load_or_measure
    from workbench.plan import _split_overrides
    shared, _, _ = _split_overrides(list(overrides))
    cfg = workbench.compose(shared)
    comps = {c: workbench.compose([f"compressor={c}"]).compressor for c in available_compressors() if c != "none"}
    from workbench.compress.profile import measure_codecs
    return load_or_measure(cfg, ranks, comps, root=root or cfg.output_root, log=lambda s: None, codec_fn=measure_codecs)


def whatif_frame(profile: "Profile", gbps: Sequence[float], workers: Sequence[int], overrides: Sequence[str] = (),
                 speedup: float = 1.0, latency: str = "50us") -> pd.DataFrame:
    """Predicted samples/s of every planned paradigm (workbench.plan) at each bandwidth (Gbit/s)
    and process count, one rank per host; Stanza and the n-softsync protocols are shown by their
    best variant (``stanza (best n_f)``, ``staleness (best n)``)."""
    from workbench.plan import plan
    df = plan(list(overrides), bandwidths=[f"{g:.6g}gbit" for g in gbps], workers=[int(w) for w in workers],
              profile=profile, speedup=speedup, latency=latency)
    if df.empty:
        return pd.DataFrame(columns=["workers", "gbps", "paradigm", "samples_per_s"])
    df = df.assign(gbps=df["bandwidth_bps"] / 1e9, samples_per_s=df["predicted_samples_per_s"])
    fam = df["paradigm"].str.extract(r"^(stanza|staleness)/(n_f|n)=\d+$")
    best = fam[0].notna()
    df.loc[best, "paradigm"] = fam[0][best] + " (best " + fam[1][best] + ")"
    df = df.sort_values("samples_per_s", ascending=False).drop_duplicates(["workers", "gbps", "paradigm"])
    return df[["workers", "gbps", "paradigm", "samples_per_s"]].sort_values(["paradigm", "workers", "gbps"]).reset_index(drop=True)


def whatif_curves(profile: "Profile", workers: int = 8, gbps: float = 10.0, speedup: float = 1.0,
                  overrides: Sequence[str] = (), points: int = 12, max_workers: Optional[int] = None) -> go.Figure:
    """Two panels of predicted throughput from the calibrated model: against bandwidth (at
    ``workers`` processes) and against processes (at ``gbps``), one line per paradigm.
    ``speedup`` divides the profiled compute (a faster GPU)."""
    bws = list(np.logspace(-1, 2.5, points))
    ws = sorted(set(range(2, max(3, max_workers or 2 * workers) + 1, max(1, (max_workers or 2 * workers) // 8))) | {workers})
    a = whatif_frame(profile, bws, [workers], overrides, speedup)
    b = whatif_frame(profile, [gbps], ws, overrides, speedup)
    fig = make_subplots(rows=1, cols=2, subplot_titles=(f"{workers} ranks, bandwidth varies", f"{gbps:g} Gbit/s, ranks vary"))
    colors = _color_map(a["paradigm"])
    for p in sorted(colors):
        ga, gb = a[a["paradigm"] == p], b[b["paradigm"] == p]
        fig.add_trace(go.Scatter(x=ga["gbps"], y=ga["samples_per_s"], name=p, legendgroup=p, line={"color": colors[p]}), 1, 1)
        fig.add_trace(go.Scatter(x=gb["workers"], y=gb["samples_per_s"], name=p, legendgroup=p, showlegend=False,
                                 line={"color": colors[p]}, mode="lines+markers"), 1, 2)
    fig.update_xaxes(type="log", title_text="bandwidth (Gbit/s)", row=1, col=1)
    fig.update_xaxes(title_text="ranks", row=1, col=2)
    fig.update_yaxes(title_text="predicted samples/s", row=1, col=1)
    fig.update_layout(title=f"What-if: {profile.model}, batch {profile.batch}/worker, compute ×{speedup * profile.speedup:g} "
                            "(workbench.perfmodel, profiled on this machine)", legend_title_text="paradigm")
    return fig


def crossover_gbps(profile: "Profile", workers: int, compressor: str, speedup: float = 1.0, latency: str = "50us") -> float:
    """Gbit/s below which ``compressor`` beats synchronous all-reduce on ``workers`` ranks (one per
    host), from the calibrated model; inf if at every rate, NaN if at none."""
    from workbench.network import parse_time
    from workbench.perfmodel import paradigms
    prof = profile.with_speedup(speedup * profile.speedup) if speedup != 1.0 else profile
    x = paradigms.crossover_bps(prof, paradigms.Cluster(workers, 1.25e9, parse_time(latency, "latency")), compressor)
    return float("nan") if x is None else x / 1e9


def use_notebook_renderer() -> None:
    """Figures that render both in JupyterLab (plotly mimetype) and in the HTML report (inline
    plotly.js: the report opens offline)."""
    import plotly.io as pio
    pio.renderers.default = "plotly_mimetype+notebook"


# ---------------------------------------------------------------------------------------------
# Launching the runs a notebook compares (compose + launch, with unavailable variants skipped)

def registered_trainers() -> List[str]:
    from workbench.trainers import TRAINERS
    return list(TRAINERS)


def project_path(path) -> Path:
    """A relative path taken from the project root (the folder holding ``conf/``), absolute paths
    as they are: a notebook means the same ``experiments/`` whether JupyterLab runs it from
    ``notebooks/`` or papermill from the root."""
    from workbench.core import conf_dir
    p = Path(path).expanduser()
    return p if p.is_absolute() else conf_dir().parent / p


def base_overrides(cluster: str = "local", nproc: int = 2, model: str = "small_cnn", data: str = "digits",
                   max_steps: int = 60, eval_every: int = 20, output_root: str = "experiments",
                   extra: Sequence[str] = ()) -> List[str]:
    """The overrides every notebook starts from: its ``cluster``/``nproc``/``model``/``data``
    parameters, a step budget, and where runs go (``output_root``, relative to the project root)."""
    return [f"cluster={cluster}", f"cluster.nproc={nproc}", f"model={model}", f"data={data}",
            f"trainer.max_steps={max_steps}", f"trainer.eval_every={eval_every}",
            f"output_root={project_path(output_root)}", *extra]


def _trainer_of(overrides: Sequence[str]) -> Optional[str]:
    for o in overrides:
        if o.startswith("trainer="):
            return o.split("=", 1)[1]
    return None


def _is_group(o: str) -> bool:
    return "=" in o and "." not in o.split("=", 1)[0]


def _order(base: List[str], variant: List[str]) -> List[str]:
    """Group choices first (base, then the variant's, which win), then keys (base, then variant):
    ``trainer.*`` keys must come after ``trainer=ps`` for Hydra to apply them to it."""
    return ([o for o in base if _is_group(o)] + [o for o in variant if _is_group(o)]
            + [o for o in base if not _is_group(o)] + [o for o in variant if not _is_group(o)])


def launch_variants(variants: Dict[str, Sequence[str]], base: Sequence[str] = (), progress: bool = True):
    """Compose and launch each variant (``{name: overrides}``, applied after ``base``; group choices
    such as ``trainer=ps`` go before every key so that ``trainer.*`` keys apply to it).

    Returns ``(runs, table)``: the completed :class:`~workbench.runs.Run` objects and one row per
    variant with its status — ``completed``, ``failed`` (the run's error) or ``skipped`` (its trainer
    is not registered, or the config is invalid: the one-line reason). Nothing is faked: a skipped
    variant has no run."""
    from workbench.api import compose
    from workbench.core import ConfigError
    from workbench.launcher import RunFailed, launch
    trainers = set(registered_trainers())
    runs, rows = [], []
    for name, ov in variants.items():
        overrides = _order(list(base), list(ov))
        t = _trainer_of(overrides) or "sync"
        if t not in trainers:
            rows.append({"variant": name, "status": "skipped", "run_dir": None,
                         "reason": f"trainer '{t}' is not registered yet (registered: {', '.join(sorted(trainers))})"})
            continue
        try:
            cfg = compose(overrides)
            run = launch(cfg, progress=progress)
        except ConfigError as e:
            rows.append({"variant": name, "status": "skipped", "run_dir": None, "reason": f"invalid config: {e}"})
            continue
        except RunFailed as e:
            rows.append({"variant": name, "status": "failed", "run_dir": str(e.run.path), "reason": str(e)})
            continue
        runs.append(run)
        rows.append({"variant": name, "status": "completed", "run_dir": str(run.path), "reason": ""})
    return runs, pd.DataFrame(rows, columns=["variant", "status", "run_dir", "reason"])


def with_variants(runs: pd.DataFrame, table: pd.DataFrame) -> pd.DataFrame:
    """Replace each run's label by the notebook's variant name (from :func:`launch_variants`)."""
    names = dict(zip(table["run_dir"], table["variant"]))
    runs = runs.copy()
    runs["label"] = [names.get(d, l) for d, l in zip(runs["run_dir"], runs["label"])]
    return runs
