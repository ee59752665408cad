"""``--verify`` with ``--target-accuracy``: each planned row run here until the target or a cap,
once per seed (``--seeds``), its measured steps and training time to the target beside the
prediction (:mod:`workbench.plan.to_target`), and its step time and bytes measured on the same run
(seed 0) as a plain verification measures them.

The cap is ``CAP_FACTOR`` times the steps the batch law predicts at the row's global batch, at least
``CAP_FACTOR`` times the reference's, at most ``CAP_MAX``: a compressor or protocol that needs more
shows as not reached within it. A run evaluates ``EVALS`` times, and one whose ranks evaluate
together ends at the target (``trainer.stop_at_accuracy``). Rows gain
``measured_steps_to_target`` and ``measured_time_to_target_s`` (medians over seeds, a seed that did
not reach the target counting as infinitely slow, None where the median is), ``measured_reached``
("k/n"), ``measured_cap`` and ``steps_error`` (predicted / measured − 1 where both exist)."""
from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Dict, List, Optional

from workbench.perfmodel.efficiency import Reference, steps_to_target
from workbench.plan.rows import here
from workbench.plan.verification import VERIFY_SKIP, Progress, interactive, measured_of, network_overrides, scored
from workbench.trainers import TRAINERS

CAP_FACTOR = 3
CAP_MAX = 20000
EVALS = 40


def cap_steps(ref: Reference, batch: float) -> int:
    """The step cap of a row whose update is ``batch`` samples."""
    base = max(steps_to_target(ref, max(1, round(batch)))[0], ref.steps)
    return int(min(CAP_MAX, math.ceil(CAP_FACTOR * base)))


def first_hit(run, target: float) -> tuple:
    """(step, training seconds) of the run's first evaluation at or above ``target``, or (None, None)."""
    for r in run.records():
        if r.get("kind") == "eval" and (r.get("test_accuracy") or 0) >= target:
            return r["step"], r.get("train_time", r.get("time"))
    return None, None


def _median(xs: List[Optional[float]]) -> Optional[float]:
    m = statistics.median([math.inf if x is None else x for x in xs])
    return None if m == math.inf else m


def verify_to_target(rows: List[dict], vs: Dict[int, list], root: Path, ref: Reference, seeds: int = 1,
                     log=print, bars: Optional[bool] = None) -> List[dict]:
    """Run every row on a bandwidth here to ``ref.target`` (in place); see the module docstring."""
    import workbench
    by_label = {(w, v.label): v for w in vs for v in vs[w]}
    todo = [r for r in rows if here(r["bandwidth"])]
    progress = Progress(len(todo) * seeds, log, interactive() if bars is None else bars)
    for r in todo:
        v = by_label[(r["workers"], r["paradigm"])]
        cap = cap_steps(ref, r["predicted_samples_per_s"] * r["predicted_step_s"])
        hits, runs = [], []
        for seed in range(seeds):
            progress.start(f"{r['paradigm']} on {r['workers']} ranks, {r['bandwidth']}, seed {seed}, "
                           f"to {ref.target:.0%} or {cap} steps")
            cfg = workbench.compose([*v.overrides, *network_overrides(r["bandwidth"]), f"seed={seed}",
                                     f"trainer.max_steps={cap}", f"trainer.eval_every={max(1, cap // EVALS)}",
                                     "trainer.progress=false", "checkpoint.every=0", f"output_root={root}",
                                     *([f"trainer.stop_at_accuracy={ref.target}"] if TRAINERS[v.trainer].shared_evaluation
                                       else [])])
            run = workbench.launch(cfg, progress=progress.bars, check=False)
            runs.append(run)
            hits.append(first_hit(run, ref.target) if run.summary.get("status") == "completed" else (None, None))
            progress.done()
        steps = runs[0].summary.get("steps") or 0
        scored(r, measured_of(runs[0], min(VERIFY_SKIP, steps // 2)))  # a run stopped at the target may be short
        r["measured_steps_to_target"] = _median([h[0] for h in hits])
        r["measured_time_to_target_s"] = _median([h[1] for h in hits])
        r["measured_reached"] = f"{sum(h[0] is not None for h in hits)}/{seeds}"
        r["measured_cap"] = cap
        p, m = r.get("predicted_steps_to_target"), r["measured_steps_to_target"]
        r["steps_error"] = p / m - 1 if p is not None and m else None
        r["to_target_runs"] = [str(run.path) for run in runs]
    progress.close()
    return rows
