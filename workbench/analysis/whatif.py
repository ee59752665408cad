"""What-if on the one calibrated performance model (:mod:`workbench.perfmodel`, through
:func:`workbench.plan.plan`, docs/planner.md): predicted throughput of every paradigm at bandwidths
and rank counts nobody ran, a compressor's crossover bandwidth, Stanza's predicted allocation sweep.
Analysis carries no model of its own; it asks the planner's. The profile is this machine's
measurement of the model (``experiments/profiles/``, measured once on first use).
"""
from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING, List, Optional, Sequence, Tuple

import pandas as pd
import plotly.graph_objects as go

if TYPE_CHECKING:
    from workbench.perfmodel.profile import Profile

def available_compressors() -> List[str]:
    """The compressor config files in conf/compressor/ (each one a ``compressor=<name>`` choice)."""
    from workbench.config import conf_dir
    return sorted(p.stem for p in (conf_dir() / "compressor").glob("*.yaml"))


def whatif_profile(overrides: Sequence[str] = (), ranks: int = 2, root: Optional[str] = None,
                   compressors: Optional[Sequence[str]] = None) -> "Profile":
    """This machine's profile of the model the ``overrides`` name (measured once with ``ranks``
    processes, then read from ``experiments/profiles/``), with the codecs and loops of
    ``compressors`` (default: every one; ``[]`` for none, a profile a third as long)."""
    import workbench
    from workbench.perfmodel.profile import load_or_measure
    from workbench.plan import _split_overrides, profile_loops
    shared, _, _ = _split_overrides(list(overrides))
    cfg = workbench.compose(shared)
    names = available_compressors() if compressors is None else list(compressors)
    comps = {c: workbench.compose([f"compressor={c}"]).compressor for c in names if c != "none"}
    from workbench.compress.codec_timing import measure_codecs
    return load_or_measure(cfg, ranks, comps, root=root or cfg.output_root, log=lambda s: None, codec_fn=measure_codecs,
                           loop_fns=profile_loops(cfg, comps))


_FRAMES: "OrderedDict[tuple, Tuple[Profile, pd.DataFrame]]" = OrderedDict()
FRAMES_KEPT = 32  # the what-if explorer moves one slider at a time: one of its two panels is unchanged


def whatif_frame(profile: "Profile", gbps: Sequence[float], workers: Sequence[int], overrides: Sequence[str] = (),
                 speedup: float = 1.0, latency: str = "50us", target: Optional[Tuple[float, str]] = None) -> pd.DataFrame:
    """Predicted samples/s of every planned paradigm (workbench.plan) at each bandwidth (Gbit/s)
    and process count, one rank per host; Stanza and the n-softsync protocols are shown by their
    best variant (``stanza (best n_f)``, ``staleness (best n)``). With ``target`` = (accuracy,
    reference run directory), also ``time_to_target_s`` (NaN where the planner has no law;
    docs/time_to_target.md). The last ``FRAMES_KEPT`` frames are kept per process, keyed by the
    profile object and the arguments."""
    key = (id(profile), tuple(float(g) for g in gbps), tuple(int(w) for w in workers), tuple(overrides),
           float(speedup), latency, target)
    hit = _FRAMES.get(key)
    if hit is not None and hit[0] is profile:
        _FRAMES.move_to_end(key)
        return hit[1].copy()
    df = _whatif_frame(profile, gbps, workers, overrides, speedup, latency, target)
    _FRAMES[key] = (profile, df)  # the profile held too, so that its id names no other object meanwhile
    while len(_FRAMES) > FRAMES_KEPT:
        _FRAMES.popitem(last=False)
    return df.copy()


def _whatif_frame(profile, gbps, workers, overrides, speedup, latency, target=None) -> pd.DataFrame:
    from workbench.plan import plan
    acc, ref = target if target else (None, None)
    df = plan(list(overrides), bandwidths=[f"{g:.6g}gbit" for g in gbps], workers=[int(w) for w in workers],
              profile=profile, speedup=speedup, latency=latency, target_accuracy=acc, reference=ref)
    cols = ["workers", "gbps", "paradigm", "samples_per_s"] + (["time_to_target_s"] if target else [])
    if df.empty:
        return pd.DataFrame(columns=cols)
    df = df.assign(gbps=df["bandwidth_bps"] / 1e9, samples_per_s=df["predicted_samples_per_s"])
    if target:
        df["time_to_target_s"] = pd.to_numeric(df["predicted_time_to_target_s"], errors="coerce")
    fam = df["paradigm"].str.extract(r"^(stanza|staleness)/(n_f|n)=\d+$")
    best = fam[0].notna()
    df.loc[best, "paradigm"] = fam[0][best] + " (best " + fam[1][best] + ")"
    df = df.sort_values("samples_per_s", ascending=False).drop_duplicates(["workers", "gbps", "paradigm"])
    return df[cols].sort_values(["paradigm", "workers", "gbps"]).reset_index(drop=True)


