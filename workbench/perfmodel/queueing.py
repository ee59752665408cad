"""The asynchronous parameter server as a closed queueing network: each worker cycles through its
local steps and an exchange with the servers, and the servers serve one exchange at a time.

:func:`closed_loop` solves it for a :class:`LineLink` (an exchange on a cluster of hosts:
``collectives.ps_transfer_time`` and ``collectives.server_service_time``) or any link with the same
three methods (the emulated links' token buckets: ``workbench.perfmodel.testbed.shaper``).
:func:`mva` is the mean-value analysis it uses. The paradigms built on it are in
:mod:`workbench.perfmodel.paradigms.ps` (``ps/async``, n-softsync) and ``averaging`` (EASGD).
"""
from __future__ import annotations

import itertools
import math
from typing import Callable, Dict, List, Sequence, Tuple

from workbench.perfmodel import collectives as C
from workbench.perfmodel.cluster import Cluster, Prediction, dominant, worker_compute
from workbench.perfmodel.profile.schema import Profile

MVA_POPULATIONS = 200_000  # population vectors exact MVA may visit; past that, Schweitzer's approximation


def increasing_root(h: Callable[[float], float], lo: float, hi: float, rounds: int) -> float:
    """The upper end of the bracket [lo, hi] around the root of a rising ``h`` after ``rounds``
    halvings (the fixed points of the models: a transfer's time and the link idle time it leaves)."""
    for _ in range(rounds):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if h(mid) < 0 else (lo, mid)
    return hi


class LineLink:
    """A worker's exchange with ``servers`` servers on a cluster of hosts: a header and a payload
    each way (``collectives.ps_transfer_time``), and a server's busy time per exchange
    (``collectives.server_service_time``). A line has no memory of its idle time."""

    def __init__(self, prof: Profile, cl: Cluster, servers: int) -> None:
        self.prof, self.cl, self.servers = prof, cl, servers

    def exchange(self, local: float, per_update: float, server_idle: float) -> float:
        """One worker's push and pull of the model when the servers are free."""
        return 2 * C.ps_transfer_time(self.prof.model_bytes, 1, self.servers, self.cl.bandwidth, self.cl.latency)

    def service(self, server_idle: float) -> float:
        return C.server_service_time(self.prof.model_bytes, self.servers, self.cl.bandwidth, self.cl.latency)

    def server_idle(self, solve: Callable, per_update: float) -> float:
        return math.inf


def closed_loop(prof: Profile, cl: Cluster, link, workers: int, per_exchange_steps: int, local_update: bool,
                per_update: float, bytes_: Dict[str, Dict[str, float]], book: float = 0.0) -> Prediction:
    """Asynchronous PS protocols as a closed queueing network: workers cycle through compute (and a
    local update), every ``per_exchange_steps`` steps an exchange with the servers. The servers are
    one FIFO queue: the real loop posts one receive at a time, and gloo moves a payload only into a
    posted receive, so pushes reach a server one after another, each served in D =
    ``link.service`` plus the update (a reply that fits the socket buffer drains behind the next
    push, so it is not part of D). The rest of a worker's cycle is its own (Z_i). Exact mean-value
    analysis (:func:`mva`) gives each worker's cycle Z_i + R_i with R_i = D·(1 + the queue it
    finds), which lies between the closed queue's bounds max(Z + D, W·D) and Z + W·D. ``book``: the
    training loop's own seconds a step (``Profile.bookkeeping_s``). ``link``: how an exchange and a
    service are priced (:class:`LineLink`; behind token buckets both depend on how long each link
    idled, and ``link.server_idle`` solves for the servers' idle gap)."""
    comps = worker_compute(prof, cl, workers)
    upd = (prof.update_s() if local_update else 0.0) + book
    local = min(per_exchange_steps * (c + upd) for c in comps)  # a worker's link idles at least this long

    def solve(server_idle: float):
        # a worker's exchange when the servers are free: header + payload out, then back, and the update
        exch = link.exchange(local, per_update, server_idle) + per_update
        cycles = [per_exchange_steps * (c + upd) + exch for c in comps]  # seconds per exchange, per worker, alone
        service = link.service(server_idle) + per_update
        service = min(service, min(cycles))  # the part of an exchange spent at the servers
        x, resid = mva([t - service for t in cycles], service)  # exchanges/s per worker, time at the servers
        return exch, cycles, service, x, resid

    exch, cycles, service, x, resid = solve(link.server_idle(solve, per_update))
    cyc = [t - service + r for t, r in zip(cycles, resid)]
    step = cyc[0] / per_exchange_steps  # worker 0's, what its meter records
    samples = sum(x) * per_exchange_steps * prof.batch
    terms = {"compute": comps[0], "update": upd - book, "exchange": exch / per_exchange_steps,
             "server_wait": (resid[0] - service) / per_exchange_steps, "bookkeeping": book}
    kinds = {"compute": "compute", "update": "compute", "exchange": "link", "server_wait": "server",
             "bookkeeping": "compute"}
    return Prediction(step, samples, bytes_, dominant(terms, kinds), terms)


