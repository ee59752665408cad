"""The emulated links' token buckets (``workbench/network/emulated.py``: tc tbf on both directions
of every rank's link, on this host's cores): what a transfer waits for behind them.

A bucket passes ``Cluster.shaper_rate`` bytes/s on average and lets up to ``shaper_burst`` bytes
through at the host's speed after its direction has idled long enough to refill
(:func:`shaper_delay_s`, :func:`shaper_after_s`). Each transfer also pays this host's own part, the
stack that is the same ranks on the same cores as on loopback (:func:`host_line`). Where the ranks
outnumber the cores the two are stages of one pipeline and a transfer takes the slower
(:func:`beyond_host_s`, :func:`behind_shaper_s`); with a core per rank they add up.

Only :mod:`workbench.perfmodel.testbed` plugs these into the paradigms.
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Dict, List, Optional, Sequence, Tuple

from workbench.perfmodel import collectives as C
from workbench.perfmodel import stanza as st
from workbench.perfmodel.cluster import Cluster, exposed_after_backward, line_s, shares
from workbench.perfmodel.loopback import loop_link, oversubscribed
from workbench.perfmodel.profile.schema import Profile
from workbench.perfmodel.queueing import increasing_root


def shaper_delay_s(cl: Cluster, nbytes: float, idle_s: float) -> float:
    """Seconds a token bucket holds ``nbytes`` sent in one go, once per step after ``idle_s`` of
    the link's silence: it starts with the tokens refilled meanwhile (at most its burst) and passes
    the rest at its rate. At 1 Gbit/s the emulator's bucket is 500 KB and refills in 4 ms, so a
    small CNN's 807 KB of ring all-reduce per step waits for 307 KB, not 807."""
    if cl.shaper_rate <= 0:
        return 0.0
    return max(0.0, nbytes - min(cl.shaper_burst, cl.shaper_rate * idle_s)) / cl.shaper_rate


def shaper_after_s(cl: Cluster, nbytes: float, before: float, gap: float = 0.0) -> float:
    """Seconds a token bucket holds ``nbytes`` sent ``gap`` seconds after ``before`` bytes went the
    same way from a full bucket: it holds what ``before`` left of the burst and what the gap
    refilled (at most the burst), and passes the rest at the rate. A link's ingress that has just
    carried a message has little burst left for the next one."""
    if cl.shaper_rate <= 0:
        return 0.0
    left = max(0.0, cl.shaper_burst - before)
    return max(0.0, nbytes - min(cl.shaper_burst, left + cl.shaper_rate * gap)) / cl.shaper_rate


def host_bandwidth(cl: Cluster, ring: bool = False) -> float:
    """Bytes/s of this host's stack alone on a shaped link, point to point or (``ring``) the ring's
    (``cl.bandwidth`` and ``cl.ar_bw`` are each it and the shaper's rate in series)."""
    host, line = (cl.host_allreduce_bandwidth, cl.ar_bw) if ring else (cl.host_bandwidth, cl.bandwidth)
    if host > 0:
        return host
    return 1 / max(1e-30, 1 / line - 1 / cl.shaper_rate)


def stack_s(cl: Cluster, collective: str, nbytes: float) -> float:
    """One collective on this host's idle stack alone, behind a shaper (the α-β line of the stack,
    without the shaper's rate); 0 where no shaper is (nothing is priced beyond the host part)."""
    if cl.shaper_rate <= 0:
        return 0.0
    return line_s(cl, collective, nbytes, host_bandwidth(cl, ring=True), host_bandwidth(cl))


def loopback_twin(cl: Cluster) -> Cluster:
    """``cl``'s ranks on this host's loopback: behind the emulated links, the row whose loops the
    profile timed (``loopback.loop_here``), and so the host part of the row's transfers."""
    return replace(cl, shared_host=True, cores_shared=False, shaper_rate=0.0, shaper_burst=0.0, host_bandwidth=0.0,
                   host_allreduce_bandwidth=0.0, bandwidth=host_bandwidth(cl),
                   allreduce_bandwidth=host_bandwidth(cl, ring=True))


