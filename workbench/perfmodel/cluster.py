"""A cluster of hosts, as the step-time functions see it, and what they return.

:class:`Cluster` is the network: ``ranks`` processes, one per host, each host's link of latency α
(``latency``) and bandwidth β (``bandwidth``), the ring's per-rank bandwidth where it differs, and
stragglers. Communication overlaps computation as DDP overlaps it (:func:`exposed_after_backward`).
A cluster that is this machine (loopback, or the emulated links' token buckets on this host's
cores) carries a few more fields, which only :mod:`workbench.perfmodel.testbed` reads.

:class:`Prediction` is what every step-time function returns: step time, samples/s, the bytes a
worker sends and receives per step by meter category, the bottleneck and the model's terms.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from workbench.perfmodel import collectives as C
from workbench.perfmodel.profile.schema import Profile

HEADER_BYTES = 32  # the parameter server's header per message (4 int64, workbench/ps/protocol.py)


@dataclass(frozen=True)
class Cluster:
    """Where the paradigm runs. ``ranks``: processes (cluster.nproc × nnodes; a PS spends some on
    servers, Stanza splits them into CONV and FC). ``bandwidth``/``latency``: one node's link
    (bytes/s, s); ``allreduce_bandwidth``: the ring's per-rank bandwidth where it differs (this
    machine's loopback). ``stragglers``: (worker index, compute factor, delay s).

    The rest describe a cluster that is this machine (:mod:`workbench.perfmodel.testbed`); a
    cluster of hosts leaves them at their defaults. ``shared_host``: every rank on this host's
    loopback, so compute slows with concurrency and communication does not overlap computation.
    ``cores_shared``: the emulated links here, where ranks share the cores (compute slows with
    concurrency) but a transfer waits on its shaped link, so it overlaps backward as on a network."""

    ranks: int
    bandwidth: float
    latency: float = 0.0
    allreduce_bandwidth: Optional[float] = None
    shared_host: bool = False
    cores_shared: bool = False  # ranks share one host's cores though their links are real (emulated links)
    stragglers: Tuple[Tuple[int, float, float], ...] = ()  # (worker index, compute factor, delay s)
    label: str = ""
    # The emulated links' token bucket (tc tbf): bytes/s it passes on average, and the bytes it lets
    # through at the host's speed after the link has idled long enough to refill (its burst).
    # Zero on a real link (line rate, no burst) and on loopback.
    shaper_rate: float = 0.0
    shaper_burst: float = 0.0
    # Behind a shaper, bytes/s of this host's own stack (``bandwidth`` is it and the shaper in series)
    # and of its ring (``allreduce_bandwidth`` likewise); 0: recovered from the two.
    host_bandwidth: float = 0.0
    host_allreduce_bandwidth: float = 0.0

    @property
    def ar_bw(self) -> float:
        return self.allreduce_bandwidth or self.bandwidth

    @property
    def shares_cores(self) -> bool:
        """Every rank computes on this one host's cores (loopback, or emulated links here)."""
        return self.shared_host or self.cores_shared

    def concurrency(self, computing: int) -> int:
        """How many ranks compute at once on one host."""
        return computing if self.shares_cores else 1


@dataclass
class Prediction:
    step_s: float  # time between two steps of a worker
    samples_per_s: float  # the whole cluster
    bytes: Dict[str, Dict[str, float]]  # per worker (rank 0) per step: category -> {"sent", "recv"}
    bottleneck: str  # compute | link | host codec | server
    terms: Dict[str, float] = field(default_factory=dict)  # the model's terms, seconds
    crossover_bps: Optional[float] = None  # compressors: link bits/s below which it beats sync

    @property
    def bytes_sent(self) -> float:
        return sum(v["sent"] for v in self.bytes.values())


def cat(sent: float = 0, recv: float = 0) -> Dict[str, float]:
    """One meter category's bytes per worker per step."""
    return {"sent": sent, "recv": recv}


def dominant(terms: Dict[str, float], kinds: Dict[str, str]) -> str:
    """The bottleneck: the kind (compute, link, host codec, server) holding the largest share."""
    total: Dict[str, float] = {}
    for k, v in terms.items():
        if k in kinds:
            total[kinds[k]] = total.get(kinds[k], 0.0) + v
    return max(total, key=total.get) if total else "compute"


