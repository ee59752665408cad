"""``--target-accuracy``: each planned row's steps and time to a target accuracy, from a reference
run of the same model and data (:mod:`workbench.perfmodel.efficiency`), and the rows ranked by
time to target instead of samples/s.

A row's update is ``predicted_samples_per_s × predicted_step_s`` samples (its global batch); the
workers whose gradients it holds are that over the per-worker batch. Rows gain
``predicted_steps_to_target``, ``predicted_time_to_target_s`` (None where the model predicts none),
their intervals ``predicted_steps_interval`` and ``predicted_time_to_target_interval_s`` (what the
reference's evaluation spacing and noise-scale quartiles leave open) and ``to_target_note`` (why none: "not modelled: …", or a compressor that does not converge)."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Dict, List, Optional

from workbench.core import ConfigError
from workbench.perfmodel.efficiency import NO_LAW, Reference, UpdateStats, interval, reference_from_evals, steps_to_target


def reference_batch(run_dir) -> tuple:
    """(global batch, workers) of a reference run directory; ValueError in one line where it is no
    run or not ``trainer=sync``."""
    from workbench.data import global_batch_size
    from workbench.runs.handle import Run
    if not (Path(run_dir) / "config.yaml").is_file():
        raise ValueError("not a run directory (no config.yaml)")
    cfg = Run(run_dir).config
    if cfg.trainer.name != "sync":
        raise ValueError(f"it is a trainer={cfg.trainer.name} run: use a trainer=sync run")
    n = int(cfg.cluster.nproc)
    return global_batch_size(cfg, n), n


def declared_update(cfg) -> tuple:
    """(samples of a worker step, workers, the update its paradigm declares or None) of a run's
    config (``ParadigmSpec.update_law``)."""
    from workbench.core import world_size
    from workbench.data import global_batch_size
    from workbench.spec import spec_of
    from workbench.trainers import TRAINERS
    w = TRAINERS[cfg.trainer.name].num_workers(cfg)
    return global_batch_size(cfg, w), w, spec_of(cfg.trainer.name).update_law(cfg, world_size(cfg))


def reference_from_run(run_dir, target: float) -> Reference:
    """:func:`~workbench.perfmodel.efficiency.reference_from_evals` of a run directory (its config
    gives the global batch)."""
    from workbench.analysis.accuracy import record
    batch, n = reference_batch(run_dir)
    return reference_from_evals(record(run_dir)["evals"], batch, target, n, str(run_dir))


def load_reference(run_dir: str, target: float, cfg=None) -> Reference:
    """The reference of ``--reference RUN`` at ``target`` (of the model and data of ``cfg``, where
    given), or one ConfigError line."""
    if not 0 < target < 1:
        raise ConfigError(f"invalid value {target!r} for --target-accuracy: a test accuracy in (0, 1), e.g. 0.9")
    try:
        ref = reference_from_run(run_dir, target)
    except (OSError, ValueError, KeyError) as e:
        raise ConfigError(f"invalid value {run_dir!r} for --reference: {e}" + (
            ": lower --target-accuracy or name a run that reached it" if "never reached" in str(e) else "")) from None
    if cfg is not None:
        from workbench.runs.handle import Run
        theirs = Run(run_dir).config
        for key in ("model.name", "data.name"):
            mine, other = _get(cfg, key), _get(theirs, key)
            if mine != other:
                raise ConfigError(f"invalid value {run_dir!r} for --reference: its {key} is {other}, the plan's {mine}")
    return ref


def _get(cfg, key: str):
    from omegaconf import OmegaConf
    return OmegaConf.select(cfg, key)


_STATS: Dict[tuple, Dict[str, Optional[UpdateStats]]] = {}


def compressor_stats(run_dir: str, vs_by_workers: Dict[int, list]) -> Dict[str, Optional[UpdateStats]]:
    """:func:`workbench.plan.update_stats.measure` of every compressor the variants plan (by its
    config) on the reference run's gradients; kept per process by run, its weights' time and the
    configs (the what-if curves plan the same ones at every redraw)."""
    from omegaconf import OmegaConf

    from workbench.plan.update_stats import measure
    configs = {OmegaConf.to_yaml(v.cfg.compressor): v.cfg.compressor for vs in vs_by_workers.values() for v in vs
               if _compressor(v) is not None}
    if not configs:
        return {}
    weights = Path(run_dir) / "model.pt"
    key = (str(Path(run_dir).resolve()), weights.stat().st_mtime_ns, tuple(sorted(configs)))
    if key not in _STATS:
        _STATS[key] = measure(run_dir, configs)
    return dict(_STATS[key])


def _compressor(v) -> Optional[str]:
    c = v.cfg.get("compressor")
    return c.name if c is not None and c.name != "none" and ("+" in v.label or v.label.startswith("compressed/")) else None


def add_to_target(rows: List[dict], vs_by_workers: Dict[int, list], ref: Reference,
                  stats: Dict[str, Optional[UpdateStats]]) -> List[dict]:
    """Each row's steps and time to ``ref.target``, in place; each (workers, bandwidth) group ranked
    again by predicted time to target (rows with none last, by samples/s)."""
    from omegaconf import OmegaConf

    from workbench.data import batch_size_per_worker
    from workbench.spec import spec_of
    by_label = {(w, v.label): v for w, vs in vs_by_workers.items() for v in vs}
    for r in rows:
        v = by_label[(r["workers"], r["paradigm"])]
        batch = r["predicted_samples_per_s"] * r["predicted_step_s"]
        workers = max(1, round(batch / batch_size_per_worker(v.cfg, r["workers"])))
        st = stats.get(OmegaConf.to_yaml(v.cfg.compressor)) if _compressor(v) else None
        update = spec_of(v.trainer).update_law(v.cfg, r["workers"])
        if update is None:
            steps, why = None, f"not modelled: {v.trainer}'s statistical efficiency {NO_LAW}"
        elif _compressor(v) and st is None:
            steps, why = None, "not modelled: the compressor's update was not measured"
        else:
            steps, why = steps_to_target(ref, round(batch), st or UpdateStats(), workers, update)
        r["predicted_steps_to_target"] = None if steps is None else round(steps)
        r["predicted_time_to_target_s"] = None if steps is None else steps * r["predicted_step_s"]
        r["to_target_law"] = None if update is None else update.law
        span = interval(ref, round(batch), st or UpdateStats(), workers, update) if steps is not None else None
        r["predicted_steps_interval"] = None if span is None else [round(span[0]), round(span[1])]
        r["predicted_time_to_target_interval_s"] = None if span is None else [x * r["predicted_step_s"] for x in span]
        r["to_target_note"] = why
        if st is not None and st.ef_excess is not None:
            r["compressor_ef_excess"] = st.ef_excess
    groups: Dict[tuple, List[dict]] = {}
    for r in rows:
        groups.setdefault((r["workers"], r["bandwidth"]), []).append(r)
    out = []
    for group in groups.values():
        group.sort(key=lambda r: (math.inf if r["predicted_time_to_target_s"] is None else r["predicted_time_to_target_s"],
                                  -r["predicted_samples_per_s"]))
        for i, r in enumerate(group, 1):
            r["rank"] = i
        out += group
    return out


def with_target(rows: List[dict], vs_by_workers: Dict[int, list], ref: Reference) -> List[dict]:
    """``rows`` with their steps and time to ``ref.target`` from the reference (its run directory is
    ``ref.source``), ranked by time to target (:func:`add_to_target`)."""
    return add_to_target(rows, vs_by_workers, ref, compressor_stats(ref.source, vs_by_workers))


def check_args(target: Optional[float], reference: Optional[str], cfg=None) -> Optional[Reference]:
    """``--reference`` only with ``--target-accuracy``, the target in (0, 1); the named reference, read
    and checked against ``cfg``'s model and data (one ConfigError line), or None (none named: the
    planner runs one, :mod:`workbench.plan.reference`)."""
    if reference and target is None:
        raise ConfigError("--reference needs --target-accuracy: the accuracy whose time the plan predicts")
    if target is not None and not 0 < target < 1:
        raise ConfigError(f"invalid value {target!r} for --target-accuracy: a test accuracy in (0, 1), e.g. 0.9")
    return load_reference(reference, target, cfg) if reference else None


def header(ref: Reference) -> str:
    """One line naming the reference and its parameters."""
    lo, hi = ref.noise_range or (ref.noise_scale, ref.noise_scale)
    return (f"time to {ref.target:.0%}: reference {ref.source} (global batch {ref.batch}, {ref.steps} steps to "
            f"target (crossed after step {ref.steps_after}), B_noise {ref.noise_scale:.0f} ({lo:.0f}–{hi:.0f}), "
            f"S_min {ref.s_min:.0f}); docs/time_to_target.md")
