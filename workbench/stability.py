"""Asynchrony begets momentum (Mitliagkas, Zhang, Hadjis & Ré, 2016): with λ workers applying
gradients asynchronously, the parameter-server iteration behaves like SGD with an *implied*
momentum of about 1 − 1/λ on top of the optimizer's own. Explicit momentum μ plus the implied
one at or above 1 no longer contracts: the run stalls at chance or diverges (plain Downpour at
``optim.momentum=0.9`` with 3 workers: 0.9 + 0.67). The paper's remedy is to lower the explicit
momentum by the implied amount; ``trainer=ps`` does that by default in async mode
(``trainer.compensate_momentum=true``), ``trainer.compensate_momentum=false`` is plain Downpour.

Here: the implied momentum of a config, the explicit momentum the servers actually use, the
warnings :func:`warnings` prints before launch (never a refusal: the failure is a result worth
reproducing), and the sentence the verdict adds when a run did not learn.
"""
from __future__ import annotations

from typing import List


def concurrency(cfg) -> int:
    """Gradients computed on the same weights per server update, in the sense of the implied
    momentum: λ for ``trainer=ps`` async, n for ``trainer=staleness`` n-softsync (⟨τ⟩ ≈ n), else 1."""
    t = cfg.trainer
    if t.name not in ("ps", "staleness"):
        return 1
    from workbench.ps.trainer import PSTrainer  # both are parameter-server trainers (not the registry: ps imports us)
    lam = PSTrainer.num_workers(cfg)
    if t.name == "ps":
        return lam if t.mode == "async" else 1
    return int(t.n) if t.protocol == "softsync" else 1


def implied_momentum(cfg) -> float:
    return 1.0 - 1.0 / max(1, concurrency(cfg))


def explicit_momentum(cfg) -> float:
    """The momentum the optimizer runs with: ``optim.momentum``, less the implied momentum when
    the trainer compensates for it (never below 0)."""
    mu = float(cfg.optim.momentum)
    if cfg.trainer.get("compensate_momentum", False):
        return max(0.0, round(mu - implied_momentum(cfg), 4))
    return mu


def rate_factor(cfg) -> float:
    """The servers' long-run rate against the optimizer's as configured: momentum m multiplies a
    small rate by 1/(1 − m), so running the explicit m' of :func:`explicit_momentum` scales it by
    (1 − m)/(1 − m') (1 without compensation): the rate whose stability the time-to-target law checks."""
    mu = float(cfg.optim.momentum)
    return (1.0 - mu) / (1.0 - explicit_momentum(cfg)) if mu < 1 else 1.0


def suggested_momentum(cfg) -> float:
    """Explicit momentum that keeps explicit + implied at ``optim.momentum``."""
    return max(0.0, round(float(cfg.optim.momentum) - implied_momentum(cfg), 2))


def unstable_momentum(cfg) -> bool:
    """Explicit plus implied momentum at or above 1 (the bound is explicit < 1/concurrency)."""
    return concurrency(cfg) > 1 and explicit_momentum(cfg) + implied_momentum(cfg) >= 1.0


def momentum_advice(cfg) -> str:
    if not unstable_momentum(cfg):
        return ""
    lam, imp, mu = concurrency(cfg), implied_momentum(cfg), explicit_momentum(cfg)
    fix = f"optim.momentum={suggested_momentum(cfg):g}"
    if cfg.trainer.name == "ps":
        fix = f"trainer.compensate_momentum=true (or {fix})"
    return (f"asynchronous updates from {lam} concurrent gradients add an implied momentum of about "
            f"1-1/{lam} = {imp:.2f} to optim.momentum={mu:g} (Mitliagkas et al. 2016): try {fix}.")


def warnings(cfg) -> List[str]:
    """One line per configuration known to be unstable (printed before launch, never refused)."""
    if not unstable_momentum(cfg):
        return []
    lam = concurrency(cfg)
    return [f"known to be unstable: explicit momentum {explicit_momentum(cfg):g} is above the bound 1/{lam} = "
            f"{1 / lam:.2f} for {lam} asynchronous gradients; " + momentum_advice(cfg)]