def host_line(prof: Profile, cl: Cluster, servers: int = 1) -> Cluster:
    """Behind the emulated links' shapers: ``cl`` with this host's own part of a transfer alone, the
    shaper's wait left to the caller. The same ranks on the same cores and scheduler as on this
    host's loopback, so the part is the loopback's line in the loop where the profile timed it
    (``loopback.loop_link``), else this host's stack (point to point and the ring's)."""
    line = loop_link(prof, loopback_twin(cl), servers)
    return replace(cl, bandwidth=line.bandwidth, latency=line.latency, allreduce_bandwidth=line.allreduce_bandwidth)


def beyond_host_s(parts: Sequence[Sequence[Tuple[float, float, float]]], wait: float) -> List[float]:
    """Per bucket, the seconds its collectives take behind a token bucket beyond their host part.
    ``parts``: per bucket, each collective's (host part timed in situ, the idle stack's α-β time,
    bytes sent); ``wait``: the bucket's wait for the step's bytes (:func:`shaper_delay_s`), shared
    over the collectives by their bytes. A collective takes the slower of two stages of one pipeline,
    max(host part, stack + its wait), as a PS message does (:func:`behind_shaper_s`), and
    collectives in turn (a bucket's sizes, then its payloads; PowerSGD's P, then Q) each pay their
    own maximum.

    Only where the ranks outnumber the cores (``loopback.oversubscribed``; the caller adds the two
    stages otherwise): there the in-situ host part is mostly a rank waiting for a core, and while
    the shaper holds the ring no rank computes, so the cores are free. With a core per rank the
    host part is CPU work the ring needs before and after each chunk, in series with the wire.
    With 2 ranks on 2 cores the measurements do not settle which of the two holds
    (docs/notes/2026-12-04-host-part-and-wire.md)."""
    whole = float(sum(n for msgs in parts for _, _, n in msgs)) or 1.0
    return [sum(max(0.0, stack + wait * n / whole - host) for host, stack, n in msgs) for msgs in parts]


def dp_wire_s(prof: Profile, cl: Cluster, sent: Sequence[float], parts: Sequence[Sequence[tuple]],
              idle_s: float) -> List[float]:
    """Per bucket, what the shaper holds a step's collectives beyond their host part: the bucket's
    wait for the step's bytes ``sent`` after ``idle_s`` of the link's silence, shared over the
    buckets by their bytes (with a core per rank) or each collective the slower of its two stages
    (:func:`beyond_host_s`, the ranks outnumbering the cores). ``parts``: per bucket, each message's
    (host part, collective, bytes, bytes sent)."""
    wire = shaper_delay_s(cl, sum(sent), idle_s)
    if not oversubscribed(prof, cl):
        return shares(wire, sent)
    return beyond_host_s([[(h, stack_s(cl, coll, nb), n) for h, coll, nb, n in msgs] for msgs in parts], wire)


def behind_shaper_s(cl: Cluster, floor: Optional[Cluster], nbytes: float, wait: float, series: bool = False) -> float:
    """One PS message of ``nbytes`` behind token buckets: this host's stack, then the bucket's
    ``wait``, in series, but never faster than ``floor``, the in-loop line of the same ranks on the
    same cores (:func:`host_line`). Where the ranks share the cores the two are stages of one
    pipeline: the bytes the bucket holds back leave the sender's copies and the receiver's core
    waits time to happen meanwhile, so the message takes the slower stage, not their sum (the idle
    ping-pong's stack alone is far faster than the loop on the same cores, docs/planner.md). With
    a core per rank (``series``) the in-loop part is CPU work the message needs before and after
    the wire, and the wait follows it, as the ring's does (:func:`beyond_host_s`)."""
    idle = C.PS_MESSAGES * cl.latency + nbytes / host_bandwidth(cl) + wait
    if floor is None:
        return idle
    line = C.PS_MESSAGES * floor.latency + nbytes / floor.bandwidth
    return line + wait if series else max(idle, line)