def reference_run(runs: pd.DataFrame, target: float) -> Optional[str]:
    """A run of ``runs`` (:func:`workbench.analysis.load`'s table) that can be the time-to-target
    reference: ``trainer=sync`` on 2 or more workers, completed, that reached ``target`` with a
    logged gradient noise scale; the one with the most steps. None if there is none."""
    from workbench.plan.to_target import reference_from_run
    if runs.empty or "trainer" not in runs:
        return None
    cand = runs[(runs["trainer"] == "sync") & (runs["workers"] >= 2) & (runs["status"] == "completed")]
    for d in cand.sort_values("steps", ascending=False)["run_dir"]:
        try:
            reference_from_run(d, target)
            return str(d)
        except (ValueError, OSError, KeyError):
            continue
    return None


def crossover_gbps(profile: "Profile", workers: int, compressor: str, speedup: float = 1.0, latency: str = "50us") -> float:
    """Gbit/s below which ``compressor`` beats synchronous all-reduce on ``workers`` ranks (one per
    host), from the calibrated model; inf if at every rate, NaN if at none."""
    from workbench.network import parse_time
    from workbench.perfmodel import paradigms
    prof = profile.with_speedup(speedup * profile.speedup) if speedup != 1.0 else profile
    x = paradigms.crossover_bps(prof, paradigms.Cluster(workers, 1.25e9, parse_time(latency, "latency")), compressor)
    return float("nan") if x is None else x / 1e9


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


def stanza_prediction(profile: "Profile", nodes: Sequence[int], fc_workers: Sequence[int], gbps: float) -> List[float]:
    """Predicted samples/s of Stanza with ``fc_workers[i]`` FC ranks out of ``nodes[i]`` (one per
    host, ``gbps`` Gbit/s, 50 µs latency); NaN where no CONV rank would be left."""
    from workbench.perfmodel import paradigms
    pred = []
    for n, n_f in zip(nodes, fc_workers):
        cl = paradigms.Cluster(int(n), gbps * 1e9 / 8, 50e-6)
        pred.append(paradigms.stanza(profile, cl, int(n_f)).samples_per_s if int(n) - int(n_f) >= 1 else float("nan"))
    return pred


def accuracy_against_prediction(run_dir: str, reference: str) -> go.Figure:
    """A run's test accuracy against steps (as far as it has come: a running run's metrics too),
    beside the curve the time-to-target law predicts for its configuration from ``reference``
    (:func:`workbench.plan.curve.predicted_curve`) and the reference's own curve; where the law
    predicts none, the figure says why in its title."""
    from workbench.analysis.accuracy import record
    from workbench.plan.curve import predicted_curve
    from workbench.runs.handle import Run
    run = Run(run_dir)
    ev = [(r["step"], r["test_accuracy"]) for r in run.records()
          if r.get("kind") == "eval" and r.get("test_accuracy") is not None]
    fig = go.Figure()
    fig.add_scatter(x=[e[0] for e in ev], y=[e[1] for e in ev], mode="lines+markers", name=f"{run.path.name} (measured)")
    title = f"{run.config.trainer.name}: measured and predicted accuracy"
    try:
        curve = predicted_curve(str(reference), run.config)
        fig.add_scatter(x=curve["step"], y=curve["test_accuracy"], mode="lines", line={"dash": "dash"},
                        name="predicted (docs/time_to_target.md)")
    except ValueError as e:
        title += f" (no prediction: {e})"
    ref = record(reference)["evals"]
    fig.add_scatter(x=[e[0] for e in ref], y=[e[2] for e in ref], mode="lines", line={"dash": "dot", "width": 1},
                    name="reference (sync)", opacity=0.6)
    return fig.update_layout(title=title, xaxis_title="optimizer steps", yaxis_title="test accuracy",
                             yaxis_tickformat=".0%")


def reference_overrides(run_dir) -> List[str]:
    """The overrides that plan what a run trained: its model, its data set with every one of its
    ``data.*`` values (its cache's root, size and augmentation too), its ranks; profiles kept under
    the project's ``experiments/``."""
    import workbench
    from omegaconf import OmegaConf

    from workbench.runs.handle import Run
    cfg = Run(run_dir).config
    data = OmegaConf.to_container(cfg.data, resolve=True)
    keys = [f"data.{k}={'null' if v is None else v}" for k, v in data.items()
            if k != "name" and not isinstance(v, (dict, list))]
    return [f"model={cfg.model.name}", f"data={cfg.data.name}", *keys, f"cluster.nproc={cfg.cluster.nproc}",
            f"output_root={workbench.project_path('experiments')}"]
