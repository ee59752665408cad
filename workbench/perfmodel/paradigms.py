"""One step-time function per paradigm: a pure function of a :class:`~workbench.perfmodel.profile.Profile`
and a :class:`Cluster`, returning a :class:`Prediction` (step time, samples/s, bytes per worker per
step by meter category, the bottleneck). Each trainer names the functions that model it
(``Trainer.plan_variants``), so a new trainer brings its model; the planner never lists paradigms.

Symbols (docs/planner.md has the derivations): b per-worker batch, C_k = b·(t_c(k) + t_f(k)) the
forward+backward of one batch while k ranks compute on one host, F and B its forward and backward
parts (F = fwd_share·C), U = u·P the optimizer over P parameters, M = 4P the model's bytes,
AR(n, p) / AG(n, p) / PS(n, W, S) the collective times of :mod:`workbench.perfmodel.collectives`.

- ``sync`` (DDP): T = C + E + U on a network, E what is left of the bucketed all-reduce when
  backward ends (bucket i starts when backward has produced its gradients and bucket i−1 is done,
  :func:`exposed_after_backward`; the last bucket never hides); behind this host's emulated links
  T = S_p + Σ_i AR_here(bucket_i) + U + E(the token bucket's wait, :func:`shaper_delay_s`), with
  more ranks than cores E(per bucket max(0, AR_stack + its share of the wait − AR_here)): each
  collective the slower of its host part and the wire (:func:`beyond_host_s`);
  T = S_p + Σ_i AR_here(bucket_i) + O_ddp + U when every rank shares this host (O_ddp what DDP's own
  loop, timed by the profile, costs beyond the two: :func:`ddp_overhead_s`),
  because there the transfer and the backward compete for the same cores, the step waits for the
  last rank the scheduler gets to (S_p, ``Profile.sync_compute_s``; so do ``ps/sync``, the
  compressors and BMUF's block), and a collective costs what the profile timed at its size
  (``Profile.collective_s``, timed in situ after a lockstep backward), not an α-β line
  (docs/planner.md).
- ``compressed/<c>``: as ``sync`` with each bucket's payloads and the codec's encode+decode time
  (measured per bucket), which is host work and never hides.
- ``ps/sync`` (hardsync), W = ranks − S workers: T = C_W + 2·PS(M, W, S) + U/S (the slowest worker
  sets the pace: with stragglers, the largest C).
- ``ps/async`` and ``staleness`` (n-softsync, c = ⌊W/n⌋ gradients per update): a worker never waits
  for the others; a server serves one exchange at a time in s = 2(2α + M/(S·β)) + U/(S·c) (a header
  and a payload each way). Throughput in gradients per second is Σ_i 1/T_i,
  T_i = C_W·f_i + d_i + 2·PS(M, 1, S) + U/(S·c), capped by the servers at 1/s. Behind this
  host's emulated links every transfer of the PS rows passes the token buckets of both ends: what
  a bucket refilled while its direction idled goes at the host's speed, the rest at the rate; at
  the profiled ranks a message never goes faster than the loopback's in-loop line below (the
  host's copies and the bucket are two stages of one pipeline: :func:`_behind_shaper_s`), and
  with a core per rank it takes that line and then the bucket's wait, in series; ``ps/sync``'s
  phases likewise take the hardsync loop's exchange as their host part. A worker's link idles
  through its whole cycle but its own message out (the update, the pull, its local steps).
  On loopback at the profiled ranks with one server the profile timed the PS loop itself
  (``Profile.loops``): ``ps/sync`` is its hardsync period beyond the workers' lockstep span, and
  the asynchronous rows (and Stanza's transfers) take the point-to-point line α', β' at which
  ``ps/async``'s queue cycles in the timed header-only and whole-model loops (:func:`loop_link`).
- ``stanza/n_f=k``: :func:`workbench.perfmodel.stanza.step_time` on the profile's inputs.
- ``easgd``: local steps (C_W + U), and every τ steps an exchange of M with the servers (queued at
  the servers like ``ps/async``); ``mode=sync`` waits for the slowest worker.
- ``bmuf`` / ``local_sgd``: C_p + U per step, and every ``block`` steps one all-reduce of the flat
  model, AR(M, p), plus the block update (≈ U); on this host at the profiled ranks the trainer's
  own loop of a block (local steps, then its block end), timed by the profile, and behind the
  emulated links the token bucket's wait once a block.

Bytes are the meter's exact counts per worker per step (worker rank 0), averaged over a block or
period where a paradigm communicates every few steps.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field, replace
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from workbench.perfmodel import collectives as C
from workbench.perfmodel import stanza as st
from workbench.perfmodel.profile import Profile

HEADER_BYTES = 32  # the parameter server's header per message (4 int64, workbench/ps/protocol.py)


@dataclass(frozen=True)
class Cluster:
    """Where the paradigm runs. ``ranks``: processes (cluster.nproc × nnodes; a PS spends some on
    servers, Stanza splits them into CONV and FC). ``bandwidth``/``latency``: one node's link
    (bytes/s, s); ``allreduce_bandwidth``: the ring's per-rank bandwidth where it differs (this
    machine's loopback). ``shared_host``: every rank on one host (loopback), so compute slows with
    concurrency and communication does not overlap computation; otherwise one rank per host.
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


def _cat(sent: float = 0, recv: float = 0) -> Dict[str, float]:
    return {"sent": sent, "recv": recv}


def _dominant(terms: Dict[str, float], kinds: Dict[str, str]) -> str:
    """The bottleneck: the kind (compute, link, host codec, server) holding the largest share."""
    total: Dict[str, float] = {}
    for k, v in terms.items():
        if k in kinds:
            total[kinds[k]] = total.get(kinds[k], 0.0) + v
    return max(total, key=total.get) if total else "compute"


