"""The paradigms other than DDP with a compressor on their messages: ``ps/<mode>+<c>``,
``staleness/n=<n>+<c>``, ``easgd/<mode>+<c>``, ``bmuf+<c>`` / ``local_sgd+<c>`` and
``stanza/n_f=<k>+<c>`` (``workbench.compress.messages``: which compressor carries which message).

Every compressed message is priced as the dense one it replaces, on the same link, with its
payload's bytes instead of the dense bytes, and the codec's encode and decode added as host work
that never hides. The payload is the compressor's analytic wire format
(:attr:`MessageCodec.payload`, ``Compressor.payload_bytes_of_shapes``, handed in by the trainer's
spec); the codec's seconds are the profile's measurement (version 14,
``workbench.compress.codec_timing.measure_messages``): ``send`` and ``receive`` of an instance
built with world 1 on a flat tensor (``Profile.p2p_codec_s``, linear between the measured sizes),
and ``reduce`` on the whole model or its conv part (``Profile.message_codec_s``). A profile without
that measurement raises :class:`MissingMeasurement` and the planner leaves the row out with a note.

Each paradigm's formula, with P_s the payload of server s's shard, P = Σ_s P_s, M the model's
bytes and enc(n) / dec(n) the codec's send / receive on n elements, is in ``docs/planner.md``
("Paradigms with a compressor on their messages") and in each model's docstring below.

Where the rows are this machine: on loopback the links are the in-loop line (``loopback.loop_link``,
fitted to the parameter server's own loops, what the dense asynchronous rows and Stanza use), and
synchronous compute is the lockstep span. Behind the emulated links the asynchronous exchanges pass
the token buckets as the dense ones do, each direction with its own bytes
(``payload_links.PayloadShapedLink``), and hardsync's push and pull are each a phase behind the buckets
(``shaper.ps_phase_s`` with the payload). The loops the dense rows take on this host hold the dense
message; these rows take them less what the dense message cost there and plus the payload's: on
loopback hardsync's exchange is the hardsync loop's, less 2·PS(M) and plus PS(P) + PS(M) on the
in-loop line, and BMUF's block is its own block loop less the in-situ all-reduce of the model once
a block, plus the compressor's collectives as the profile timed them in situ (linear between the
sizes it timed) and its codec. With nothing compressed each is its dense row exactly. Behind the
buckets hardsync's phases take the idle stack's line as their floor (the loop's host part holds
the dense message); ``easgd/sync`` takes the line as its dense row does.
The asynchronous rows stay analytic at every scale: the simulator carries dense messages.

Each row's crossover (:func:`crossover_bps`) is the link rate below which it beats the same
paradigm dense, both on a cluster of hosts one rank each (``cl``'s latency), as ``compressed/<c>``'s
against ``sync``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable, List, Optional, Sequence, Tuple

from workbench.perfmodel import collectives as C
from workbench.perfmodel import stanza as st
from workbench.perfmodel.cluster import Cluster, Prediction, cat, crossover_rate_bps, dominant, line_s, worker_compute
from workbench.perfmodel import testbed
from workbench.perfmodel.loopback import collective_s, profiled_ranks_here
from workbench.perfmodel.paradigms import averaging as dense_avg
from workbench.perfmodel.paradigms import ps as dense_ps
from workbench.perfmodel.paradigms import stanza_schedule as dense_stanza
from workbench.perfmodel.paradigms.ps import workers_of
from workbench.perfmodel.paradigms.payload_links import Push, async_link, p2p_line, ps_bytes, sync_xfer
from workbench.perfmodel.paradigms.stanza_schedule import stanza_inputs
from workbench.perfmodel.profile.schema import Profile
from workbench.perfmodel.queueing import closed_loop
from workbench.perfmodel.shaper import conv_bucket_numels

Shape = Tuple[int, ...]
LENGTH_HEADER_BYTES = 16  # a point-to-point payload's element count and dtype (``compress.delta.send_payload``)


class MissingMeasurement(KeyError):
    """The profile lacks a codec measurement a row needs (a profile before version 14, or one that
    did not measure this compressor): the planner leaves the row out with a note."""


@dataclass(frozen=True)
class MessageCodec:
    """What the model needs of the compressor that carries a message (built by
    ``workbench.compress.codec_timing.message_codec`` from the run's config)."""

    name: str  # the compressor (the profile's codec measurement of that name)
    collective: str  # allreduce | allgather: its collective, where the message is one
    category: str  # the meter category of its collective traffic
    payload: Callable[[Sequence[Shape]], int]  # bytes of one message carrying a flat tensor of these shapes
    # sent(payload, buckets, world): bytes one rank sends in its collective for ``payload`` bytes over
    # ``buckets`` buckets (``Compressor.sent_bytes``: 2(p−1)/p of it, or (p−1)(it + 8 per bucket))
    sent: Callable[[float, int, int], float]


DELTA_BUCKET_BYTES = 25 * 2**20  # float32 bytes per bucket of a flat delta (``compress.delta.BUCKET_CAP_BYTES``)


def sent_bytes(codec: MessageCodec, payloads: Sequence[float], p: int) -> float:
    """Bytes one rank sends in the compressor's collectives of one message per bucket of these
    ``payloads`` among ``p`` ranks: the meter's count, an all-reduce's ⌊2(p−1)n/p⌋ per message, else
    ``Compressor.sent_bytes`` (an all-gather's payload and length to each of the p−1 others)."""
    if p <= 1:
        return 0.0
    return sum(C.allreduce_bytes(n, p) if codec.collective == "allreduce" else codec.sent(n, 1, p) for n in payloads)


def delta_buckets(shapes: Sequence[Shape], cap_bytes: int = DELTA_BUCKET_BYTES) -> List[List[Shape]]:
    """A flat delta's buckets, as the averager cuts them (``compress.delta.bucket_shapes`` calls this):
    consecutive whole parameters, at most ``cap_bytes`` of float32 each, a larger one alone."""
    out: List[List[Shape]] = [[]]
    size = 0
    for s in shapes:
        n = 4 * math.prod(s)
        if out[-1] and size + n > cap_bytes:
            out.append([])
            size = 0
        out[-1].append(tuple(s))
        size += n
    return out


def shards(shapes: Sequence[Shape], servers: int) -> List[List[Shape]]:
    """The parameter server's shards (``workbench.ps.sharding.balance``): whole tensors, the largest
    first, each to the server holding the fewest elements so far, ties to the lower server."""
    sizes = [math.prod(s) for s in shapes]
    load, owned = [0] * servers, [[] for _ in range(servers)]
    for i in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        s = min(range(servers), key=lambda k: (load[k], k))
        owned[s].append(i)
        load[s] += sizes[i]
    return [[tuple(shapes[i]) for i in sorted(o)] for o in owned]


def crossover_bps(cl: Cluster, dense: Callable[[Cluster], Prediction], compressed: Callable[[Cluster], Prediction],
                  lo: float = 1e3, hi: float = 1e13) -> Optional[float]:
    """Bits/s of a node's link below which ``compressed`` beats ``dense`` (each a step-time function
    of the cluster) on ``cl.ranks`` ranks one per host; ``math.inf`` if at every rate in [lo, hi]
    bytes/s, ``None`` if at none. Bisection on a log scale of the gain, as ``dp.crossover_bps``."""
    def gain(bw: float) -> float:
        c = replace(cl, bandwidth=bw, allreduce_bandwidth=None, shared_host=False, cores_shared=False,
                    shaper_rate=0.0, shaper_burst=0.0, host_bandwidth=0.0, host_allreduce_bandwidth=0.0)
        return dense(c).step_s - compressed(c).step_s
    return crossover_rate_bps(gain, cl.ranks, lo, hi)


def _crossed(pred: Prediction, cl: Cluster, dense: Callable[[Cluster], Prediction],
             compressed: Callable[[Cluster], Prediction]) -> Prediction:
    pred.crossover_bps = crossover_bps(cl, dense, compressed)
    return pred


def _p2p(prof: Profile, codec: MessageCodec, numel: float, k: int, shares_cores: bool) -> Tuple[float, float]:
    got = prof.p2p_codec_s(codec.name, numel, k, shares_cores)
    if got is None:
        raise MissingMeasurement(f"the profile has no point-to-point codec measurement of compressor {codec.name!r}")
    return got


def exchange(prof: Profile, cl: Cluster, servers: int, push: MessageCodec, pull: Optional[MessageCodec],
              computing: int) -> Push:
    parts = shards(prof.param_shapes, servers)
    numels = [sum(math.prod(s) for s in part) for part in parts]
    k = cl.concurrency(computing)
    codec = [_p2p(prof, push, n, k, cl.shares_cores) for n in numels]
    out_b = sum(push.payload(part) for part in parts)
    worker, server = sum(e for e, _ in codec), max(d for _, d in codec)
    in_b = prof.model_bytes
    if pull is not None:
        back = [_p2p(prof, pull, n, k, cl.shares_cores) for n in numels]
        in_b = sum(pull.payload(part) for part in parts)
        worker += sum(d for _, d in back)
        server += max(e for e, _ in back)
    return Push(out_b, in_b, worker, server)


def _ps_sync(prof: Profile, cl: Cluster, servers: int = 1, push: MessageCodec = None,
            pull: Optional[MessageCodec] = None) -> Prediction:
    """Hardsync with a compressed push (and pull): every worker's payload, the servers' decodes,
    one update, every worker pulls."""
    w = workers_of(cl, servers)
    comp = max(worker_compute(prof, cl, w, lockstep=True))
    x = exchange(prof, cl, servers, push, pull, w)
    apply = prof.update_s() / servers
    codec = x.worker_s + w * x.server_s
    xfer = sync_xfer(prof, cl, w, servers, x, comp + codec + apply)
    book = prof.bookkeeping_s()
    step = comp + codec + xfer + apply + book
    terms = {"compute": comp, "codec": codec, "push_pull": xfer, "server_apply": apply, "bookkeeping": book}
    kinds = {"compute": "compute", "codec": "host codec", "push_pull": "server" if w > servers else "link",
             "server_apply": "server", "bookkeeping": "compute"}
    return Prediction(step, w * prof.batch / step, ps_bytes(x, servers), dominant(terms, kinds), terms)


def _ps_async(prof: Profile, cl: Cluster, servers: int = 1, c: int = 1, push: MessageCodec = None,
             pull: Optional[MessageCodec] = None) -> Prediction:
    """Asynchronous (c = 1) or n-softsync (c gradients per update) with a compressed push."""
    w = workers_of(cl, servers)
    x = exchange(prof, cl, servers, push, pull, w)
    line, lk = async_link(prof, cl, servers, x)
    return closed_loop(prof, line, lk, w, 1, False,
                       prof.update_s() / (servers * max(1, c)), ps_bytes(x, servers), prof.bookkeeping_s())


def _staleness(prof: Profile, cl: Cluster, servers: int = 1, n: int = 1, hardsync: bool = False,
              push: MessageCodec = None, pull: Optional[MessageCodec] = None) -> Prediction:
    """Rudra's protocols with a compressed push: hardsync is :func:`ps_sync`, n-softsync c = ⌊λ/n⌋."""
    if hardsync:
        return _ps_sync(prof, cl, servers, push, pull)
    lam = cl.ranks - servers
    if not 1 <= n <= max(1, lam):
        raise ValueError(f"n-softsync needs 1 <= n <= lambda = {lam}, got n={n}")
    return _ps_async(prof, cl, servers, max(1, lam // n), push, pull)


def _easgd(prof: Profile, cl: Cluster, servers: int = 1, period: int = 4, sync: bool = False,
          push: MessageCodec = None) -> Prediction:
    """EASGD with the elastic difference compressed point to point, the centre back dense."""
    w = workers_of(cl, servers, "EASGD")
    x = exchange(prof, cl, servers, push, None, w)
    by = ps_bytes(x, servers, "param_push", period)
    by["ps_control"]["sent"] += LENGTH_HEADER_BYTES * servers / period  # each shard's difference: its length first
    elastic = prof.update_s() / servers
    book = prof.bookkeeping_s()
    if not sync:
        line, lk = async_link(prof, cl, servers, x)
        return closed_loop(prof, line, lk, w, period, True, elastic, by, book)
    comp = max(worker_compute(prof, cl, w, lockstep=True))
    codec = x.worker_s + w * x.server_s
    line = p2p_line(prof, cl, servers)  # as the dense mode=sync row: the line, here too
    xfer = (C.ps_transfer_time(x.push, w, servers, line.bandwidth, line.latency)
            + C.ps_transfer_time(x.pull, w, servers, line.bandwidth, line.latency))
    step = comp + prof.update_s() + book + (codec + xfer + elastic) / period
    terms = {"compute": comp + prof.update_s(), "codec": codec / period, "exchange": xfer / period,
             "server_apply": elastic / period, "bookkeeping": book}
    kinds = {"compute": "compute", "codec": "host codec", "exchange": "server" if w > servers else "link",
             "server_apply": "server", "bookkeeping": "compute"}
    return Prediction(step, w * prof.batch / step, by, dominant(terms, kinds), terms)


def _reduce_measured(prof: Profile, codec: MessageCodec, part: str) -> dict:
    m = prof.codecs.get(codec.name, {}).get(part)
    if m is None:
        raise MissingMeasurement(f"the profile has no {part} codec measurement of compressor {codec.name!r}")
    return m


def _own_block_loop(prof: Profile, cl: Cluster, block: int) -> bool:
    """``testbed.block_parts`` took the trainer's own block loop (the profiled ranks here)."""
    return profiled_ranks_here(prof, cl) and not cl.stragglers and f"block/{block}" in prof.loops


def _bmuf(prof: Profile, cl: Cluster, block: int = 8, delta: MessageCodec = None) -> Prediction:
    """BMUF and local SGD with the block's averaged delta through the compressor's collective."""
    p = cl.ranks
    measured = _reduce_measured(prof, delta, "delta")
    codec = prof.message_codec_s(delta.name, "delta", p, cl.shares_cores)
    buckets = delta_buckets(prof.param_shapes)
    sent = sent_bytes(delta, [delta.payload(b) for b in buckets], p)
    xs = 0.0
    for m in measured["payloads"]:  # each collective of the reduce, at its recorded size
        xs += collective_s(prof, cl, m["collective"], m.get("dtype", "float32"), m["bytes"]) if cl.shares_cores \
            else line_s(cl, m["collective"], m["bytes"], cl.ar_bw, cl.bandwidth)
    here = testbed.block_parts(prof, cl, block, sent)  # this host: the dense block, the shaper's wait for ``sent``
    if here is not None:
        comp, upd, ar = here
        dense = collective_s(prof, cl, "allreduce", "float32", prof.model_bytes)
        if _own_block_loop(prof, cl, block):  # the loop holds the dense all-reduce once a block: it gives it back
            comp, xs = comp - dense / block, ar + xs
        else:  # the in-situ dense all-reduce (and the wait) in place of the compressor's collectives
            xs = ar - dense + xs
    else:
        comp = max(worker_compute(prof, cl, p, lockstep=True))
        upd = prof.update_s()
    book = prof.bookkeeping_s()
    step = comp + upd + book + (xs + codec + upd) / block
    terms = {"compute": comp, "update": upd + upd / block, "collective": xs / block, "codec": codec / block,
             "bookkeeping": book}
    kinds = {"compute": "compute", "update": "compute", "collective": "link", "codec": "host codec",
             "bookkeeping": "compute"}
    return Prediction(step, p * prof.batch / step, {delta.category: cat(sent / block, sent / block)},
                      dominant(terms, kinds), terms)


def _stanza(prof: Profile, cl: Cluster, fc_workers: int = 1, grad: MessageCodec = None,
           act: Optional[MessageCodec] = None) -> Prediction:
    """Stanza's schedule with the CONV ring through ``grad``'s collective and the boundary's
    activations and gradients through ``act`` (None: dense)."""
    n_f = fc_workers
    n_c = cl.ranks - n_f
    if n_c < 1 or n_f < 1:
        raise ValueError(f"Stanza needs 1 <= n_f < ranks, got n_f={n_f} of {cl.ranks}")
    dense_x = stanza_inputs(prof, testbed.stanza_line(prof, cl))  # the dense row's line (the host's, behind buckets)
    _reduce_measured(prof, grad, "conv")
    conv_buckets = conv_bucket_numels(prof)  # the CONV group's DDP buckets, each through the compressor
    conv_payloads = [grad.payload([(n,)]) for n in conv_buckets]
    conv_payload = sum(conv_payloads)
    conv_codec = prof.message_codec_s(grad.name, "conv", cl.ranks, cl.shares_cores) if n_c > 1 else 0.0
    a_bytes, enc, dec = dense_x.s * dense_x.a * dense_x.b, 0.0, 0.0
    if act is not None:
        enc, dec = _p2p(prof, act, dense_x.a * dense_x.b, cl.ranks, cl.shares_cores)
        a_bytes = act.payload([(dense_x.a * dense_x.b,)])
    # the schedule on the payloads: the activations' floats and a conv part whose ring carries the
    # compressor's bytes (an all-gather of n bytes as the ring of n_c(n + 8)/2, the same bytes on the wire)
    ring_eq = conv_payload if grad.collective == "allreduce" else n_c * (conv_payload + 8 * len(conv_buckets)) / 2
    x = replace(dense_x, a=a_bytes / (dense_x.s * dense_x.b), p_c=ring_eq / dense_x.s)
    t = testbed.stanza_schedule(prof, cl, x, n_c, n_f)
    if t is None:
        t = st.parts(x, n_c, n_f)
        t["transfer"] += enc + dec
        t["allreduce_conv"] += conv_codec
        t = st.assemble(t)
    else:  # behind the buckets, the codecs in series: the CONV group's, and each piece's both ways
        t["allreduce_conv"] += conv_codec
        t["transfer"] += enc + dec
        t["step"] += conv_codec + (1 + t["pieces"]) * (enc + dec)
    ring = t["allreduce_conv"] - conv_codec
    ar = sent_bytes(grad, conv_payloads, n_c)
    by = st.stanza_conv_worker_bytes(prof.params_conv, prof.boundary, dense_x.b, n_c)
    by.update({"allreduce_conv": cat(ar, ar), "activations": cat(a_bytes, 0), "activation_grads": cat(0, a_bytes)})
    book = prof.bookkeeping_s()
    step = t["step"] + book
    terms = {"conv_compute": t["conv_compute"], "fc_compute": t["fc_compute"] * t["pieces"],
             "transfer": 2 * t["transfer"] * t["pieces"], "allreduce": ring + t["fc_exposed"],
             "codec": conv_codec, "update": t["update_conv"], "bookkeeping": book}
    kinds = {"conv_compute": "compute", "fc_compute": "compute", "update": "compute", "transfer": "link",
             "allreduce": "link", "codec": "host codec", "bookkeeping": "compute"}
    return Prediction(step, n_c * x.b / step, by, dominant(terms, kinds), terms)


# ---------------------------------------------------------------------------------------------
# The step-time functions the trainers' specs name, each with its crossover against itself dense

def ps_sync(prof: Profile, cl: Cluster, servers: int = 1, push: MessageCodec = None,
            pull: Optional[MessageCodec] = None) -> Prediction:
    """``ps/sync+<c>``: hardsync with a compressed push (and pull)."""
    return _crossed(_ps_sync(prof, cl, servers, push, pull), cl, lambda c: dense_ps.ps_sync(prof, c, servers),
                    lambda c: _ps_sync(prof, c, servers, push, pull))


def ps_async(prof: Profile, cl: Cluster, servers: int = 1, c: int = 1, push: MessageCodec = None,
             pull: Optional[MessageCodec] = None) -> Prediction:
    """``ps/async+<c>``: the asynchronous PS with a compressed push (and pull)."""
    return _crossed(_ps_async(prof, cl, servers, c, push, pull), cl, lambda k: dense_ps.ps_async(prof, k, servers, c),
                    lambda k: _ps_async(prof, k, servers, c, push, pull))


def staleness(prof: Profile, cl: Cluster, servers: int = 1, n: int = 1, hardsync: bool = False,
              push: MessageCodec = None, pull: Optional[MessageCodec] = None) -> Prediction:
    """``staleness/n=<n>+<c>``: Rudra's n-softsync (or hardsync) with a compressed push."""
    return _crossed(_staleness(prof, cl, servers, n, hardsync, push, pull), cl,
                    lambda c: dense_ps.staleness(prof, c, servers, n, hardsync),
                    lambda c: _staleness(prof, c, servers, n, hardsync, push, pull))


def easgd(prof: Profile, cl: Cluster, servers: int = 1, period: int = 4, sync: bool = False,
          push: MessageCodec = None) -> Prediction:
    """``easgd/<mode>+<c>``: EASGD with the elastic difference compressed."""
    return _crossed(_easgd(prof, cl, servers, period, sync, push), cl,
                    lambda c: dense_avg.easgd(prof, c, servers, period, sync),
                    lambda c: _easgd(prof, c, servers, period, sync, push))


def bmuf(prof: Profile, cl: Cluster, block: int = 8, delta: MessageCodec = None) -> Prediction:
    """``bmuf+<c>`` / ``local_sgd+<c>``: the block's delta through the compressor's collective."""
    return _crossed(_bmuf(prof, cl, block, delta), cl, lambda c: dense_avg.bmuf(prof, c, block),
                    lambda c: _bmuf(prof, c, block, delta))


def stanza(prof: Profile, cl: Cluster, fc_workers: int = 1, grad: MessageCodec = None,
           act: Optional[MessageCodec] = None) -> Prediction:
    """``stanza/n_f=<k>+<c>``: the CONV ring and the boundary's messages compressed."""
    return _crossed(_stanza(prof, cl, fc_workers, grad, act), cl, lambda c: dense_stanza.stanza(prof, c, fc_workers),
                    lambda c: _stanza(prof, c, fc_workers, grad, act))
