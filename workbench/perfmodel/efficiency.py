"""Statistical efficiency: the steps a paradigm needs to reach a target accuracy, from one reference
run of the user's own model and data (``trainer=sync`` on two or more workers, which logs the
gradient noise scale B_noise per evaluation, docs/accuracy.md). Time to target is these steps times
the step-time model's step (:mod:`workbench.plan`).

The reference gives B₀ (its global batch), S₀ (its steps to the target) and B_noise (the median of
its logged noise scale over the evaluations up to the target). Each law below is a claim with its
source and the table of the accuracy suite that tests it (docs/time_to_target.md):

*Global batch* (McCandlish et al. 2018, eq. 2.11): with the learning rate scaled to the batch,
``S(B) = S_min · (1 + B_noise / B)``, ``S_min = S₀ / (1 + B_noise / B₀)``. Tested by table (b).

*A compressor without error feedback*: its decoded message ``C(g) = ρ g + ξ``, measured on the
reference model's own gradients (:mod:`workbench.plan.update_stats`: ``ρ = E⟨C(g), g⟩ / E|g|²``,
``ω = E|ξ|² / (ρ² E|g|²)``). The update is SGD at ρ times the rate with extra noise: each of the N
workers' messages adds ω times its gradient's squared norm, ``E|g_b|² = |G|² + tr Σ / b``, so the
step's noise ``tr Σ / B`` becomes ``(1 + ω) tr Σ / B + ω |G|² / N`` (independent workers), and in
McCandlish's quadratic model a step at ρ times the optimal rate gains ``ρ (2 − ρ)`` of the optimal
step's progress:

    S = S_min · (1 + (1 + ω) B_noise / B + ω / N) / (ρ (2 − ρ))      (ρ ≥ 2: does not converge)

*A compressor with error feedback*: ``S = S(B) / (ρ (2 − ρ))``, ρ the scale its step puts on what it
counts as sent (1 but for EF-signSGD's ``step_scale``). Error feedback applies what compression
dropped in later steps, and EF-SGD keeps SGD's rate, compression entering only higher-order terms
(Stich et al. 2018, Karimireddy et al. 2019). Those terms scale with (1 − δ)/δ², δ the share of the
gradient's energy a message keeps (:attr:`UpdateStats.ef_excess`): the law leaves them out, so it is
optimistic where that is large (Random-K at 1 %). Tested, with the law above, by table (e).

*Stale updates* (asynchronous and n-softsync parameter servers, :class:`Update`): a worker step's
samples make the progress synchronous SGD's step of the same samples makes, however the servers
group them into updates and however stale they are — Rudra's finding at constant μλ with α₀/⟨τ⟩,
and Mitliagkas et al.'s for momentum compensated for asynchrony — unless the delayed updates
diverge: gradient descent on a quadratic whose gradient is τ updates old is stable only below
``2 sin(π / (2(2τ + 1)))`` of the curvature's rate (Levin & May 1976; 2 at τ = 0), and an update at
``rate`` times synchronous SGD's runs at ``rate / (1 + B_noise / B)`` of it (the reference's rate taken
as the best for its batch). Its measurements: docs/time_to_target.md.

Stanza (BSP) declares synchronous SGD's update; local SGD, BMUF and EASGD the same samples law
(averaging commutes with a linear gradient; block momentum at ζ ≤ 1 is stable on the quadratic;
the elastic force's stability is not checked). A paradigm that declares none has no law here.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Optional, Tuple

NO_LAW = "has no law here yet"


@dataclass(frozen=True)
class Reference:
    """One synchronous run that reached the target: its global batch, steps to target, noise scale."""

    batch: int
    steps: int
    noise_scale: float
    target: float
    workers: int = 1
    source: str = ""
    steps_after: Optional[int] = None  # the evaluation before the hit: the target was crossed after it
    noise_range: Optional[Tuple[float, float]] = None  # the noise scale's quartiles up to the target

    @property
    def s_min(self) -> float:
        """S_min: the steps an infinitely large batch would need (McCandlish's eq. 2.11)."""
        return self.steps / (1 + self.noise_scale / self.batch)

    def corners(self) -> list:
        """The references the measurement cannot tell apart: the crossing anywhere after the previous
        evaluation, the noise scale anywhere between its quartiles (what :func:`interval` spans)."""
        from dataclasses import replace
        steps = {self.steps, max(1, self.steps_after + 1)} if self.steps_after is not None else {self.steps}
        noises = set(self.noise_range) if self.noise_range else {self.noise_scale}
        return [replace(self, steps=s, noise_scale=b) for s in steps for b in noises]


@dataclass(frozen=True)
class UpdateStats:
    """How a compressor's decoded message relates to the gradient: ``C(g) = rho g + xi`` with
    ``E|xi|^2 = omega rho^2 E|g|^2``; with error feedback, rho is the step's scale on what was sent
    and omega = 0 by assumption."""

    rho: float = 1.0
    omega: float = 0.0
    error_feedback: bool = False
    delta: Optional[float] = None  # with error feedback: the share of the gradient's energy a message keeps

    @property
    def ef_excess(self) -> Optional[float]:
        """(1 − δ)/δ²: the scale of error feedback's extra term in Karimireddy et al.'s bound, which the
        law leaves out (it assumes SGD's rate): large means the prediction is optimistic."""
        return None if self.delta is None or not self.error_feedback else (
            math.inf if self.delta <= 0 else (1 - self.delta) / self.delta ** 2)


@dataclass(frozen=True)
class Update:
    """How a paradigm's updates differ from synchronous SGD's at the same samples per worker step:
    each at ``rate`` times its rate, ``staleness`` (⟨τ⟩) updates old; ``law`` names it in a phrase."""

    rate: float = 1.0
    staleness: float = 0.0
    law: str = "synchronous SGD"

    def divergence(self, ref: "Reference", batch: float) -> str:
        """Why the delayed updates diverge (Levin & May's bound, the module docstring), or ""."""
        if self.staleness <= 0:
            return ""
        tau = self.staleness
        edge = 2 * math.sin(math.pi / (2 * (2 * tau + 1)))
        at = self.rate / (1 + ref.noise_scale / batch)
        return "" if at < edge else (f"updates {tau:.2g} stale at {at:.2f} of the curvature's rate diverge "
                                     f"(delayed gradient descent is stable below {edge:.2f}: Levin & May)")


SYNC = Update()


def reference_from_evals(evals, batch: int, target: float, workers: int = 1, source: str = "") -> Reference:
    """A :class:`Reference` from a run's evaluations ``[[step, time, accuracy, noise_scale], ...]``
    (:func:`workbench.analysis.accuracy.record`): its first step at or above ``target`` and the
    median finite noise scale up to it. ValueError, in one line, where it never reached the target
    or logged no noise scale."""
    hit = next((e for e in evals if e[2] >= target), None)
    if hit is None:
        best = max((e[2] for e in evals), default=float("nan"))
        raise ValueError(f"the run never reached {target:.1%} (best {best:.1%})")
    gns = [e[3] for e in evals if e[0] <= hit[0] and isinstance(e[3], (int, float)) and math.isfinite(e[3]) and e[3] > 0]
    if not gns:
        raise ValueError(f"the run logged no gradient noise scale up to the target (trainer=sync on 2 or more workers, "
                         f"trainer.noise_scale=true, an evaluation before step {hit[0]})")
    before = [e[0] for e in evals if e[0] < hit[0]]
    q = statistics.quantiles(gns, n=4, method="inclusive") if len(gns) > 1 else [gns[0]] * 3
    return Reference(batch=int(batch), steps=int(hit[0]), noise_scale=float(statistics.median(gns)),
                     target=float(target), workers=int(workers), source=source,
                     steps_after=max(before) if before else 0, noise_range=(float(q[0]), float(q[2])))


def steps_to_target(ref: Reference, batch: int, stats: UpdateStats = UpdateStats(), workers: int = 1,
                    update: Update = SYNC) -> Tuple[Optional[float], str]:
    """Predicted worker steps to ``ref.target`` at ``batch`` samples a worker step over ``workers``
    workers, whose messages go through a compressor with ``stats``, with ``update``'s updates; None
    with the reason where it predicts none."""
    unstable = update.divergence(ref, batch)
    if unstable:
        return None, unstable
    rho, omega = stats.rho, 0.0 if stats.error_feedback else stats.omega
    if not rho > 0:
        return None, "the compressor's message has no component along the gradient (rho <= 0)"
    if rho >= 2:
        return None, f"the compressor's step is {rho:.3g}x the rate (rho >= 2: no progress in the quadratic model)"
    noise = (1 + omega) * ref.noise_scale / batch + omega / max(1, workers)
    return ref.s_min * (1 + noise) / (rho * (2 - rho)), ""


def interval(ref: Reference, batch: int, stats: UpdateStats = UpdateStats(), workers: int = 1,
             update: Update = SYNC) -> Optional[Tuple[float, float]]:
    """The range of :func:`steps_to_target` over the reference's :meth:`~Reference.corners`: what the
    reference's evaluation spacing and the spread of its noise scale leave open; None where it
    predicts none."""
    s = [steps_to_target(c, batch, stats, workers, update)[0] for c in ref.corners()]
    return None if any(x is None for x in s) else (min(s), max(s))
