"""The parameter server's exchange with compressed messages: a worker's push (and pull) per
server shard, their bytes and codec seconds (:class:`Push`), and the links that price it: the
α-β line (:class:`PayloadLink`), this host's emulated links' token buckets
(:class:`PayloadShapedLink`), and hardsync's push and pull (:func:`sync_xfer`). The models that use
them are in :mod:`workbench.perfmodel.paradigms.compressed_messages`."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict

from workbench.perfmodel import collectives as C
from workbench.perfmodel.cluster import HEADER_BYTES, Cluster, cat
from workbench.perfmodel.loopback import loop_link, ps_loop_s
from workbench.perfmodel.profile.schema import Profile
from workbench.perfmodel.queueing import LineLink
from workbench.perfmodel.shaper import ShapedLink, behind_shaper_s, ps_phase_s, shaper_delay_s


@dataclass(frozen=True)
class Push:
    """A worker's exchange with the servers, per shard: bytes each way and the codecs' seconds."""

    push: float  # bytes a worker sends (all shards)
    pull: float  # bytes it receives
    worker_s: float  # the worker's encode (and decode of a compressed pull), every shard
    server_s: float  # one exchange's decode (and encode) on the busiest server


def ps_bytes(x: Push, servers: int, push_cat: str = "grad_push", every: int = 1) -> Dict[str, Dict[str, float]]:
    return {push_cat: cat(x.push / every, 0), "param_pull": cat(0, x.pull / every),
            "ps_control": cat(HEADER_BYTES * servers / every, HEADER_BYTES * servers / every)}


def p2p_line(prof: Profile, cl: Cluster, servers: int) -> Cluster:
    """The line a point-to-point message takes: on loopback at the profiled ranks the in-loop line,
    elsewhere the cluster's own (behind the emulated links: the host's stack and the rate in series)."""
    return loop_link(prof, cl, servers) if cl.shared_host else cl


class PayloadLink(LineLink):
    """:class:`~workbench.perfmodel.queueing.LineLink` with the compressed push (and pull) and the
    codecs: a worker's exchange PS(push) + PS(pull) + its codecs, a server's service
    2α + push/(Sβ) + max(0, pull/S − B)/β + its codecs."""

    def __init__(self, prof: Profile, cl: Cluster, servers: int, x: Push) -> None:
        super().__init__(prof, cl, servers)
        self.x = x

    def exchange(self, local: float, per_update: float, server_idle: float) -> float:
        cl, x, s = self.cl, self.x, self.servers
        return (C.ps_transfer_time(x.push, 1, s, cl.bandwidth, cl.latency)
                + C.ps_transfer_time(x.pull, 1, s, cl.bandwidth, cl.latency) + x.worker_s)

    def service(self, server_idle: float) -> float:
        cl, x, s = self.cl, self.x, self.servers
        return (C.PS_MESSAGES * cl.latency + x.push / (s * cl.bandwidth)
                + max(0.0, x.pull / s - C.SEND_BUFFER) / cl.bandwidth + x.server_s)


class PayloadShapedLink(ShapedLink):
    """:class:`~workbench.perfmodel.shaper.ShapedLink` (the asynchronous exchange behind the emulated
    links' token buckets) with the compressed push and the pull each behind its own wait, and the
    codecs; with push = pull = M and no codec it is the dense link."""

    def __init__(self, prof: Profile, cl: Cluster, servers: int, x: Push) -> None:
        super().__init__(prof, cl, servers)
        self.x = x

    def _exchange(self, worker_idle: float, server_idle: float) -> float:
        cl, x, s = self.cl, self.x, self.servers
        way = lambda n: behind_shaper_s(cl, self.floor, n, max(shaper_delay_s(cl, n, worker_idle),  # noqa: E731
                                                               shaper_delay_s(cl, n / s, server_idle)), self.series)
        return way(x.push) + way(x.pull) + x.worker_s

    def service(self, server_idle: float) -> float:
        cl, x, s = self.cl, self.x, self.servers
        wait = shaper_delay_s(cl, x.push / s, server_idle) + max(0.0, x.pull / s - C.SEND_BUFFER) / cl.shaper_rate
        return behind_shaper_s(cl, self.floor, x.push / s, wait, self.series) + x.server_s


def async_link(prof: Profile, cl: Cluster, servers: int, x: Push):
    """The asynchronous exchange's link: behind the emulated links the token buckets
    (:class:`PayloadShapedLink`), elsewhere the line (:func:`p2p_line`)."""
    if cl.shaper_rate > 0:
        return cl, PayloadShapedLink(prof, cl, servers, x)
    line = p2p_line(prof, cl, servers)
    return line, PayloadLink(prof, line, servers, x)


def sync_xfer(prof: Profile, cl: Cluster, w: int, servers: int, x: Push, busy: float) -> float:
    """Hardsync's push and pull: behind the emulated links each a phase behind the token buckets
    (``shaper.ps_phase_s`` with the payload, on the idle stack's line: the hardsync loop's host part
    holds the dense message), elsewhere on the line."""
    if cl.shaper_rate > 0:
        return ps_phase_s(prof, cl, w, servers, busy, None, x.push) + ps_phase_s(prof, cl, w, servers, busy, None, x.pull)
    line = p2p_line(prof, cl, servers)
    on_line = lambda n: C.ps_transfer_time(n, w, servers, line.bandwidth, line.latency)  # noqa: E731
    loop = ps_loop_s(prof, cl, "sync", servers)
    if loop is not None:  # loopback at the profiled ranks: the hardsync loop, less what the payloads save on the in-loop line
        dense = max(0.0, loop - prof.sync_compute_s(w) - prof.update_s() / servers)
        return max(0.0, dense - 2 * on_line(prof.model_bytes) + on_line(x.push) + on_line(x.pull))
    return on_line(x.push) + on_line(x.pull)
