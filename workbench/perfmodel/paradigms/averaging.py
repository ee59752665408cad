"""Model averaging: elastic averaging SGD (``trainer=easgd``), BMUF and local SGD (``trainer=bmuf``).

- ``easgd``: local steps (C_W + U), and every τ steps an exchange of M with the servers, queued at
  the servers as ``ps/async``'s are (:func:`workbench.perfmodel.paradigms.ps.exchanges`);
  ``mode=sync`` waits for the slowest worker: T = C_W + U + book + (2·PS(M, W, S) + U/S)/τ.
- ``bmuf`` / ``local_sgd``: T = C_p + U + book + (AR(M, p) + U)/B: local steps, and every ``block``
  steps one all-reduce of the flat model plus the block update (≈ U). On this machine the block's
  parts are :func:`workbench.perfmodel.testbed.block_parts`.
"""
from __future__ import annotations

from workbench.perfmodel import collectives as C
from workbench.perfmodel import testbed
from workbench.perfmodel.cluster import Cluster, Prediction, cat, dominant, line_s, worker_compute
from workbench.perfmodel.paradigms.ps import workers_of, exchanges, ps_bytes
from workbench.perfmodel.profile.schema import Profile


def easgd(prof: Profile, cl: Cluster, servers: int = 1, period: int = 4, sync: bool = False) -> Prediction:
    """Local SGD steps; every ``period`` steps each worker swaps its parameters with the centre."""
    w = workers_of(cl, servers, "EASGD")
    by = ps_bytes(prof, servers, push="param_push", every=period)
    elastic = prof.update_s() / servers  # x̃ += α(x_i − x̃): about one optimizer pass over the shard
    book = prof.bookkeeping_s()
    if not sync:
        return exchanges(prof, testbed.loop_link(prof, cl, servers), w, servers, period, True, elastic, by, book)
    comp = max(worker_compute(prof, cl, w, lockstep=True))
    xfer = 2 * C.ps_transfer_time(prof.model_bytes, w, servers, cl.bandwidth, cl.latency)
    step = comp + prof.update_s() + book + (xfer + elastic) / period
    terms = {"compute": comp + prof.update_s(), "exchange": xfer / period, "server_apply": elastic / period,
             "bookkeeping": book}
    kinds = {"compute": "compute", "exchange": "server" if w > servers else "link", "server_apply": "server",
             "bookkeeping": "compute"}
    return Prediction(step, w * prof.batch / step, by, dominant(terms, kinds), terms)


def bmuf(prof: Profile, cl: Cluster, block: int = 8) -> Prediction:
    """BMUF and local SGD: local steps, one all-reduce of the flat model per block."""
    p = cl.ranks
    ring = C.allreduce_bytes(prof.model_bytes, p)
    here = testbed.block_parts(prof, cl, block, ring)
    if here is not None:
        comp, upd, ar = here
    else:  # the block all-reduce waits for the slowest rank's local steps
        comp = max(worker_compute(prof, cl, p, lockstep=True))
        upd = prof.update_s()
        ar = line_s(cl, "allreduce", prof.model_bytes, cl.ar_bw, cl.bandwidth)
    book = prof.bookkeeping_s()
    step = comp + upd + book + (ar + upd) / block  # the block update touches every parameter about once
    n = ring / block
    terms = {"compute": comp, "update": upd + upd / block, "allreduce": ar / block, "bookkeeping": book}
    kinds = {"compute": "compute", "update": "compute", "allreduce": "link", "bookkeeping": "compute"}
    return Prediction(step, p * prof.batch / step, {"allreduce": cat(n, n)}, dominant(terms, kinds), terms)
