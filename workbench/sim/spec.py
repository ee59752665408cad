"""What to simulate (:class:`SimSpec`), checked before anything runs, and what it will cost.

A spec is a cluster of λ workers and S parameter servers under one protocol (``hardsync``,
``softsync`` with n in 1..λ, n = λ being asynchronous, or ``easgd``), each worker computing
``steps`` steps. Compute times are ``compute_s`` per step, multiplied by a lognormal factor of
mean 1 and coefficient of variation ``cv`` (0: every step takes exactly ``compute_s``); stragglers
are (worker, factor, delay) triples, as in :class:`workbench.perfmodel.paradigms.Cluster`. Links
and servers are priced with :mod:`workbench.perfmodel.collectives`; ``from_profile`` builds a spec
from a calibrated :class:`~workbench.perfmodel.profile.Profile`.

``host_cores`` (None by default: one host per worker and per server, today's network model) puts
every node on one shared host of that many cores, as the validation runs on this machine are:
then ``compute_s`` is CPU-seconds of one single-threaded batch (the profile's ``compute_s(1)``),
not the wall time at some concurrency, since the pool itself does the time-sharing.

:func:`check` raises :class:`~workbench.config.ConfigError` (one line naming the key and its valid
range) for λ < 1, n outside 1..λ, a distribution parameter out of range, and a run whose estimated
cost (events × the measured cost of one) exceeds ``max_wall_s``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Optional, Tuple

from workbench.config import ConfigError

PROTOCOLS = ("hardsync", "softsync", "easgd")
MAX_CV = 10.0  # a lognormal spread beyond this is a typo, not a cluster
# Seconds of pure Python per simulated push to one server, replies included, on a small CPU host
# (docs/notes/2026-12-06-bench-history.md). The estimate is for refusing hours-long requests, not a
# promise: on a busy machine a run takes up to 3x longer.
COST_PER_PUSH_S = 12e-6
# On a shared host every push is ~6 pool jobs, each re-timing the pool: 6x the above.
COST_PER_PUSH_SHARED_S = 6 * COST_PER_PUSH_S
MAX_WALL_S = 600.0


@dataclass(frozen=True)
class SimSpec:
    workers: int  # λ
    compute_s: float  # one worker's forward+backward per step, seconds
    model_bytes: int  # M: a gradient, and the weights, in bytes
    bandwidth: float  # bytes/s of each node's link (workers' and servers')
    latency: float = 0.0  # α, seconds per message
    protocol: str = "softsync"
    n: Optional[int] = None  # softsync: c = ⌊λ/n⌋ gradients per update; None: n = λ (asynchronous)
    servers: int = 1
    steps: int = 100  # steps per worker
    update_s: float = 0.0  # the optimizer over the whole model (a server pays update_s / S per update)
    cv: float = 0.0  # coefficient of variation of a step's compute time (lognormal, mean 1)
    stragglers: Tuple[Tuple[int, float, float], ...] = ()  # (worker, compute factor, extra delay s)
    max_staleness: Optional[int] = None  # SSP bound s
    on_stale: str = "block"
    lr_modulation: str = "none"
    period: int = 4  # EASGD: local steps between exchanges
    batch: int = 16  # samples per worker per step (for samples/s only)
    seed: int = 0
    # None: every worker and server is a host of its own (compute never contends, links are the
    # resources). An int: all of them share one host of this many cores, a processor-sharing pool
    # that every compute, message copy and server service draws from (see workbench.sim.ps).
    host_cores: Optional[int] = None

    @property
    def lam(self) -> int:
        return self.workers

    @property
    def n_eff(self) -> int:
        return self.workers if self.n is None else self.n

    @property
    def c(self) -> int:
        """Gradients per update."""
        return self.workers if self.protocol == "hardsync" else max(1, self.workers // self.n_eff)

    @property
    def label(self) -> str:
        """The dashboards' paradigm label."""
        if self.protocol == "hardsync":
            return "ps/sync"
        if self.protocol == "easgd":
            return "easgd/async"
        return "ps/async" if self.n is None else f"staleness/n={self.n}"


def stragglers_first(k: int, factor: float, delay: float = 0.0) -> Tuple[Tuple[int, float, float], ...]:
    """k stragglers (workers 0..k-1) slowed by ``factor`` and ``delay`` seconds per step."""
    return tuple((i, float(factor), float(delay)) for i in range(k))


def estimate_s(spec: SimSpec) -> float:
    """Seconds this machine will take to simulate ``spec``: pushes × servers × the cost of one (on a
    shared host, the pool's)."""
    pushes = spec.workers * spec.steps * (1 if spec.protocol != "easgd" else 1 / spec.period)
    return pushes * spec.servers * (COST_PER_PUSH_S if spec.host_cores is None else COST_PER_PUSH_SHARED_S)