def _worker_compute(prof: Profile, cl: Cluster, workers: int, batch: Optional[int] = None,
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


# ---------------------------------------------------------------------------------------------
# Synchronous data parallelism, with and without a compressor

def _bucket_comm(prof: Profile, cl: Cluster, compressor: Optional[str]) -> Tuple[
        List[float], List[float], Dict[str, Dict[str, float]], List[float], List[List[Tuple[float, float, float]]]]:
    """Per bucket: communication seconds, codec seconds and the bytes one rank sends; the bytes by
    category (``compressor``: one of the profile's codecs, or None for DDP's all-reduce); and per
    bucket its collectives' (host part, idle stack's time behind a shaper, bytes sent), which
    :func:`beyond_host_s` takes."""
    p = cl.ranks
    codec = prof.codecs[compressor] if compressor is not None else None
    comm, codec_s, by, sent_b, parts = [], [], {}, [], []
    for i, bk in enumerate(prof.buckets):
        sent = [{"collective": "allreduce", "bytes": 4 * bk["numel"], "category": "allreduce"}] if codec is None \
            else codec["payloads"][i]
        t, out, msgs = 0.0, 0, []
        for m in sent:
            cat = by.setdefault(m["category"], _cat())
            host = _collective_s(prof, cl, m["collective"], m.get("dtype", "float32"), m["bytes"])
            t += host
            n = C.allreduce_bytes(m["bytes"], p) if m["collective"] == "allreduce" else C.allgather_varlen_bytes(m["bytes"], p)
            cat["sent"] += n
            cat["recv"] += n
            out += n
            msgs.append((host, _stack_s(cl, m["collective"], m["bytes"]), n))
        comm.append(t)
        sent_b.append(out)
        parts.append(msgs)
        codec_s.append(prof.codec_s(compressor, i, p, cl.shares_cores) if codec is not None else 0.0)
    together = prof.beyond_step_s(f"collectives/{compressor or 'sync'}") if _timed_here(prof, cl) else None
    if together is not None and comm:
        # the step's collectives timed together re-align the ranks once, where each timed alone
        # paid that wait again; shared out over the buckets as their own timings
        total = sum(comm)
        f = together / total if total > 0 else 1.0
        comm = [together * (c / total if total > 0 else 1 / len(comm)) for c in comm]
        parts = [[(h * f, s, n) for h, s, n in msgs] for msgs in parts]
    return comm, codec_s, by, sent_b, parts


def _stack_s(cl: Cluster, collective: str, nbytes: float) -> float:
    """One collective on this host's idle stack alone, behind a shaper (the α-β line of the stack,
    without the shaper's rate); 0 where no shaper is (nothing is priced beyond the host part)."""
    if cl.shaper_rate <= 0:
        return 0.0
    return _line_s(cl, collective, nbytes, _host_bandwidth(cl, ring=True), _host_bandwidth(cl))


def oversubscribed(prof: Profile, cl: Cluster) -> bool:
    """More ranks than the profile's host has cores: a rank's collective then spends much of its
    in-situ time waiting for a core (:func:`beyond_host_s`). A profile that does not say its cores
    counts as not oversubscribed."""
    return cl.ranks > int(prof.machine.get("cores") or cl.ranks)


def beyond_host_s(parts: Sequence[Sequence[Tuple[float, float, float]]], wait: float) -> List[float]:
    """Per bucket, the seconds its collectives take behind a token bucket beyond their host part.
    ``parts``: per bucket, each collective's (host part timed in situ, the idle stack's α-β time,
    bytes sent); ``wait``: the bucket's wait for the step's bytes (:func:`shaper_delay_s`), shared
    over the collectives by their bytes. A collective takes the slower of two stages of one pipeline,
    max(host part, stack + its wait), as a PS message does (:func:`_behind_shaper_s`), and
    collectives in turn (a bucket's sizes, then its payloads; PowerSGD's P, then Q) each pay their
    own maximum.

    Only where the ranks outnumber the cores (:func:`oversubscribed`; the caller adds the two
    stages otherwise): there the in-situ host part is mostly a rank waiting for a core (3 ranks on
    2 cores: 1.4–6.1 ms over six profiles of one all-reduce), and while the shaper holds the ring
    no rank computes, so the cores are free. With a core per rank the host part is CPU work the
    ring needs before and after each chunk, in series with the wire. Measured on the small CNN
    (docs/planner.md, "The host part and the wire"): 3 ranks on 2 cores, `sync`'s step error over 48
    runs behind 175 Mbit/s – 1.3 Gbit/s (rounds run after this was written), the two stages added
    +13.7 % (median), the slower of them +0.3 %. 2 ranks on 2 cores, pooled over two sittings,
    added +5.5 %, the slower −6.7 %; the sittings disagree (+2.9 / −10.0 %, +12.1 / −4.0 %), so
    this switch is the least settled part."""
    whole = float(sum(n for msgs in parts for _, _, n in msgs)) or 1.0
    return [sum(max(0.0, stack + wait * n / whole - host) for host, stack, n in msgs) for msgs in parts]


def exposed_after_backward(bwd: float, comm: Sequence[float], numels: Sequence[float],
                           ready: Optional[Sequence[float]] = None) -> float:
    """Seconds of communication left when backward ends: DDP launches bucket i when backward has
    produced its gradients, at ``ready[i]`` of backward (the profile's timing of DDP's hook
    calls, ``buckets[i]["ready"]``), and one bucket's collective at a time. The last bucket is
    ready only at the end, so a one-bucket model (the small CNN) hides nothing, where
    ``max(bwd, Σ comm)`` hid it all. Without ``ready``, the share of the parameters through
    bucket i (in launch order): the model's only reading until 2026-12-05, which put ResNet-18's
    first bucket (layer4, 65 % of the parameters) at 65 % of backward where DDP handed it over at
    22–26 %, and so over-predicted its `sync` behind slow links by up to 19 %
    (docs/planner.md, "When a bucket is ready")."""
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


def _shares(total: float, weights: Sequence[float]) -> List[float]:
    """``total`` split over the buckets in proportion to ``weights``: a token bucket's wait for one
    step's bytes, told per bucket so that each part can hide behind what backward has left."""
    whole = float(sum(weights)) or 1.0
    return [total * w / whole for w in weights]


def shaper_delay_s(cl: Cluster, nbytes: float, idle_s: float) -> float:
    """Seconds a token bucket holds ``nbytes`` sent in one go, once per step after ``idle_s`` of
    the link's silence: it starts with the tokens refilled meanwhile (at most its burst) and passes
    the rest at its rate. At 1 Gbit/s the emulator's bucket is 500 KB and refills in 4 ms, so a
    small CNN's 807 KB of ring all-reduce per step waits for 307 KB, not 807."""
    if cl.shaper_rate <= 0:
        return 0.0
    return max(0.0, nbytes - min(cl.shaper_burst, cl.shaper_rate * idle_s)) / cl.shaper_rate


def _timed_here(prof: Profile, cl: Cluster) -> bool:
    """The row's collectives are the ones the profile timed: this host's ranks, as many as profiled."""
    return bool(cl.shares_cores and cl.ranks == prof.ranks and prof.collectives)


def _collective_s(prof: Profile, cl: Cluster, collective: str, dtype: str, nbytes: float) -> float:
    """Seconds of one collective of ``nbytes``: the profile's own timing (in situ, after a lockstep
    backward) when the row's ranks are the ones profiled on this host (loopback, or emulated links
    here, whose shaper is added by the caller), where a ring's cost is the scheduler's, not an α-β
    line's (docs/planner.md); elsewhere the α-β formulas."""
    if _timed_here(prof, cl):
        here = prof.collective_s(collective, dtype, nbytes)
        if here is not None:  # behind emulated links the caller adds the shaper's wait
            return here
    return _line_s(cl, collective, nbytes, cl.ar_bw, cl.bandwidth)


def _line_s(cl: Cluster, collective: str, nbytes: float, ring_bw: float, bw: float) -> float:
    """One collective of ``nbytes`` on ``cl.ranks`` ranks on an α-β line: the ring's per-rank
    bandwidth ``ring_bw`` for an all-reduce, ``bw`` for an all-gather."""
    if collective == "allreduce":
        return C.allreduce_time(nbytes, cl.ranks, ring_bw, cl.latency)
    # the hook's all-gather of unequal lengths: sizes first, then the padded payloads
    return C.allgather_time(nbytes + 8, cl.ranks, bw, cl.latency, messages=2)


def _profiled_ranks_here(prof: Profile, cl: Cluster) -> bool:
    """The row runs the profiled ranks on this host at the profile's own speed, on loopback or
    behind the emulated links: the loops the profile timed hold its host work."""
    return cl.shares_cores and cl.ranks == prof.ranks and prof.speedup == 1.0


def _loop_here(prof: Profile, cl: Cluster) -> bool:
    """The row is a loop the profile timed (``Profile.loops``): loopback, the profiled ranks, the
    profile's own speed."""
    return cl.shared_host and _profiled_ranks_here(prof, cl)


def ddp_overhead_s(prof: Profile, cl: Cluster, compressor: Optional[str] = None) -> float:
    """What DDP's reducer adds to a step on this host beyond the lockstep span, the step's
    collectives timed in the loop and, with a compressor, its codec timed with every rank at once:
    the profile's loop of that step (``Profile.loops["ddp"]``, or ``["compressed/<c>"]``, DDP with
    the compressor's hook; a profile without it: DDP's, the codec aside) less those parts (below 0
    where the loop overlapped them, at most all of them), on this host at the profiled ranks; 0
    elsewhere (on a link, at other rank counts, on other hardware). Behind the emulated links here
    only its part above 0: the reducer's and the hook's host work is the same there, but what the
    loop hid behind backward is left to the shaper's overlap. Until 2026-12-03 it was 0 behind the
    emulated links, where ``sync`` matched without it (small CNN −3 % to +1 %), and the compressors
    then missed by what their loops held beyond their parts: the small CNN's compressed rows −10 to
    −28 % there, +4 to +9 ms a step on loopback (docs/planner.md)."""
    own = f"compressed/{compressor}" if compressor is not None else "ddp"
    name = own if own in prof.loops else "ddp"
    loop = prof.loops.get(name)
    if loop is None or not prof.collectives or not _profiled_ranks_here(prof, cl):  # beyond the collectives it timed
        return 0.0
    parts = prof.beyond_step_s(f"collectives/{compressor}" if name != "ddp" else "collectives/sync")
    if parts is None:
        parts = sum(prof.collective_s("allreduce", "float32", 4 * bk["numel"]) or 0.0 for bk in prof.buckets)
    if name != "ddp":  # the hook's loop holds the codec too
        parts += sum(prof.codec_s(compressor, i, prof.ranks, True) for i in range(len(prof.buckets)))
    # Below 0 where the loop hid part of those collectives behind backward (DDP's reducer issues a
    # bucket while backward still runs): the step is the loop, at least the span. ResNet-18's DDP
    # loop took 1,174 and 1,030 ms where the span and its buckets' all-reduces came to 1,709 and
    # 1,170 ms; its runs took 1,230 and 1,115 ms (until 2026-12-02 this was clipped at 0: +22 %).
    rest = loop - prof.sync_compute_s(prof.ranks) - parts
    # Behind the emulated links the reducer's and the hook's own host work is there as on loopback,
    # but what the loop hid behind backward is the shaper's to hide (``exposed_after_backward``): the
    # part above 0. Scored on the stored matrix (2026-12-03, evening): the compressors' rows there
    # went from −10 … −28 % to within 8 % (small CNN), `sync`'s from −2 % to +3 … +15 %; leaving
    # `sync` out made the rows better still and the crossovers (the compressor against `sync`, both
    # on one host) worse, 4 of 15 within 20 % against 8, so both pay it.
    return max(-parts, rest) if cl.shared_host else max(0.0, rest)


def _dp(prof: Profile, cl: Cluster, compressor: Optional[str]) -> Prediction:
    p = cl.ranks
    if p < 1:
        raise ValueError(f"data parallelism needs ranks >= 1, got {p}")
    comp = max(_worker_compute(prof, cl, p, lockstep=True))
    bwd = (1 - prof.fwd_share) * comp
    comm, codec_s, by, sent, parts = _bucket_comm(prof, cl, compressor)
    upd = prof.update_s()
    numels = [bk["numel"] for bk in prof.buckets]
    here = _timed_here(prof, cl)
    overhead = ddp_overhead_s(prof, cl, compressor)
    if cl.shared_host:
        exposed = sum(comm) + overhead
    elif here:
        # emulated links here: the collectives' host part (timed in situ) takes the shared cores
        # and never hides; what the shaper holds a collective beyond it spends no CPU and
        # overlaps backward as on a link
        wire = shaper_delay_s(cl, sum(sent), comp + sum(codec_s) + upd + sum(comm) + overhead)
        beyond = beyond_host_s(parts, wire) if oversubscribed(prof, cl) else _shares(wire, sent)
        exposed = sum(comm) + overhead + exposed_after_backward(bwd, beyond, numels, bucket_ready(prof))
    else:
        exposed = exposed_after_backward(bwd, comm, numels, bucket_ready(prof))
    book = prof.bookkeeping_s()
    step = comp + exposed + sum(codec_s) + upd + book
    terms = {"compute": comp, "update": upd, "communication": sum(comm), "exposed_communication": exposed,
             "ddp_overhead": overhead, "codec": sum(codec_s), "bookkeeping": book}
    kinds = {"compute": "compute", "update": "compute", "exposed_communication": "link", "codec": "host codec",
             "bookkeeping": "compute"}
    return Prediction(step, p * prof.batch / step, by, _dominant(terms, kinds), terms)


def sync(prof: Profile, cl: Cluster) -> Prediction:
    """DDP's bucketed ring all-reduce (``trainer=sync``)."""
    return _dp(prof, cl, None)


def compressed(prof: Profile, cl: Cluster, compressor: str) -> Prediction:
    """DDP with a compressor on its buckets (``trainer=compressed``); with the crossover: the link
    rate below which it beats ``sync`` on ``cl.ranks`` ranks one per host."""
    if compressor not in prof.codecs:
        raise KeyError(f"the profile has no codec measurement of compressor {compressor!r}")
    pred = _dp(prof, cl, compressor)
    pred.crossover_bps = crossover_bps(prof, cl, compressor)
    return pred


def crossover_bps(prof: Profile, cl: Cluster, compressor: str, lo: float = 1e3, hi: float = 1e13,
                  at: Optional[Callable[[float], Cluster]] = None) -> Optional[float]:
    """Bits/s of a node's link below which ``compressor`` beats ``sync`` (networked form, one rank
    per host, ``cl``'s latency; ``at``: the cluster at a link rate of so many bytes/s instead, e.g.
    this host's emulated links); ``math.inf`` if it wins at every rate in [lo, hi] bytes/s, ``None``
    if at none. Bisection on a log scale of the gain sync − compressed."""
    def gain(bw: float) -> float:
        c = at(bw) if at is not None else replace(cl, bandwidth=bw, allreduce_bandwidth=None, shared_host=False,
                                                  cores_shared=False)
        return _dp(prof, c, None).step_s - _dp(prof, c, compressor).step_s
    if cl.ranks <= 1:
        return None
    if gain(hi) > 0:
        return math.inf
    if gain(lo) <= 0:
        return None
    a, b = math.log(lo), math.log(hi)
    for _ in range(80):
        m = (a + b) / 2
        if gain(math.exp(m)) > 0:
            a = m
        else:
            b = m
    return 8 * math.exp((a + b) / 2)


# ---------------------------------------------------------------------------------------------
# Parameter server: hardsync, asynchronous, n-softsync

def _host_bandwidth(cl: Cluster, ring: bool = False) -> float:
    """Bytes/s of this host's stack alone on a shaped link, point to point or (``ring``) the ring's
    (``cl.bandwidth`` and ``cl.ar_bw`` are each it and the shaper's rate in series)."""
    host, line = (cl.host_allreduce_bandwidth, cl.ar_bw) if ring else (cl.host_bandwidth, cl.bandwidth)
    if host > 0:
        return host
    return 1 / max(1e-30, 1 / line - 1 / cl.shaper_rate)


def _increasing_root(h: Callable[[float], float], lo: float, hi: float, rounds: int) -> float:
    """The upper end of the bracket [lo, hi] around the root of a rising ``h`` after ``rounds``
    halvings (the fixed points below: a transfer's time and the link idle time it leaves)."""
    for _ in range(rounds):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if h(mid) < 0 else (lo, mid)
    return hi


def _ps_phase_s(prof: Profile, cl: Cluster, workers: int, servers: int, busy_s: float,
                host_s: Optional[float] = None) -> float:
    """One lockstep push (or pull) of the model: every worker's shard to every server at once
    (``collectives.ps_transfer_time``). Behind token buckets (the emulated links; both directions of
    every link shaped) the worker's link carries M and a server's link W·M/S, each starting with the
    tokens refilled while that direction idled: during the other phase and ``busy_s`` (compute and
    the update). At 1 Gbit/s the bucket holds 500 KB: a worker's 605 KB small-CNN push waits for
    105 KB, where 8/rate per byte charged it 605 KB. ``host_s``: the phase's host part as this
    host's hardsync loop timed it (:func:`ps_sync`), which the bucket's wait follows in series where
    every rank has a core of its own and which is the floor of the idle stack's line plus the wait
    where they share the cores (:func:`_behind_shaper_s`)."""
    if cl.shaper_rate <= 0:
        return C.ps_transfer_time(prof.model_bytes, workers, servers, cl.bandwidth, cl.latency)
    n, host = prof.model_bytes, _host_bandwidth(cl)
    series = host_s is not None and not oversubscribed(prof, cl)

    def phase(idle: float) -> float:
        waits = (shaper_delay_s(cl, n, idle), shaper_delay_s(cl, workers * n / servers, idle))
        if series:
            return host_s + max(waits)
        worker = C.PS_MESSAGES * cl.latency + n / host + waits[0]
        server = workers * (C.PS_MESSAGES * cl.latency + n / (servers * host)) + waits[1]
        return max(worker, server, host_s or 0.0)
    # the phase's link idles for the other phase: x = phase(busy + x), one root (phase falls as idle grows)
    return _increasing_root(lambda x: x - phase(busy_s + x), 0.0, phase(busy_s), 60)


def _behind_shaper_s(cl: Cluster, floor: Optional[Cluster], nbytes: float, wait: float, series: bool = False) -> float:
    """One PS message of ``nbytes`` behind token buckets: this host's stack, then the bucket's
    ``wait``, in series, but never faster than ``floor``, the in-loop line of the same ranks on the
    same cores (:func:`_host_line`). Where the ranks share the cores the two are stages of one
    pipeline: the bytes the bucket holds back leave the sender's copies and the receiver's core
    waits time to happen meanwhile, so the message takes the slower stage, not their sum. The idle
    ping-pong's stack alone priced the small CNN's 605 KB at 1.0 ms a message where the loop on the
    same cores takes 4.6, and the asynchronous rows were −15 to −45 % at 200 Mbit/s – 4 Gbit/s; the
    sum over-predicted 1 and 4 Gbit/s by 13–40 % (3 ranks on 2 cores, docs/planner.md). With a core
    per rank (``series``) the in-loop part is CPU work the message needs before and after the wire,
    and the wait follows it, as the ring's does (:func:`beyond_host_s`)."""
    idle = C.PS_MESSAGES * cl.latency + nbytes / _host_bandwidth(cl) + wait
    if floor is None:
        return idle
    line = C.PS_MESSAGES * floor.latency + nbytes / floor.bandwidth
    return line + wait if series else max(idle, line)


def _ps_exchange_s(prof: Profile, cl: Cluster, servers: int, worker_idle: float, server_idle: float,
                   floor: Optional[Cluster] = None) -> float:
    """One worker's push and pull of the model when the servers are free: a header and a payload
    each way. Behind token buckets the worker's link carries M, each server's M/S, each direction
    starting with the tokens refilled while it idled (``worker_idle``, ``server_idle``), each
    message at least ``floor``'s (:func:`_behind_shaper_s`)."""
    n = prof.model_bytes
    if cl.shaper_rate <= 0:
        return 2 * C.ps_transfer_time(n, 1, servers, cl.bandwidth, cl.latency)
    wait = max(shaper_delay_s(cl, n, worker_idle), shaper_delay_s(cl, n / servers, server_idle))
    return 2 * _behind_shaper_s(cl, floor, n, wait, not oversubscribed(prof, cl))


def _ps_service_s(prof: Profile, cl: Cluster, servers: int, server_idle: float,
                  floor: Optional[Cluster] = None) -> float:
    """A server's busy time per exchange (``collectives.server_service_time``); behind a token
    bucket the push in waits for what the bucket did not refill in ``server_idle``."""
    if cl.shaper_rate <= 0:
        return C.server_service_time(prof.model_bytes, servers, cl.bandwidth, cl.latency)
    shard = prof.model_bytes / servers
    wait = shaper_delay_s(cl, shard, server_idle) + max(0.0, shard - C.SEND_BUFFER) / cl.shaper_rate
    return _behind_shaper_s(cl, floor, shard, wait, not oversubscribed(prof, cl))


def ps_loop_s(prof: Profile, cl: Cluster, mode: str, servers: int = 1) -> Optional[float]:
    """The parameter server's loop as the profile timed it on this host (``Profile.loops``
    ``"ps/<mode>"``: "sync", "async", "async/header"; seconds per worker step), when the row is that
    loop: loopback, the profiled ranks, one server, the profile's own speed; else None."""
    return prof.loops.get(f"ps/{mode}") if servers == 1 and _loop_here(prof, cl) else None


def loop_link(prof: Profile, cl: Cluster, servers: int = 1) -> Cluster:
    """``cl`` with this host's point-to-point line *in the loop* where the profile timed the PS
    loops here for a row of ``servers`` (:func:`ps_loop_s`), else ``cl``: the latency α' at which ``ps/async``'s queue
    (c = 1, no stragglers) cycles in the header-only loop's period, then the bandwidth β' at which
    it cycles in the whole model's. Two measured periods, two parameters. Every point-to-point
    transfer of a row on this host takes them: the PS exchanges (n-softsync's fewer updates,
    EASGD's longer think time, stragglers) and Stanza's activations and sub-group all-reduces.
    What they hold that the idle ping-pong's α and β do not: a blocking receive waits for a core
    while the other ranks compute, and the server's copies share the cores with them
    (docs/planner.md)."""
    header, full = ps_loop_s(prof, cl, "async/header", servers), ps_loop_s(prof, cl, "async", servers)
    if header is None or full is None:
        return cl
    plain, w = replace(cl, stragglers=()), cl.ranks - 1
    empty = replace(prof, params_conv=0, params_fc=0)  # headers only: no payload, an empty update

    def period(p: Profile, lat: float, per_byte: float) -> float:
        c = replace(plain, latency=lat, bandwidth=1 / per_byte if per_byte > 0 else math.inf)
        return _async(p, c, w, 1, 1, False, p.update_s(), {}).step_s

    def solve(h: Callable[[float], float], start: float) -> float:
        if h(0.0) >= 0:
            return 0.0
        hi = start
        while h(hi) < 0 and hi < 1e6 * start:
            hi *= 2
        return _increasing_root(h, 0.0, hi, 60)
    lat = solve(lambda a: period(empty, a, 0.0) - header, max(cl.latency, 1e-6))
    per_byte = solve(lambda x: period(prof, lat, x) - full, 1 / cl.bandwidth)
    return replace(cl, latency=lat, bandwidth=1 / per_byte if per_byte > 0 else math.inf)


def _ps_bytes(prof: Profile, servers: int, push: str = "grad_push", every: int = 1) -> Dict[str, Dict[str, float]]:
    m = prof.model_bytes
    return {push: _cat(m / every, 0), "param_pull": _cat(0, m / every),
            "ps_control": _cat(HEADER_BYTES * servers / every, HEADER_BYTES * servers / every)}


def ps_sync(prof: Profile, cl: Cluster, servers: int = 1) -> Prediction:
    """Hardsync: every worker's gradient, then one update, then every worker pulls."""
    w = cl.ranks - servers
    if w < 1:
        raise ValueError(f"a parameter server with {servers} servers needs more than {servers} ranks, got {cl.ranks}")
    comp = max(_worker_compute(prof, cl, w, lockstep=True))
    apply = prof.update_s() / servers
    loop = ps_loop_s(prof, cl, "sync", servers)
    if loop is not None:  # this host's hardsync round, timed in the loop, beyond the workers' lockstep span
        xfer = max(0.0, loop - prof.sync_compute_s(w) - apply)
    else:
        # behind this host's emulated links the same loop's exchange is the host part of its phases
        here = ps_loop_s(prof, _loopback_twin(cl), "sync", servers) if cl.shaper_rate > 0 else None
        host_s = max(0.0, here - prof.sync_compute_s(w) - apply) / 2 if here is not None else None
        xfer = 2 * _ps_phase_s(prof, cl, w, servers, comp + apply, host_s)
    book = prof.bookkeeping_s()
    step = comp + xfer + apply + book
    terms = {"compute": comp, "push_pull": xfer, "server_apply": apply, "bookkeeping": book}
    kinds = {"compute": "compute", "push_pull": "link", "server_apply": "server", "bookkeeping": "compute"}
    if w > servers:  # incast: the servers' links, not the workers', carry the exchange
        kinds["push_pull"] = "server"
    return Prediction(step, w * prof.batch / step, _ps_bytes(prof, servers), _dominant(terms, kinds), terms)


def _async(prof: Profile, cl: Cluster, workers: int, servers: int, per_exchange_steps: int, local_update: bool,
           per_update: float, bytes_: Dict[str, Dict[str, float]], book: float = 0.0) -> Prediction:
    """Asynchronous PS protocols as a closed queueing network: workers cycle through compute (and a
    local update), every ``per_exchange_steps`` steps an exchange with the servers. The servers are
    one FIFO queue: the real loop posts one receive at a time, and gloo moves a payload only into a
    posted receive, so pushes reach a server one after another, each served in D =
    ``collectives.server_service_time`` plus the update (a reply that fits the socket buffer drains
    behind the next push, so it is not part of D). The rest of a worker's cycle is its own (Z_i).
    Exact mean-value analysis (:func:`mva`) gives each worker's cycle Z_i + R_i with R_i = D·(1 + the
    queue it finds), which lies between the closed queue's bounds max(Z + D, W·D) and Z + W·D.
    (Until 2026-12-01 the throughput bound min(Σ 1/T_i, 1/s) itself, with a server busy for the push
    and then the reply: docs/planner.md has the server's timeline that changed both.) Behind token
    buckets (``_ps_service_s``, ``_ps_exchange_s``) the small CNN's 605 KB exchanges at 1 Gbit/s
    mostly pass in the refilled burst: 2 workers cycled in 10.1 ms where 8/rate a byte said 14.3.
    On loopback at the profiled ranks the callers pass the in-loop link (:func:`loop_link`), and
    ``book``, the training loop's own seconds a step (``Profile.bookkeeping_s``), which the PS loops
    the in-loop link is fitted to do not run. Behind the emulated links on this host that in-loop
    line is the floor of every message (:func:`_behind_shaper_s`)."""
    comps = _worker_compute(prof, cl, workers)
    floor = _host_line(prof, cl, servers) if cl.shaper_rate > 0 else None  # the idle stack where no loop was timed
    upd = (prof.update_s() if local_update else 0.0) + book
    local = min(per_exchange_steps * (c + upd) for c in comps)  # a worker's link idles at least this long

    def exchange(server_idle: float) -> float:
        # A worker's link idles through its whole cycle but its own message out: the update between
        # its push and pull, the pull, and its local steps, not the local steps alone (as until
        # 2026-12-05: 1 worker behind 1 Gbit/s was then +12 to +14 % where ps/sync, the same loop, was
        # −12 %). The pull shortens as the idle grows: one root of g = local + update + e(g)/2.
        e = lambda g: _ps_exchange_s(prof, cl, servers, g, server_idle, floor)  # noqa: E731
        if cl.shaper_rate <= 0:
            return e(local)
        hi = local + per_update + e(local) / 2
        return e(_increasing_root(lambda g: g - (local + per_update + e(g) / 2), local, hi, 40))

    def solve(server_idle: float):
        # a worker's exchange when the servers are free: header + payload out, then back, and the update
        exch = exchange(server_idle) + per_update
        cycles = [per_exchange_steps * (c + upd) + exch for c in comps]  # seconds per exchange, per worker, alone
        service = _ps_service_s(prof, cl, servers, server_idle, floor) + per_update
        service = min(service, min(cycles))  # the part of an exchange spent at the servers
        x, resid = mva([t - service for t in cycles], service)  # exchanges/s per worker, time at the servers
        return exch, cycles, service, x, resid

    server_idle = math.inf  # no token bucket: the servers' links have no memory of their idle time
    if cl.shaper_rate > 0:
        # Behind token buckets a server's link starts each push with what refilled since the last
        # one, the gap 1/X − D at X exchanges/s, and the gap sets D: its fixed point, by bisection
        # on g − gap(g), which rises (gap's slope is at most 1 − 1/W).
        def gap(g: float) -> float:
            _, _, d, xs, _ = solve(g)
            return max(0.0, 1 / sum(xs) - (d - per_update))
        # the root lies below the larger of the gaps at an empty and a full bucket (gap is monotone in
        # g: falling when the servers saturate, rising with slope 1 − 1/W before)
        server_idle = _increasing_root(lambda g: g - gap(g), 0.0, max(gap(0.0), gap(math.inf)), 40)
    exch, cycles, service, x, resid = solve(server_idle)
    cyc = [t - service + r for t, r in zip(cycles, resid)]
    step = cyc[0] / per_exchange_steps  # worker 0's, what its meter records
    samples = sum(x) * per_exchange_steps * prof.batch
    terms = {"compute": comps[0], "update": upd - book, "exchange": exch / per_exchange_steps,
             "server_wait": (resid[0] - service) / per_exchange_steps, "bookkeeping": book}
    kinds = {"compute": "compute", "update": "compute", "exchange": "link", "server_wait": "server",
             "bookkeeping": "compute"}
    return Prediction(step, samples, bytes_, _dominant(terms, kinds), terms)


MVA_POPULATIONS = 200_000  # population vectors exact MVA may visit; past that, Schweitzer's approximation


def mva(think: Sequence[float], service: float) -> Tuple[List[float], List[float]]:
    """Mean-value analysis of a closed network: one customer per worker with think time ``think[i]``,
    one FIFO station of mean service ``service`` whose service times MVA takes as exponential (the
    measured server's vary with the scheduling of its host: push inter-arrivals of 102–236 ms for
    a 101 ms payload, docs/planner.md). Returns each worker's throughput (cycles/s) and residence
    time at the station. Workers with equal think times form one class; exact multi-class MVA over
    the population vectors (Reiser and Lavenberg, 1980): R_c(n) = D·(1 + Q(n − e_c)),
    X_c(n) = n_c / (Z_c + R_c(n)), Q(n) = Σ_c X_c(n)·R_c(n); past ``MVA_POPULATIONS`` vectors,
    Schweitzer's fixed point Q(n − e_c) ≈ Q − Q_c/n_c."""
    if service <= 0:
        return [1 / z if z > 0 else math.inf for z in think], [0.0] * len(think)
    classes: Dict[float, int] = {}
    for z in think:
        classes[round(z, 12)] = classes.get(round(z, 12), 0) + 1
    zs, ns = list(classes), list(classes.values())
    total = 1
    for n in ns:
        total *= n + 1
    if total <= MVA_POPULATIONS:
        import itertools
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
    else:  # Schweitzer: each class sees the queue less its own share of one customer
        qc = [n / len(ns) for n in ns]
        for _ in range(10_000):
            qt = sum(qc)
            resid = [service * (1 + qt - qc[c] / ns[c]) for c in range(len(ns))]
            new = [ns[c] * resid[c] / (zs[c] + resid[c]) for c in range(len(ns))]
            done = max(abs(a - b) for a, b in zip(new, qc)) < 1e-12
            qc = new
            if done:
                break
    by = {z: (1 / (z + r), r) for z, r in zip(zs, resid)}
    return [by[round(z, 12)][0] for z in think], [by[round(z, 12)][1] for z in think]


def statistics_mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs)


