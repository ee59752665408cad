"""The parameter server (``trainer=ps``, ``trainer=staleness``): hardsync, asynchronous
(Downpour) and n-softsync, with S servers of ``cl.ranks`` and W = ranks − S workers.

- ``ps/sync`` (hardsync): T = C_W + 2·PS(M, W, S) + U/S + book (the slowest worker sets the pace:
  with stragglers, the largest C; PS the lockstep push or pull, ``collectives.ps_transfer_time``).
- ``ps/async`` and n-softsync (c = ⌊W/n⌋ gradients per update): a worker never waits for the
  others; the servers serve one exchange at a time, a closed queue
  (:func:`workbench.perfmodel.queueing.closed_loop`): T_i = C_W·f_i + d_i + 2·PS(M, 1, S) + U/(S·c)
  plus the wait at the servers, whose service is ``collectives.server_service_time`` + U/(S·c).

On this machine the exchange is :func:`workbench.perfmodel.testbed.ps_sync_exchange_s` (hardsync)
and the links are the in-loop line (``testbed.loop_link``) or the token buckets
(``testbed.ps_link``).
"""
from __future__ import annotations

from typing import Dict

from workbench.perfmodel import collectives as C
from workbench.perfmodel import testbed
from workbench.perfmodel.cluster import HEADER_BYTES, Cluster, Prediction, cat, dominant, worker_compute
from workbench.perfmodel.profile.schema import Profile
from workbench.perfmodel.queueing import LineLink, closed_loop


def ps_bytes(prof: Profile, servers: int, push: str = "grad_push", every: int = 1) -> Dict[str, Dict[str, float]]:
    """A worker's bytes per step: the model out (``push``) and back, a header per server each way,
    every ``every`` steps."""
    m = prof.model_bytes
    return {push: cat(m / every, 0), "param_pull": cat(0, m / every),
            "ps_control": cat(HEADER_BYTES * servers / every, HEADER_BYTES * servers / every)}


def workers_of(cl: Cluster, servers: int, what: str = "a parameter server") -> int:
    w = cl.ranks - servers
    if w < 1:
        raise ValueError(f"{what} with {servers} servers needs more than {servers} ranks, got {cl.ranks}")
    return w


def ps_sync(prof: Profile, cl: Cluster, servers: int = 1) -> Prediction:
    """Hardsync: every worker's gradient, then one update, then every worker pulls."""
    w = workers_of(cl, servers)
    comp = max(worker_compute(prof, cl, w, lockstep=True))
    apply = prof.update_s() / servers
    xfer = testbed.ps_sync_exchange_s(prof, cl, w, servers, comp, apply)
    if xfer is None:
        xfer = 2 * C.ps_transfer_time(prof.model_bytes, w, servers, cl.bandwidth, cl.latency)
    book = prof.bookkeeping_s()
    step = comp + xfer + apply + book
    terms = {"compute": comp, "push_pull": xfer, "server_apply": apply, "bookkeeping": book}
    kinds = {"compute": "compute", "push_pull": "link", "server_apply": "server", "bookkeeping": "compute"}
    if w > servers:  # incast: the servers' links, not the workers', carry the exchange
        kinds["push_pull"] = "server"
    return Prediction(step, w * prof.batch / step, ps_bytes(prof, servers), dominant(terms, kinds), terms)


def exchanges(prof: Profile, cl: Cluster, workers: int, servers: int, per_exchange_steps: int, local_update: bool,
              per_update: float, bytes_: Dict[str, Dict[str, float]], book: float = 0.0) -> Prediction:
    """Workers that exchange with the servers without waiting for each other, every
    ``per_exchange_steps`` steps (``queueing.closed_loop``): on ``cl``'s α-β line, or behind this
    host's token buckets (``testbed.ps_link``)."""
    link = testbed.ps_link(prof, cl, servers) or LineLink(prof, cl, servers)
    return closed_loop(prof, cl, link, workers, per_exchange_steps, local_update, per_update, bytes_, book)


def ps_async(prof: Profile, cl: Cluster, servers: int = 1, c: int = 1) -> Prediction:
    """Asynchronous (Downpour, c = 1) or n-softsync (c = ⌊λ/n⌋ gradients per update) PS: a pushing
    worker is answered at once; a server pays the optimizer once per c gradients."""
    w = workers_of(cl, servers)
    return exchanges(prof, testbed.loop_link(prof, cl, servers), w, servers, 1, False,
                     prof.update_s() / (servers * max(1, c)), ps_bytes(prof, servers), prof.bookkeeping_s())


def staleness(prof: Profile, cl: Cluster, servers: int = 1, n: int = 1, hardsync: bool = False) -> Prediction:
    """Rudra's protocols: hardsync is ``ps_sync``; n-softsync updates after c = ⌊λ/n⌋ gradients."""
    if hardsync:
        return ps_sync(prof, cl, servers)
    lam = cl.ranks - servers
    if not 1 <= n <= max(1, lam):
        raise ValueError(f"n-softsync needs 1 <= n <= lambda = {lam}, got n={n}")
    return ps_async(prof, cl, servers, c=max(1, lam // n))
