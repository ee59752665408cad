"""Did the run learn? One rule, a pure function of the metric sequences, written into every
``summary.json`` as ``verdict`` (with ``verdict_reason`` and ``verdict_advice``):

- ``diverged``: a loss is NaN or infinite.
- ``unstable``: test accuracy rose at least ``COLLAPSE`` above chance and then fell by ``COLLAPSE``
  or more from its best (collapse), or the smoothed training loss climbed back to at least twice
  its lowest value so far and ``SPIKE_NATS`` above it (a spike).
- ``did_not_learn``: the final test accuracy is within ``MARGIN`` of chance (1 / classes), or the
  training loss at the end is not below its start, or there is nothing to judge (no evaluation and
  fewer than two training steps: a run that failed before it trained).
- ``learned``: none of the above.

Collapse is checked before chance, so a run that reached 78 % and fell back to 10 % is called
unstable (the informative word), not "did not learn". :func:`advice` adds one sentence on the
likely cause and the override to try (for asynchrony with momentum, the implied momentum of
Mitliagkas et al. 2016 and the ``optim.momentum`` that compensates it, see :mod:`workbench.stability`).
"""
from __future__ import annotations

import math
from typing import Optional, Sequence, Tuple

VERDICTS = ("learned", "did_not_learn", "unstable", "diverged")
MARGIN = 0.05  # final accuracy below chance + MARGIN: did not learn
COLLAPSE = 0.2  # accuracy lost from its best (after rising this far above chance): unstable
SPIKE_FACTOR = 2.0  # smoothed loss back at this multiple of its lowest so far ...
SPIKE_NATS = 0.5  # ... and this far above it: a spike, not batch noise


def _smooth(xs: Sequence[float]) -> list:
    """Means of consecutive windows of ~1/20 of the run (at least 5 steps): a per-batch loss on
    16 samples is too noisy to call a spike on its own."""
    w = max(5, len(xs) // 20)
    return [sum(xs[i:i + w]) / len(xs[i:i + w]) for i in range(0, len(xs), w)]


def judge(losses: Sequence[float], accuracies: Sequence[float], num_classes: Optional[int],
          status: Optional[str] = None) -> Tuple[str, str]:
    """(verdict, reason) for a run's train losses and test accuracies, in step order."""
    losses = [float(x) for x in losses if x is not None]
    accs = [float(a) for a in accuracies if a is not None]
    bad = next((x for x in losses + accs if not math.isfinite(x)), None)
    if status == "diverged" or bad is not None:
        return "diverged", f"the loss became {bad if bad is not None else 'NaN/inf'}"
    chance = 1.0 / num_classes if num_classes else None
    if accs and chance is not None:
        best, final = max(accs), accs[-1]
        if best >= chance + COLLAPSE and final <= best - COLLAPSE:
            return "unstable", f"test accuracy collapsed from {best:.1%} to {final:.1%}"
        if final < chance + MARGIN:
            return "did_not_learn", f"final test accuracy {final:.1%} is at chance ({chance:.0%})"
    if len(losses) >= 2:
        head = losses[:max(1, min(5, len(losses) // 10))]
        tail = losses[-max(1, len(losses) // 10):]
        start, end = sum(head) / len(head), sum(tail) / len(tail)
        if end >= start:
            return "did_not_learn", f"training loss did not fall ({start:.3g} at the start, {end:.3g} at the end)"
        low = math.inf
        for m in _smooth(losses):
            if m >= SPIKE_FACTOR * low and m >= low + SPIKE_NATS:
                return "unstable", f"training loss spiked from {low:.3g} back to {m:.3g}"
            low = min(low, m)
    if accs:
        return "learned", f"final test accuracy {accs[-1]:.1%}" + (f" (chance {chance:.0%})" if chance else "")
    if len(losses) < 2:  # a run that failed before it trained: no evidence that it learned
        return "did_not_learn", f"{len(losses) or 'no'} training step{'' if len(losses) == 1 else 's'} recorded and no evaluation"
    return "learned", "training loss fell"


def judge_records(records: Sequence[dict], num_classes: Optional[int], status: Optional[str] = None) -> Tuple[str, str]:
    """:func:`judge` on metrics.jsonl records (``kind: train`` losses, ``kind: eval`` accuracies)."""
    losses = [r["loss"] for r in records if r.get("kind") == "train" and "loss" in r]
    accs = [r["test_accuracy"] for r in records if r.get("kind") == "eval" and "test_accuracy" in r]
    return judge(losses, accs, num_classes, status)


def advice(verdict: str, cfg) -> str:
    """One sentence: the likely cause of a verdict other than ``learned`` and the override to try."""
    if verdict == "learned":
        return ""
    from workbench.stability import momentum_advice
    sentence = momentum_advice(cfg)
    if sentence:
        return sentence
    o, t = cfg.optim, cfg.trainer
    lr = float(o.lr)
    if verdict == "diverged":
        return f"the step is too large for this configuration: try optim.lr={lr / 10:g} or optim.warmup_steps=100."
    if t.name == "bmuf" and verdict == "unstable":
        return ("block momentum on top of local momentum overshoots: try trainer.block_momentum=0.5 or "
                f"optim.momentum={max(0.0, float(o.momentum) - 0.4):g}.")
    if verdict == "did_not_learn" and lr < 1e-3:
        return f"optim.lr={lr:g} is too small to move the weights in this many steps: try optim.lr=0.05."
    if verdict == "did_not_learn" and cfg.get("compressor") is not None and t.name == "compressed" \
            and cfg.compressor.name == "signsgd":
        return "a sign update is as large as the learning rate on every element: try compressor.scale=0.002 or optim.lr=0.0001."
    if verdict == "did_not_learn":
        return f"too few or too small steps: try more trainer.epochs or optim.lr={lr * 2:g}."
    return f"the step is too large for this configuration: try optim.lr={lr / 2:g} or optim.momentum=0.5."


def num_classes(cfg) -> Optional[int]:
    try:
        from workbench.data import DATASETS
        return int(DATASETS[cfg.data.name].spec(cfg.data).num_classes)
    except Exception:  # noqa: BLE001 - an old or foreign config: judge on the loss alone
        return None


def summarize(records: Sequence[dict], cfg, status: Optional[str] = None) -> dict:
    """The ``verdict``, ``verdict_reason`` and ``verdict_advice`` fields of ``summary.json``."""
    v, reason = judge_records(records, num_classes(cfg), status)
    return {"verdict": v, "verdict_reason": reason, "verdict_advice": advice(v, cfg)}


def line(summary: dict) -> str:
    """The CLI's verdict line: ``verdict: did_not_learn (final test accuracy 10.0% is at chance); <advice>``."""
    if not summary or not summary.get("verdict"):
        return ""
    out = f"verdict: {summary['verdict']} ({summary.get('verdict_reason', '')})"
    return out + (f"; {summary['verdict_advice']}" if summary.get("verdict_advice") else "")