def worker_compute(prof: Profile, cl: Cluster, workers: int, batch: Optional[int] = None,
                   lockstep: bool = False) -> List[float]:
    """Each worker's forward+backward seconds, stragglers included. ``lockstep``: a synchronous
    protocol, which on a shared host waits for the last rank the scheduler gets to
    (``Profile.sync_compute_s``), not for the mean rank."""
    k = cl.concurrency(workers)
    base = prof.sync_compute_s(k, batch) if lockstep and cl.shares_cores else prof.compute_s(k, batch)
    out = [base] * workers
    for i, factor, delay in cl.stragglers:
        if 0 <= i < workers:
            out[i] = base * factor + delay
    return out


def line_s(cl: Cluster, collective: str, nbytes: float, ring_bw: float, bw: float) -> float:
    """One collective of ``nbytes`` on ``cl.ranks`` ranks on an α-β line: the ring's per-rank
    bandwidth ``ring_bw`` for an all-reduce, ``bw`` for an all-gather."""
    if collective == "allreduce":
        return C.allreduce_time(nbytes, cl.ranks, ring_bw, cl.latency)
    # the hook's all-gather of unequal lengths: sizes first, then the padded payloads
    return C.allgather_time(nbytes + 8, cl.ranks, bw, cl.latency, messages=2)


def exposed_after_backward(bwd: float, comm: Sequence[float], numels: Sequence[float],
                           ready: Optional[Sequence[float]] = None) -> float:
    """Seconds of communication left when backward ends: DDP launches bucket i when backward has
    produced its gradients, at ``ready[i]`` of backward (the profile's timing of DDP's hook
    calls, ``buckets[i]["ready"]``), and one bucket's collective at a time. The last bucket is
    ready only at the end, so a one-bucket model (the small CNN) hides nothing. Without
    ``ready``, the share of the parameters through bucket i (in launch order), which puts a
    bucket that holds many parameters but little of the backward's work (ResNet-18's layer4) too
    late (docs/notes/2026-12-06-perfmodel-history.md)."""
    if ready is None:
        total = float(sum(numels)) or 1.0
        ready = list(itertools.accumulate(n / total for n in numels))
    done = 0.0
    for t, r in zip(comm, ready):
        done = max(done, bwd * r) + t
    return max(0.0, done - bwd)


def bucket_ready(prof: Profile) -> Optional[List[float]]:
    """When within backward DDP hands each bucket to its hook (shares of backward), as the profile
    timed it; None for a profile from before it was timed (version 12 and older)."""
    ready = [bk.get("ready") for bk in prof.buckets]
    return None if not ready or any(r is None for r in ready) else [float(r) for r in ready]


CROSSOVER_RTOL = 1e-9  # a crossover's relative precision: far below any measurement's


def crossover_rate_bps(gain: Callable[[float], float], ranks: int, lo: float = 1e3, hi: float = 1e13) -> Optional[float]:
    """Bits/s below which ``gain(bytes/s)`` (a step-time saving) is positive: ``math.inf`` if at every
    rate in [lo, hi] bytes/s, ``None`` if at none or on one rank. Bisection on a log scale, to a
    relative precision of ``CROSSOVER_RTOL`` (about 35 halvings of [1e3, 1e13])."""
    if ranks <= 1:
        return None
    if gain(hi) > 0:
        return math.inf
    if gain(lo) <= 0:
        return None
    a, b = math.log(lo), math.log(hi)
    while b - a > CROSSOVER_RTOL:
        m = (a + b) / 2
        a, b = (m, b) if gain(math.exp(m)) > 0 else (a, m)
    return 8 * math.exp((a + b) / 2)


def shares(total: float, weights: Sequence[float]) -> List[float]:
    """``total`` split over the buckets in proportion to ``weights``: a token bucket's wait for one
    step's bytes, told per bucket so that each part can hide behind what backward has left."""
    whole = float(sum(weights)) or 1.0
    return [total * w / whole for w in weights]
