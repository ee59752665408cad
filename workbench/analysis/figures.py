"""The trade-off dashboard's figure builders: each a function from the run table or the step records
(:mod:`workbench.runs.table`), or a profile (:mod:`workbench.analysis.whatif`), to a plotly figure.
Notebooks, the widgets and the HTML report (``python -m workbench.report``) call these; no plotting
logic lives only in a notebook, so pytest covers all of it (tests/test_dashboards.py).

Conventions: times in seconds of wall-clock since the first step, throughput in samples/s, bytes in
MiB (2**20); one colour per paradigm.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Dict, Iterable, Optional, Sequence, Tuple

import numpy as np
import pandas as pd
import plotly.express as px
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from workbench.runs.table import MiB, labelled, bytes_columns, pareto_mask, time_to_accuracy_table
from workbench.analysis.whatif import reference_overrides, reference_run, stanza_prediction, whatif_frame, whatif_profile

if TYPE_CHECKING:
    from workbench.perfmodel.profile import Profile

COLORS = px.colors.qualitative.Plotly


def _empty(title: str, why: str) -> go.Figure:
    fig = go.Figure()
    fig.update_layout(title=title, xaxis={"visible": False}, yaxis={"visible": False},
                      annotations=[{"text": why, "showarrow": False, "xref": "paper", "yref": "paper", "x": 0.5, "y": 0.5}])
    return fig


def _color_map(values: Iterable[str]) -> Dict[str, str]:
    return {v: COLORS[i % len(COLORS)] for i, v in enumerate(sorted(set(values)))}


def accuracy_vs_time(metrics: pd.DataFrame, x: str = "time", title: Optional[str] = None) -> go.Figure:
    """Test accuracy at every evaluation against wall-clock seconds (``x="time"``) or optimizer steps
    (``x="step"``); one line per run, one colour per paradigm."""
    title = title or ("Test accuracy vs wall-clock time" if x == "time" else "Test accuracy vs steps")
    if metrics.empty or "test_accuracy" not in metrics:
        return _empty(title, "no evaluation records")
    m = labelled(metrics)
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


def bytes_per_step(metrics: pd.DataFrame) -> go.Figure:
    """Stacked bars: MiB sent per training step by rank 0, by meter category (``allreduce``,
    ``grad_push``, ``activations`` …), averaged over the logged steps of each run."""
    title = "Bytes sent per step (rank 0), by category"
    cats = bytes_columns(metrics) if not metrics.empty else []
    if not cats:
        return _empty(title, "no communication records")
    m = labelled(metrics)
    tr = m[m["kind"] == "train"]
    per = tr.groupby("label", sort=True)[cats].mean().fillna(0.0) / MiB
    fig = go.Figure()
    for i, c in enumerate(cats):
        fig.add_trace(go.Bar(x=per.index, y=per[c], name=c.split(".", 1)[1], marker_color=COLORS[i % len(COLORS)],
                             hovertemplate="%{x}<br>%{y:.4g} MiB<extra>" + c.split(".", 1)[1] + "</extra>"))
    fig.update_layout(title=title, barmode="stack", xaxis_title="run", yaxis_title="MiB per step",
                      legend_title_text="category")
    return fig


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
    m = labelled(metrics) if not metrics.empty else metrics
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
    m = labelled(metrics)
    m = m[(m["kind"] == kind) & m[column].notna()]
    fig = px.line(m, x="step", y=column, color="label", title=title)
    fig.update_layout(yaxis_title=yaxis_title or column, legend_title_text="run")
    return fig


def allocation_figure(runs: pd.DataFrame, profile: Optional["Profile"] = None, gbps: float = 10.0,
                      key: str = "cfg.trainer.fc_workers", trainer: str = "stanza") -> go.Figure:
    """Stanza's allocation sweep: measured samples/s of each run against its number of FC workers
    n_f; the prediction the run made itself (``summary.json`` ``stanza.predicted_samples_per_s``,
    from :mod:`workbench.perfmodel.stanza` calibrated on the cluster, when the run profiled); the
    calibrated model (:func:`~workbench.analysis.whatif.stanza_prediction`) for a ``profile`` and ``gbps``; and the other paradigms' measured
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
            nodes = st["world_size"] if "world_size" in st else st["cfg.cluster.nproc"]
            pred = stanza_prediction(profile, nodes.astype(int), st["n_f"].astype(int), gbps)
            fig.add_trace(go.Scatter(x=st["n_f"], y=pred, mode="lines+markers", name=f"perfmodel at {gbps:g} Gbit/s"))
    others = runs[runs["paradigm"] != trainer].dropna(subset=["samples_per_s"])
    for i, r in enumerate(others.to_dict("records")):
        fig.add_hline(y=r["samples_per_s"], line_dash="dot", line_color=COLORS[(i + 2) % len(COLORS)],
                      annotation_text=r["label"], annotation_position="top left")
    if not len(st) and not len(others):
        return _empty(title, f"no {trainer} runs")
    fig.update_layout(title=title, xaxis_title="FC workers n_f", yaxis_title="samples/s", xaxis={"dtick": 1})
    return fig