def check(spec: SimSpec, max_wall_s: float = MAX_WALL_S) -> SimSpec:
    """The spec, or a one-line :class:`ConfigError` naming the key and its valid range."""
    lam = spec.workers
    if not isinstance(lam, int) or lam < 1:
        raise ConfigError(f"invalid value {lam!r} for workers (λ): must be an integer >= 1")
    if spec.protocol not in PROTOCOLS:
        raise ConfigError(f"invalid value {spec.protocol!r} for protocol: choose from {', '.join(PROTOCOLS)}")
    if spec.n is not None and not 1 <= spec.n <= lam:
        raise ConfigError(f"invalid value {spec.n!r} for n: must be in [1, {lam}] (λ, the workers)")
    if not 1 <= spec.servers:
        raise ConfigError(f"invalid value {spec.servers!r} for servers: must be >= 1")
    if spec.steps < 1:
        raise ConfigError(f"invalid value {spec.steps!r} for steps: must be >= 1")
    if not (spec.compute_s > 0 and math.isfinite(spec.compute_s)):
        raise ConfigError(f"invalid value {spec.compute_s!r} for compute_s: must be a finite number > 0")
    if not spec.bandwidth > 0:
        raise ConfigError(f"invalid value {spec.bandwidth!r} for bandwidth: must be > 0 bytes/s")
    if spec.latency < 0 or spec.update_s < 0 or spec.model_bytes < 0:
        raise ConfigError("invalid value for latency, update_s or model_bytes: must be >= 0")
    if not 0 <= spec.cv <= MAX_CV:
        raise ConfigError(f"invalid value {spec.cv!r} for cv: the compute spread must be in [0, {MAX_CV:g}]")
    for i, f, d in spec.stragglers:
        if not 0 <= i < lam:
            raise ConfigError(f"invalid value {i!r} for a straggler's worker: must be in [0, {lam - 1}]")
        if not (f >= 1 and math.isfinite(f)):
            raise ConfigError(f"invalid value {f!r} for a straggler's slowdown factor: must be a finite number >= 1")
        if d < 0:
            raise ConfigError(f"invalid value {d!r} for a straggler's delay: must be >= 0 seconds")
    if spec.max_staleness is not None and spec.max_staleness < 0:
        raise ConfigError(f"invalid value {spec.max_staleness!r} for max_staleness: must be >= 0, or None for unbounded")
    from workbench.ps.rules import MODULATIONS, ON_STALE
    if spec.on_stale not in ON_STALE:
        raise ConfigError(f"invalid value {spec.on_stale!r} for on_stale: choose from {', '.join(ON_STALE)}")
    if spec.lr_modulation not in MODULATIONS:
        raise ConfigError(f"invalid value {spec.lr_modulation!r} for lr_modulation: choose from {', '.join(MODULATIONS)}")
    if spec.period < 1:
        raise ConfigError(f"invalid value {spec.period!r} for period: must be >= 1")
    if spec.host_cores is not None and not (isinstance(spec.host_cores, int) and spec.host_cores >= 1):
        raise ConfigError(f"invalid value {spec.host_cores!r} for host_cores: must be an integer >= 1, or None for a host per node")
    est = estimate_s(spec)
    if est > max_wall_s:
        raise ConfigError(f"invalid request: {lam} workers x {spec.steps} steps x {spec.servers} servers would take about "
                          f"{est:.0f} s to simulate here (limit {max_wall_s:.0f} s): lower steps or workers")
    return spec


def from_profile(prof, workers: int, bandwidth: float, latency: float = 0.0, *, concurrency: int = 1,
                 **kw) -> SimSpec:
    """A spec whose compute (per step, at ``concurrency`` ranks computing on one host, and the
    training loop's own bookkeeping, ``Profile.bookkeeping_s``), optimizer cost and model size come
    from a calibrated profile (its ``speedup`` applied to the compute)."""
    return SimSpec(workers=workers, compute_s=prof.compute_s(concurrency) + prof.bookkeeping_s(),
                   model_bytes=prof.model_bytes, bandwidth=bandwidth, latency=latency, update_s=prof.update_s(), batch=prof.batch, **kw)


def on_host(prof, cl, servers: int = 1, **kw) -> SimSpec:
    """The spec of a PS row on this host (``cl``: the planner's :class:`~workbench.perfmodel.cluster.Cluster`
    of it, loopback) priced from the same profile terms as the planner's ``ps_async``
    (:mod:`workbench.perfmodel.paradigms.ps`): each worker's compute at the ranks computing at once
    on the shared cores (``cl.concurrency``, as ``cluster.worker_compute``) plus the training loop's
    ``bookkeeping_s``; the optimizer's ``update_s``; and every message on the point-to-point line *in
    the loop* (``loopback.loop_link``, which at the profiled ranks holds the waits for a core that
    the idle ping-pong's α, β do not), with the server's service of
    ``collectives.server_service_time`` (the network engine, ``host_cores=None``). Stragglers are
    ``cl``'s."""
    from workbench.perfmodel.loopback import loop_link
    lam = cl.ranks - servers
    link = loop_link(prof, cl, servers)
    return from_profile(prof, lam, min(link.bandwidth, 1e30), link.latency, concurrency=cl.concurrency(lam),
                        servers=servers, stragglers=tuple(s for s in cl.stragglers if 0 <= s[0] < lam), **kw)


def with_(spec: SimSpec, **kw) -> SimSpec:
    return replace(spec, **kw)