def ps_phase_s(prof: Profile, cl: Cluster, workers: int, servers: int, busy_s: float,
               host_s: Optional[float] = None, nbytes: Optional[float] = None) -> float:
    """One lockstep push (or pull) of the model behind token buckets (both directions of every
    link shaped): the worker's link carries M and a server's link W·M/S, each starting with the
    tokens refilled while that direction idled: during the other phase and ``busy_s`` (compute and
    the update). At 1 Gbit/s the bucket holds 500 KB: a worker's 605 KB small-CNN push waits for
    105 KB. ``host_s``: the phase's host part as this host's hardsync loop timed it, which the
    bucket's wait follows in series where every rank has a core of its own and which is the floor
    of the idle stack's line plus the wait where they share the cores (:func:`behind_shaper_s`).
    ``nbytes``: a message other than the model (a compressed push), M by default."""
    n, host = prof.model_bytes if nbytes is None else nbytes, host_bandwidth(cl)
    series = host_s is not None and not oversubscribed(prof, cl)

    def phase(idle: float) -> float:
        waits = (shaper_delay_s(cl, n, idle), shaper_delay_s(cl, workers * n / servers, idle))
        if series:
            return host_s + max(waits)
        worker = C.PS_MESSAGES * cl.latency + n / host + waits[0]
        server = workers * (C.PS_MESSAGES * cl.latency + n / (servers * host)) + waits[1]
        return max(worker, server, host_s or 0.0)
    # the phase's link idles for the other phase: x = phase(busy + x), one root (phase falls as idle grows)
    return increasing_root(lambda x: x - phase(busy_s + x), 0.0, phase(busy_s), 60)


class ShapedLink:
    """A worker's exchange with the servers behind token buckets, for ``queueing.closed_loop``:
    the worker's link carries M, each server's M/S, each direction starting with the tokens
    refilled while it idled, each message at least the in-loop line of this host
    (:func:`host_line`, :func:`behind_shaper_s`)."""

    def __init__(self, prof: Profile, cl: Cluster, servers: int) -> None:
        self.prof, self.cl, self.servers = prof, cl, servers
        self.floor = host_line(prof, cl, servers)
        self.series = not oversubscribed(prof, cl)

    def _exchange(self, worker_idle: float, server_idle: float) -> float:
        """One worker's push and pull when the servers are free: a header and a payload each way."""
        n, cl = self.prof.model_bytes, self.cl
        wait = max(shaper_delay_s(cl, n, worker_idle), shaper_delay_s(cl, n / self.servers, server_idle))
        return 2 * behind_shaper_s(cl, self.floor, n, wait, self.series)

    def exchange(self, local: float, per_update: float, server_idle: float) -> float:
        """A worker's link idles through its whole cycle but its own message out: the update between
        its push and pull, the pull, and its local steps ``local``. The pull shortens as the idle
        grows: one root of g = local + update + e(g)/2."""
        e = lambda g: self._exchange(g, server_idle)  # noqa: E731
        hi = local + per_update + e(local) / 2
        return e(increasing_root(lambda g: g - (local + per_update + e(g) / 2), local, hi, 40))

    def service(self, server_idle: float) -> float:
        """A server's busy time per exchange (``collectives.server_service_time``): the push in waits
        for what the bucket did not refill in ``server_idle``."""
        cl = self.cl
        shard = self.prof.model_bytes / self.servers
        wait = shaper_delay_s(cl, shard, server_idle) + max(0.0, shard - C.SEND_BUFFER) / cl.shaper_rate
        return behind_shaper_s(cl, self.floor, shard, wait, self.series)

    def server_idle(self, solve, per_update: float) -> float:
        """A server's link starts each push with what refilled since the last one, the gap 1/X − D at
        X exchanges/s, and the gap sets D: its fixed point, by bisection on g − gap(g), which rises
        (gap's slope is at most 1 − 1/W). The root lies below the larger of the gaps at an empty
        and a full bucket (gap is monotone in g: falling when the servers saturate, rising before)."""
        def gap(g: float) -> float:
            _, _, d, xs, _ = solve(g)
            return max(0.0, 1 / sum(xs) - (d - per_update))
        return increasing_root(lambda g: g - gap(g), 0.0, max(gap(0.0), gap(math.inf)), 40)