def whatif_curves(profile: "Profile", workers: int = 8, gbps: float = 10.0, speedup: float = 1.0,
                  overrides: Sequence[str] = (), points: int = 12, max_workers: Optional[int] = None,
                  target: Optional[Tuple[float, str]] = None) -> go.Figure:
    """Two panels of predicted throughput from the calibrated model: against bandwidth (at
    ``workers`` processes) and against processes (at ``gbps``), one line per paradigm.
    ``speedup`` divides the profiled compute (a faster GPU). With ``target`` = (accuracy, reference
    run directory): predicted time to that accuracy instead (docs/time_to_target.md; paradigms the
    planner has no law for are left out)."""
    bws = list(np.logspace(-1, 2.5, points))
    ws = sorted(set(range(2, max(3, max_workers or 2 * workers) + 1, max(1, (max_workers or 2 * workers) // 8))) | {workers})
    a = whatif_frame(profile, bws, [workers], overrides, speedup, target=target)
    b = whatif_frame(profile, [gbps], ws, overrides, speedup, target=target)
    y, y_title = ("time_to_target_s", f"predicted time to {target[0]:.0%} (s)") if target else ("samples_per_s", "predicted samples/s")
    if target:
        a, b = a[a[y].notna()], b[b[y].notna()]
    fig = make_subplots(rows=1, cols=2, subplot_titles=(f"{workers} ranks, bandwidth varies", f"{gbps:g} Gbit/s, ranks vary"))
    colors = _color_map(a["paradigm"])
    for p in sorted(colors):
        ga, gb = a[a["paradigm"] == p], b[b["paradigm"] == p]
        fig.add_trace(go.Scatter(x=ga["gbps"], y=ga[y], name=p, legendgroup=p, line={"color": colors[p]}), 1, 1)
        fig.add_trace(go.Scatter(x=gb["workers"], y=gb[y], name=p, legendgroup=p, showlegend=False,
                                 line={"color": colors[p]}, mode="lines+markers"), 1, 2)
    fig.update_xaxes(type="log", title_text="bandwidth (Gbit/s)", row=1, col=1)
    fig.update_xaxes(title_text="ranks", row=1, col=2)
    fig.update_yaxes(title_text=y_title, row=1, col=1)
    if target:
        fig.update_yaxes(type="log")
    fig.update_layout(title=(f"What-if, time to {target[0]:.0%} (reference: {Path(target[1]).name})" if target else "What-if")
                      + f": {profile.model}, batch {profile.batch}/worker, compute ×{speedup * profile.speedup:g} "
                        "(workbench.perfmodel, profiled on this machine)", legend_title_text="paradigm")
    return fig


def whatif_to_target(reference, target: float, workers: int = 8, gbps: float = 10.0,
                     compressors: Sequence[str] = ()) -> go.Figure:
    """The what-if curves (against bandwidth and ranks) in predicted time to ``target`` for the model,
    data and batch of the ``reference`` run (a sync run that reached it, :func:`reference_run`),
    from a profile of them measured here once (:func:`whatif_profile`, with ``compressors``' codecs)."""
    from workbench.runs.handle import Run
    ov = reference_overrides(reference)
    prof = whatif_profile(ov, ranks=int(Run(reference).config.cluster.nproc), compressors=list(compressors))
    return whatif_curves(prof, workers=workers, gbps=gbps, overrides=ov, target=(target, str(reference)))


def dashboard(runs: pd.DataFrame, metrics: pd.DataFrame, target: float = 0.9,
              profile: Optional["Profile"] = None, overrides: Sequence[str] = ()) -> Dict[str, go.Figure]:
    """Every panel of the trade-off dashboard, by name, in display order; the what-if panel (with a
    ``profile``) plans the variants composed with ``overrides``, as the what-if explorer does, and,
    where one of ``runs`` can be the reference (:func:`~workbench.analysis.whatif.reference_run`),
    ``whatif_time_to_target`` plans their time to ``target``."""
    figs = {
        "accuracy_vs_time": accuracy_vs_time(metrics),
        "throughput_vs_workers": throughput_vs_workers(runs),
        "time_to_accuracy": time_to_accuracy(metrics, target),
        "bytes_per_step": bytes_per_step(metrics),
        "pareto_front": pareto_front(runs),
    }
    if profile is not None:
        figs["whatif"] = whatif_curves(profile, overrides=overrides)
        ref = reference_run(runs, target)
        if ref is not None:  # a sync run here reached the target: the what-if in time to it too
            figs["whatif_time_to_target"] = whatif_curves(profile, overrides=overrides, target=(target, ref))
    return figs


def use_notebook_renderer() -> None:
    """Figures that render both in JupyterLab (plotly mimetype) and in the HTML report (inline
    plotly.js: the report opens offline)."""
    import plotly.io as pio
    pio.renderers.default = "plotly_mimetype+notebook"