def mva(think: Sequence[float], service: float) -> Tuple[List[float], List[float]]:
    """Mean-value analysis of a closed network: one customer per worker with think time ``think[i]``,
    one FIFO station of mean service ``service`` whose service times MVA takes as exponential (the
    measured server's vary with the scheduling of its host, docs/planner.md). Returns each
    worker's throughput (cycles/s) and residence time at the station. Workers with equal think
    times form one class; exact multi-class MVA over the population vectors (Reiser and
    Lavenberg, 1980): R_c(n) = D·(1 + Q(n − e_c)), X_c(n) = n_c / (Z_c + R_c(n)),
    Q(n) = Σ_c X_c(n)·R_c(n); past ``MVA_POPULATIONS`` vectors, Schweitzer's fixed point
    Q(n − e_c) ≈ Q − Q_c/n_c."""
    if service <= 0:
        return [1 / z if z > 0 else math.inf for z in think], [0.0] * len(think)
    classes: Dict[float, int] = {}
    for z in think:
        classes[round(z, 12)] = classes.get(round(z, 12), 0) + 1
    zs, ns = list(classes), list(classes.values())
    total = 1
    for n in ns:
        total *= n + 1
    resid = _exact(zs, ns, service) if total <= MVA_POPULATIONS else _schweitzer(zs, ns, service)
    by = {z: (1 / (z + r), r) for z, r in zip(zs, resid)}
    return [by[round(z, 12)][0] for z in think], [by[round(z, 12)][1] for z in think]


def _exact(zs: List[float], ns: List[int], service: float) -> List[float]:
    """Exact multi-class MVA: each class's residence time at the full population ``ns``."""
    q: Dict[Tuple[int, ...], float] = {tuple(0 for _ in ns): 0.0}
    resid = [service] * len(ns)
    for vec in sorted(itertools.product(*(range(n + 1) for n in ns)), key=sum):
        if not sum(vec):
            continue
        qn = 0.0
        for c, nc in enumerate(vec):
            if nc:
                prev = list(vec)
                prev[c] -= 1
                r = service * (1 + q[tuple(prev)])
                qn += nc * r / (zs[c] + r)
                if list(vec) == ns:
                    resid[c] = r
        q[vec] = qn
    return resid


def _schweitzer(zs: List[float], ns: List[int], service: float) -> List[float]:
    """Schweitzer's approximation: each class sees the queue less its own share of one customer."""
    qc = [n / len(ns) for n in ns]
    resid = [service] * len(ns)
    for _ in range(10_000):
        qt = sum(qc)
        resid = [service * (1 + qt - qc[c] / ns[c]) for c in range(len(ns))]
        new = [ns[c] * resid[c] / (zs[c] + resid[c]) for c in range(len(ns))]
        done = max(abs(a - b) for a, b in zip(new, qc)) < 1e-12
        qc = new
        if done:
            break
    return resid