def ps_async(prof: Profile, cl: Cluster, servers: int = 1, c: int = 1) -> Prediction:
    """Asynchronous (Downpour, c = 1) or n-softsync (c = ⌊λ/n⌋ gradients per update) PS: a pushing
    worker is answered at once; a server pays the optimizer once per c gradients."""
    w = cl.ranks - servers
    if w < 1:
        raise ValueError(f"a parameter server with {servers} servers needs more than {servers} ranks, got {cl.ranks}")
    return _async(prof, loop_link(prof, cl, servers), w, servers, 1, False,
                  prof.update_s() / (servers * max(1, c)), _ps_bytes(prof, servers), prof.bookkeeping_s())


def staleness(prof: Profile, cl: Cluster, servers: int = 1, n: int = 1, hardsync: bool = False) -> Prediction:
    """Rudra's protocols: hardsync is ``ps_sync``; n-softsync updates after c = ⌊λ/n⌋ gradients."""
    if hardsync:
        return ps_sync(prof, cl, servers)
    lam = cl.ranks - servers
    if not 1 <= n <= max(1, lam):
        raise ValueError(f"n-softsync needs 1 <= n <= lambda = {lam}, got n={n}")
    return ps_async(prof, cl, servers, c=max(1, lam // n))


# ---------------------------------------------------------------------------------------------
# Elastic averaging, BMUF and local SGD

def easgd(prof: Profile, cl: Cluster, servers: int = 1, period: int = 4, sync: bool = False) -> Prediction:
    """Local SGD steps; every ``period`` steps each worker swaps its parameters with the centre."""
    w = cl.ranks - servers
    if w < 1:
        raise ValueError(f"EASGD with {servers} servers needs more than {servers} ranks, got {cl.ranks}")
    by = _ps_bytes(prof, servers, push="param_push", every=period)
    elastic = prof.update_s() / servers  # x̃ += α(x_i − x̃): about one optimizer pass over the shard
    book = prof.bookkeeping_s()
    if not sync:
        return _async(prof, loop_link(prof, cl, servers), w, servers, period, True, elastic, by, book)
    comp = max(_worker_compute(prof, cl, w, lockstep=True))
    xfer = 2 * C.ps_transfer_time(prof.model_bytes, w, servers, cl.bandwidth, cl.latency)
    step = comp + prof.update_s() + book + (xfer + elastic) / period
    terms = {"compute": comp + prof.update_s(), "exchange": xfer / period, "server_apply": elastic / period,
             "bookkeeping": book}
    kinds = {"compute": "compute", "exchange": "server" if w > servers else "link", "server_apply": "server",
             "bookkeeping": "compute"}
    return Prediction(step, w * prof.batch / step, by, _dominant(terms, kinds), terms)


def bmuf(prof: Profile, cl: Cluster, block: int = 8) -> Prediction:
    """BMUF and local SGD: local steps, one all-reduce of the flat model per block."""
    p = cl.ranks
    # The block all-reduce waits for the slowest rank's `block` local steps. On a shared host that
    # is the profile's loop of `block` steps and a one-float all-reduce (``loops["aligned/<block>"]``,
    # ``profile.block_loop_s``), where the profile timed it for these ranks: the scheduler's
    # unfairness evens out over a block only in part (the small CNN: lockstep span 12.7 ms, the
    # mean rank 6.3, BMUF's and local SGD's steps 10.3–11.3 ms, 2026-12-03; with the span the rows
    # were +29 % to +49 % on loopback). Without it, the lockstep span, as `sync` pays.
    ring = C.allreduce_bytes(prof.model_bytes, p)
    timed = _profiled_ranks_here(prof, cl) and not cl.stragglers
    own = prof.loops.get(f"block/{block}") if timed else None
    if own is not None:
        # The trainer's own loop (``workbench.trainers.bmuf.block_loop``): local steps with their
        # update, then the block's end as the trainer runs it, whose flat copies, filter and
        # all-reduce of a model asleep gloo must wake for were 2.05 ms a block on the small CNN
        # where the one-float loop, the in-situ all-reduce (0.06 ms) and one update said 0.36
        # (2026-12-05, docs/planner.md). Behind the emulated links the shaper's wait, once a block.
        comp, upd = own, 0.0  # the loop holds the updates
        ar = shaper_delay_s(cl, ring, block * own)
    else:
        loop = prof.loops.get(f"aligned/{block}") if timed else None  # profiles before 2026-12-05 night
        comp = loop if loop is not None else max(_worker_compute(prof, cl, p, lockstep=True))
        upd = prof.update_s()
        ar = _collective_s(prof, cl, "allreduce", "float32", prof.model_bytes)
        if _timed_here(prof, cl):  # looked up, as in `_dp`: the shaper waits on top, once a block
            ar += shaper_delay_s(cl, ring, block * (comp + upd) + ar)
    book = prof.bookkeeping_s()
    step = comp + upd + book + (ar + upd) / block  # the block update touches every parameter about once
    n = ring / block
    terms = {"compute": comp, "update": upd + upd / block, "allreduce": ar / block, "bookkeeping": book}
    kinds = {"compute": "compute", "update": "compute", "allreduce": "link", "bookkeeping": "compute"}
    return Prediction(step, p * prof.batch / step, {"allreduce": _cat(n, n)}, _dominant(terms, kinds), terms)


# ---------------------------------------------------------------------------------------------
# Stanza

def stanza_inputs(prof: Profile, cl: Cluster, batch: Optional[int] = None) -> st.StanzaInputs:
    s = prof.speedup
    at = (lambda xs: tuple(v / s for v in xs)) if cl.shares_cores else (lambda xs: None)
    return st.StanzaInputs(t_c=prof.t_c(1), t_f=prof.t_f(1), a=prof.boundary, p_c=prof.params_conv,
                           p_f=prof.params_fc, b=batch or prof.batch, beta=cl.bandwidth, alpha=cl.latency,
                           beta_allreduce=cl.allreduce_bandwidth, u=prof.u / s,
                           t_c_at=at(prof.t_c_at), t_f_at=at(prof.t_f_at))


def _loopback_twin(cl: Cluster) -> Cluster:
    """``cl``'s ranks on this host's loopback: behind the emulated links, the row whose loops the
    profile timed (:func:`_loop_here`), and so the host part of the row's transfers."""
    return replace(cl, shared_host=True, cores_shared=False, shaper_rate=0.0, shaper_burst=0.0, host_bandwidth=0.0,
                   host_allreduce_bandwidth=0.0, bandwidth=_host_bandwidth(cl),
                   allreduce_bandwidth=_host_bandwidth(cl, ring=True))


def _host_line(prof: Profile, cl: Cluster, servers: int = 1) -> Cluster:
    """Behind the emulated links' shapers: ``cl`` with this host's own part of a transfer alone, the
    shaper's wait left to the caller. The same ranks on the same cores and scheduler as on this
    host's loopback, so the part is the loopback's line in the loop where the profile timed it
    (:func:`loop_link`), else this host's stack (point to point and the ring's)."""
    line = loop_link(prof, _loopback_twin(cl), servers)
    return replace(cl, bandwidth=line.bandwidth, latency=line.latency, allreduce_bandwidth=line.allreduce_bandwidth)


def _conv_bucket_numels(prof: Profile) -> List[float]:
    """The CONV group's DDP buckets (it wraps the features alone): the profile's buckets of the whole
    model less the classifier, whose parameters come last in the model and so fill the first bucket."""
    numels, fc = [], prof.params_fc
    for bk in prof.buckets:
        take = min(fc, bk["numel"])
        fc -= take
        if bk["numel"] - take > 0:
            numels.append(bk["numel"] - take)
    return numels or [prof.params_conv]


def shaper_after_s(cl: Cluster, nbytes: float, before: float, gap: float = 0.0) -> float:
    """Seconds a token bucket holds ``nbytes`` sent ``gap`` seconds after ``before`` bytes went the
    same way from a full bucket: it holds what ``before`` left of the burst and what the gap
    refilled (at most the burst), and passes the rest at the rate. A link's ingress that has just
    carried a message has little burst left for the next one."""
    if cl.shaper_rate <= 0:
        return 0.0
    left = max(0.0, cl.shaper_burst - before)
    return max(0.0, nbytes - min(cl.shaper_burst, left + cl.shaper_rate * gap)) / cl.shaper_rate


def _stanza_behind_shaper(prof: Profile, cl: Cluster, x: st.StanzaInputs, n_c: int, n_f: int) -> Dict[str, float]:
    """Stanza's schedule behind token buckets (the emulated links), as DDP's is in :func:`_dp`: every
    transfer and ring pays this host's part in series (``x`` is on :func:`_host_line`), and for what
    a refilled burst does not cover, the slower of the two buckets it passes (each link is shaped
    both ways, ``workbench/network/emulated.py``):

    * in: the k CONV workers of the busiest FC worker send at once, each through its own egress
      (refilled through the conv compute) but all through the FC worker's one ingress, which
      shares its rate among them, so the k pieces arrive together after k·A bytes, not one A
      apart (the pipeline of :func:`perfmodel.stanza.fc_phase_s` assumed the latter);
    * out: the FC worker sends the k gradients one after another through its egress, full after
      a step's silence, while it computes the next piece;
    * the CONV ring: the last-served CONV worker's ingress has just carried its gradient, so the
      ring's bytes find that bucket drained but for what the backward refilled before the first
      bucket's ring (``shaper_after_s``), its egress idle since the activations;
    * the FC ring (n_f > 1) starts as the last gradient has left: its egress drained, its ingress
      refilled through the gradients' way out.

    DDP rings the CONV group's buckets while the conv backward still runs, so the ring's wait hides
    behind the backward's remainder (``exposed_after_backward``); the host part, which takes the
    same cores, does not.

    Measured on the small CNN behind 50 Mbit/s links (n_f = 1, 2 CONV workers), a CONV worker's
    exchange took 26.5 ms and its ring 20 ms where the one-bucket pipeline said 16 and 8."""
    t = st.parts(x, n_c, n_f)
    conv, k, d_host, f = t["conv_compute"], t["pieces"], t["transfer"], t["fc_compute"]
    act = x.s * x.a * x.b
    arrive = d_host + max(shaper_delay_s(cl, act, conv), shaper_delay_s(cl, k * act, math.inf))
    leave = k * d_host + shaper_delay_s(cl, k * act, math.inf)
    fc_phase = arrive + f + max(leave, (k - 1) * f + d_host)
    ring_c, ring_f = C.allreduce_bytes(x.s * x.p_c, n_c), C.allreduce_bytes(x.s * x.p_f, n_f)
    numels, bwd = _conv_bucket_numels(prof), (1 - prof.fwd_share) * conv
    first = bwd * numels[0] / (float(sum(numels)) or 1.0)  # the first bucket's ring starts then
    wire = max(shaper_delay_s(cl, ring_c, fc_phase + prof.fwd_share * conv), shaper_after_s(cl, ring_c, act, first))
    t["allreduce_conv"] += exposed_after_backward(bwd, _shares(wire, numels), numels)
    # the FC ring starts as the last gradient has left: its egress drained, its ingress refilled since
    t["allreduce_fc"] += max(shaper_after_s(cl, ring_f, k * act), shaper_delay_s(cl, ring_f, fc_phase - arrive))
    t["transfer"] = (fc_phase - k * f) / (2 * k)  # each way's mean, for the bottleneck's terms
    return st.assemble(t, fc_phase)


def stanza(prof: Profile, cl: Cluster, fc_workers: int = 1) -> Prediction:
    """Stanza's schedule (``perfmodel.stanza.breakdown``) with n_f FC workers of ``cl.ranks``."""
    n_f = fc_workers
    n_c = cl.ranks - n_f
    if n_c < 1 or n_f < 1:
        raise ValueError(f"Stanza needs 1 <= n_f < ranks, got n_f={n_f} of {cl.ranks}")
    if cl.shaper_rate > 0:
        x = stanza_inputs(prof, _host_line(prof, cl))
        t = _stanza_behind_shaper(prof, cl, x, n_c, n_f)
    else:
        x = stanza_inputs(prof, loop_link(prof, cl))  # its activations and sub-group rings: this host's in-loop line
        t = st.breakdown(x, n_c, n_f)
    by = st.stanza_conv_worker_bytes(prof.params_conv, prof.boundary, x.b, n_c)
    book = prof.bookkeeping_s()  # every rank's loop, CONV and FC alike, between its steps
    step = t["step"] + book
    terms = {"conv_compute": t["conv_compute"], "fc_compute": t["fc_compute"] * t["pieces"],
             "transfer": 2 * t["transfer"] * t["pieces"], "allreduce": t["allreduce_conv"] + t["fc_exposed"],
             "update": t["update_conv"], "bookkeeping": book}
    kinds = {"conv_compute": "compute", "fc_compute": "compute", "update": "compute", "transfer": "link",
             "allreduce": "link", "bookkeeping": "compute"}
    return Prediction(step, n_c * x.b / step, by, _dominant(terms, kinds), terms)


# The step-time functions by name, for code that has only a name (the JSON of a plan).
MODELS: Dict[str, Callable[..., Prediction]] = {
    "sync": sync, "compressed": compressed, "ps_sync": ps_sync, "ps_async": ps_async, "staleness": staleness,
    "easgd": easgd, "bmuf": bmuf, "stanza": stanza}
