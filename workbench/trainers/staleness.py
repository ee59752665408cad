"""Bounded-staleness asynchronous SGD on the parameter server: Rudra's protocols (docs/papers.md §1).

Workers and servers as in ``trainer=ps``; what changes is when a server updates and how it weighs
a gradient by its staleness τ (server clock at apply time minus the clock of the weights the
gradient was computed on; every push carries that clock):

- ``protocol=hardsync``: one gradient from every worker, then update (τ = 0; SGD on the global batch).
- ``protocol=softsync`` with ``n`` (1..λ): update after c = ⌊λ/n⌋ gradients from any workers,
  averaging them; n = λ is fully asynchronous. Observed ⟨τ⟩ ≈ n.
- ``lr_modulation``: ``none`` | ``per_gradient`` (α₀/τ, α₀ at τ = 0) | ``mean`` (α₀/⟨τ⟩ of the update).
- ``max_staleness`` s (null: unbounded) with ``on_stale``: ``block`` (SSP: the server holds its
  clock and keeps fast workers waiting until the slow gradient is in) or ``drop`` (discard a
  gradient older than s). Applied gradients never exceed s: the server asserts it.

``metrics.jsonl`` gets a ``kind: server`` record at every evaluation (staleness histogram, mean,
update sizes, updates/s, drops); ``summary.json`` the totals under ``ps``. Slow workers on purpose:
``inject.straggler_ranks``, ``inject.straggler_delay_s``, ``inject.straggler_factor``.

    python -m workbench trainer=staleness trainer.n=3 cluster.nproc=4          # 3-softsync, λ=3
    python -m workbench trainer=staleness trainer.n=3 trainer.lr_modulation=per_gradient
    python -m workbench trainer=staleness trainer.protocol=hardsync
    python -m workbench trainer=staleness trainer.n=3 trainer.max_staleness=2 \\
        inject.straggler_ranks=[2] inject.straggler_delay_s=0.05
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from workbench.core import ConfigError, store_schema
from workbench.ps.rules import MODULATIONS, ON_STALE
from workbench.ps.trainer import smoke_overrides
from workbench.perfmodel.efficiency import SYNC, Update
from workbench.spec import ParadigmSpec, declare, qualified
from workbench.stability import rate_factor
from workbench.trainers import TRAINERS
from workbench.trainers.ps import GradientPSTrainer, PSConfig, push_pull_bytes


@dataclass
class StalenessConfig(PSConfig):
    name: str = "staleness"
    mode: str = "async"  # unused here (trainer=ps's switch); the protocol below decides
    protocol: str = "softsync"  # hardsync | softsync
    n: int = 1  # softsync: the server updates after c = floor(lambda / n) gradients (n = lambda: async)
    lr_modulation: str = "none"  # none | per_gradient (lr/tau) | mean (lr/<tau> of the update)
    max_staleness: Optional[int] = None  # enforced bound s on tau (null: unbounded)
    on_stale: str = "block"  # block: fast workers wait (SSP) | drop: discard gradients older than s
    compensate_momentum: bool = False  # Rudra's protocols as published: optim.momentum as given


store_schema("trainer", "staleness", StalenessConfig)


@TRAINERS.register("staleness")
class StalenessTrainer(GradientPSTrainer):
    name = "staleness"

    @classmethod
    def validate(cls, cfg) -> None:
        super().validate(cfg)
        t = cfg.trainer
        lam = cls.num_workers(cfg)
        if t.protocol not in ("hardsync", "softsync"):
            raise ConfigError(f"invalid value {t.protocol!r} for trainer.protocol: choose from hardsync, softsync")
        if not 1 <= t.n <= lam:
            raise ConfigError(f"invalid value {t.n!r} for trainer.n: must be in [1, {lam}] (the number of workers, lambda)")
        if t.lr_modulation not in MODULATIONS:
            raise ConfigError(f"invalid value {t.lr_modulation!r} for trainer.lr_modulation: choose from {', '.join(MODULATIONS)}")
        if t.max_staleness is not None and t.max_staleness < 0:
            raise ConfigError(f"invalid value {t.max_staleness!r} for trainer.max_staleness: must be >= 0, or null for unbounded")
        if t.on_stale not in ON_STALE:
            raise ConfigError(f"invalid value {t.on_stale!r} for trainer.on_stale: choose from {', '.join(ON_STALE)}")

    def rule_options(self) -> dict:
        t = self.cfg.trainer
        if t.protocol == "hardsync":
            return {"hardsync": True}
        return {"hardsync": False, "c": self.workers // t.n, "max_staleness": t.max_staleness,
                "on_stale": t.on_stale, "lr_modulation": t.lr_modulation}


def _label(get) -> str:
    """``staleness/n=<n>`` for n-softsync (n = λ is asynchronous), ``staleness/hardsync``."""
    if get("trainer.protocol") == "softsync" and get("trainer.n") is not None:
        return f"staleness/n={int(get('trainer.n'))}"
    return qualified("staleness", get)


def _staleness_model(cfg):
    from workbench.compress.codec_timing import codec_for
    from workbench.perfmodel import paradigms
    t = cfg.trainer
    opts = {"servers": int(t.num_servers), "n": int(t.n), "hardsync": t.protocol == "hardsync"}
    push, pull = codec_for(cfg.get("compressor")), codec_for(cfg.get("compressor"), "compressor.pull")
    if push is not None or pull is not None:  # staleness/n=<n>+<c>
        return paradigms.compressed_messages.staleness, {**opts, "push": push, "pull": pull}
    return paradigms.staleness, opts


def _staleness_variants(ranks: int) -> list:
    """n-softsync for n = 1 … λ (hardsync is ps/sync's model and bytes: planned once, as ps/sync),
    and n = 1 with each planned compressor that pushes gradients point to point."""
    from workbench.compress.codec_timing import planned
    soft = [["trainer=staleness", "trainer.protocol=softsync", f"trainer.n={n}"] for n in range(1, ranks)]
    return soft + [[*soft[0], f"compressor={c}"] for c in planned(("gradient", "p2p"))] if soft else []


def _protocol(cfg, ranks: int):
    """n-softsync runs c = ⌊λ/n⌋ gradients an update: n values with the same c are one protocol."""
    t = cfg.trainer
    return f"softsync c={(ranks - int(t.num_servers)) // int(t.n)}" if t.protocol == "softsync" else None


def _staleness_law(cfg, ranks) -> Update:
    """n-softsync: updates of c = ⌊λ/n⌋ gradients; while a worker computes, the other λ − 1 push, so
    its gradient is ⟨τ⟩ = (λ − 1)/c updates old (≈ n, Rudra); with α₀/τ modulation each update runs
    at 1/n of the rate (per gradient, E[1/τ] ≈ 1/⟨τ⟩), and at what compensated momentum leaves
    (:func:`workbench.stability.rate_factor`)."""
    t = cfg.trainer
    if t.protocol == "hardsync":
        return SYNC
    lam, n = ranks - int(t.num_servers), int(t.n)
    c = max(1, lam // n)
    rate = (1.0 / n if t.lr_modulation != "none" else 1.0) * rate_factor(cfg)
    tau = (lam - 1) / c
    return Update(rate=rate, staleness=tau, law=f"stale updates ({tau:.2g} old)")


declare(ParadigmSpec(
    "staleness", update_law=_staleness_law, label=_label, perf_model=_staleness_model, smoke_overrides=smoke_overrides, same_protocol=_protocol,
    analytic_bytes=push_pull_bytes,  # one push per worker step, whatever the protocol
    plan_variants=_staleness_variants))
