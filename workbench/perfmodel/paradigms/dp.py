"""Synchronous data parallelism (``trainer=sync``, DDP) and DDP with a compressor on its buckets
(``trainer=compressed``).

On a cluster of hosts: T = C + E + codec + U + book, with C the lockstep forward+backward, E what
is left of the bucketed all-reduce when backward ends (bucket i starts when backward has produced
its gradients and bucket i−1 is done, :func:`~workbench.perfmodel.cluster.exposed_after_backward`;
the last bucket never hides), each bucket's collective on the α-β line (``collectives``), with a
compressor its payloads instead and its encode+decode time (measured per bucket), which is host
work and never hides. On this machine E is :func:`workbench.perfmodel.testbed.dp_exposed_s`.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Callable, Dict, List, Optional, Tuple

from workbench.perfmodel import collectives as C
from workbench.perfmodel import testbed
from workbench.perfmodel.cluster import (Cluster, Prediction, bucket_ready, cat, crossover_rate_bps, dominant,
                                         exposed_after_backward, line_s, worker_compute)
from workbench.perfmodel.paradigms.compressed_messages import MissingMeasurement
from workbench.perfmodel.profile.schema import Profile


def bucket_comm(prof: Profile, cl: Cluster, compressor: Optional[str]) -> Tuple[
        List[float], List[float], Dict[str, Dict[str, float]], List[float], List[list]]:
    """Per bucket: communication seconds, codec seconds and the bytes one rank sends; the bytes by
    category (``compressor``: one of the profile's codecs, or None for DDP's all-reduce); and per
    bucket each message's (host part, collective, bytes, bytes sent), which a run on this machine
    prices further (``testbed.dp_exposed_s``)."""
    p = cl.ranks
    codec = prof.codecs[compressor] if compressor is not None else None
    comm, codec_s, by, sent_b, parts = [], [], {}, [], []
    for i, bk in enumerate(prof.buckets):
        sent = [{"collective": "allreduce", "bytes": 4 * bk["numel"], "category": "allreduce"}] if codec is None \
            else codec["payloads"][i]
        t, out, msgs = 0.0, 0, []
        for m in sent:
            c = by.setdefault(m["category"], cat())
            here = testbed.timed_collective_s(prof, cl, m["collective"], m.get("dtype", "float32"), m["bytes"])
            host = here if here is not None else line_s(cl, m["collective"], m["bytes"], cl.ar_bw, cl.bandwidth)
            t += host
            n = C.allreduce_bytes(m["bytes"], p) if m["collective"] == "allreduce" else C.allgather_varlen_bytes(m["bytes"], p)
            c["sent"] += n
            c["recv"] += n
            out += n
            msgs.append((host, m["collective"], m["bytes"], n))
        comm.append(t)
        sent_b.append(out)
        parts.append(msgs)
        codec_s.append(prof.codec_s(compressor, i, p, cl.shares_cores) if codec is not None else 0.0)
    comm, parts = testbed.steps_together(prof, cl, compressor, comm, parts)
    return comm, codec_s, by, sent_b, parts


def _dp(prof: Profile, cl: Cluster, compressor: Optional[str]) -> Prediction:
    p = cl.ranks
    if p < 1:
        raise ValueError(f"data parallelism needs ranks >= 1, got {p}")
    comp = max(worker_compute(prof, cl, p, lockstep=True))
    bwd = (1 - prof.fwd_share) * comp
    comm, codec_s, by, sent, parts = bucket_comm(prof, cl, compressor)
    upd = prof.update_s()
    numels = [bk["numel"] for bk in prof.buckets]
    overhead = testbed.ddp_overhead_s(prof, cl, compressor)  # 0 on a cluster of hosts
    exposed = testbed.dp_exposed_s(prof, cl, comp, codec_s, upd, comm, overhead, sent, parts, numels)
    if exposed is None:
        exposed = exposed_after_backward(bwd, comm, numels, bucket_ready(prof))
    book = prof.bookkeeping_s()
    step = comp + exposed + sum(codec_s) + upd + book
    terms = {"compute": comp, "update": upd, "communication": sum(comm), "exposed_communication": exposed,
             "ddp_overhead": overhead, "codec": sum(codec_s), "bookkeeping": book}
    kinds = {"compute": "compute", "update": "compute", "exposed_communication": "link", "codec": "host codec",
             "bookkeeping": "compute"}
    return Prediction(step, p * prof.batch / step, by, dominant(terms, kinds), terms)


def sync(prof: Profile, cl: Cluster) -> Prediction:
    """DDP's bucketed ring all-reduce (``trainer=sync``)."""
    return _dp(prof, cl, None)


def compressed(prof: Profile, cl: Cluster, compressor: str) -> Prediction:
    """DDP with a compressor on its buckets (``trainer=compressed``); with the crossover: the link
    rate below which it beats ``sync`` on ``cl.ranks`` ranks one per host."""
    if compressor not in prof.codecs:
        raise MissingMeasurement(f"the profile has no codec measurement of compressor {compressor!r}")
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
    return crossover_rate_bps(gain, cl.ranks, lo, hi)
