"""The accuracy curve the time-to-target law predicts for a configuration: for each accuracy its
reference run reached, the steps the configuration needs to reach it (the law of
:mod:`workbench.perfmodel.efficiency` with that accuracy as the target, the reference's noise scale
up to it), so that a run can be drawn beside its prediction while it trains
(:func:`workbench.analysis.accuracy_against_prediction`, ``workbench.widgets.LiveAccuracy``).

    from workbench.plan.curve import predicted_curve
    predicted_curve("experiments/runs/<the sync reference>", workbench.compose(["trainer=ps", "trainer.mode=async"]))
"""
from __future__ import annotations

from typing import Optional

import pandas as pd

from workbench.perfmodel.efficiency import UpdateStats, reference_from_evals, steps_to_target


def _update_stats(reference: str, cfg) -> Optional[UpdateStats]:
    """The compressor's measured update on the reference's gradients (plain SGD's without one)."""
    comp = cfg.get("compressor")
    if comp is None or comp.name == "none":
        return UpdateStats()
    from workbench.plan.update_stats import measure
    return measure(reference, {comp.name: comp})[comp.name]


def predicted_curve(reference: str, cfg) -> pd.DataFrame:
    """``step``, ``test_accuracy``: where a run of ``cfg`` is predicted to reach each accuracy the
    reference (a ``trainer=sync`` run directory of the same model and data, :mod:`.to_target`)
    reached at an evaluation that logged a noise scale. ValueError, in one line, where the
    configuration's paradigm has no law or the law predicts no progress."""
    from workbench.analysis.accuracy import record
    from workbench.plan.to_target import declared_update, reference_batch
    ref_batch, ref_workers = reference_batch(reference)
    batch, workers, update = declared_update(cfg)
    if update is None:
        raise ValueError(f"trainer={cfg.trainer.name}'s statistical efficiency has no law here yet (docs/time_to_target.md)")
    stats = _update_stats(reference, cfg)
    if stats is None:
        raise ValueError(f"compressor={cfg.compressor.name}'s update could not be measured on the reference")
    evals, rows, best = record(reference)["evals"], [], 0.0
    for _, _, acc, _ in evals:
        if acc is None or acc <= best:
            continue
        best = acc
        try:
            ref = reference_from_evals(evals, ref_batch, acc, ref_workers)
        except ValueError:  # no noise scale logged up to this accuracy yet
            continue
        steps, why = steps_to_target(ref, batch, stats, workers, update)
        if steps is None:
            raise ValueError(why)
        rows.append((steps, acc))
    return pd.DataFrame(rows, columns=["step", "test_accuracy"])