def conv_bucket_numels(prof: Profile) -> List[float]:
    """The CONV group's DDP buckets (it wraps the features alone): the profile's buckets of the whole
    model less the classifier, whose parameters come last in the model and so fill the first bucket."""
    numels, fc = [], prof.params_fc
    for bk in prof.buckets:
        take = min(fc, bk["numel"])
        fc -= take
        if bk["numel"] - take > 0:
            numels.append(bk["numel"] - take)
    return numels or [prof.params_conv]


def stanza_behind_shaper(prof: Profile, cl: Cluster, x: st.StanzaInputs, n_c: int, n_f: int) -> Dict[str, float]:
    """Stanza's schedule behind token buckets, as DDP's is: every transfer and ring pays this
    host's part in series (``x`` is on :func:`host_line`), and for what a refilled burst does not
    cover, the slower of the two buckets it passes (each link is shaped both ways):

    * in: the k CONV workers of the busiest FC worker send at once, each through its own egress
      (refilled through the conv compute) but all through the FC worker's one ingress, which
      shares its rate among them, so the k pieces arrive together after k·A bytes, not one A
      apart (the pipeline of :func:`perfmodel.stanza.fc_phase_s` assumes the latter);
    * out: the FC worker sends the k gradients one after another through its egress, full after
      a step's silence, while it computes the next piece;
    * the CONV ring: the last-served CONV worker's ingress has just carried its gradient, so the
      ring's bytes find that bucket drained but for what the backward refilled before the first
      bucket's ring (``shaper_after_s``), its egress idle since the activations;
    * the FC ring (n_f > 1) starts as the last gradient has left: its egress drained, its ingress
      refilled through the gradients' way out.

    DDP rings the CONV group's buckets while the conv backward still runs, so the ring's wait hides
    behind the backward's remainder (``exposed_after_backward``); the host part, which takes the
    same cores, does not."""
    t = st.parts(x, n_c, n_f)
    conv, k, d_host, f = t["conv_compute"], t["pieces"], t["transfer"], t["fc_compute"]
    act = x.s * x.a * x.b
    arrive = d_host + max(shaper_delay_s(cl, act, conv), shaper_delay_s(cl, k * act, math.inf))
    leave = k * d_host + shaper_delay_s(cl, k * act, math.inf)
    fc_phase = arrive + f + max(leave, (k - 1) * f + d_host)
    ring_c, ring_f = C.allreduce_bytes(x.s * x.p_c, n_c), C.allreduce_bytes(x.s * x.p_f, n_f)
    numels, bwd = conv_bucket_numels(prof), (1 - prof.fwd_share) * conv
    first = bwd * numels[0] / (float(sum(numels)) or 1.0)  # the first bucket's ring starts then
    wire = max(shaper_delay_s(cl, ring_c, fc_phase + prof.fwd_share * conv), shaper_after_s(cl, ring_c, act, first))
    t["allreduce_conv"] += exposed_after_backward(bwd, shares(wire, numels), numels)
    # the FC ring starts as the last gradient has left: its egress drained, its ingress refilled since
    t["allreduce_fc"] += max(shaper_after_s(cl, ring_f, k * act), shaper_delay_s(cl, ring_f, fc_phase - arrive))
    t["transfer"] = (fc_phase - k * f) / (2 * k)  # each way's mean, for the bottleneck's terms
    return st.assemble(t, fc_phase)
