"""This machine as a cluster: where a row of the plan is a run on this host, the step-time functions
of :mod:`workbench.perfmodel.paradigms` ask here first, and use their formula for a cluster of hosts
where the answer is None.

A run here differs from one on a cluster of hosts in three ways:

- every rank computes on this host's cores (``Cluster.shares_cores``), so a synchronous step waits
  for the last rank the scheduler gets to (``Profile.sync_compute_s``), and a collective's cost is
  what the profile timed in the loop (:mod:`workbench.perfmodel.loopback`), not an α-β line;
- on loopback (``Cluster.shared_host``) communication takes the same cores as the backward and does
  not overlap it: a step is its compute, its collectives and what DDP's own loop adds
  (``loopback.ddp_overhead_s``); the PS rows take the in-loop line (``loopback.loop_link``);
- behind the emulated links (``Cluster.cores_shared``, ``Cluster.shaper_rate``) each transfer pays
  this host's part and then the token bucket's wait (:mod:`workbench.perfmodel.shaper`), which
  spends no CPU and overlaps backward as on a network.

Per paradigm (S_p the lockstep span of p ranks, AR_here a collective as the profile timed it):

- ``sync`` / ``compressed/<c>`` (:func:`dp_exposed_s`): on loopback T = S_p + Σ_i AR_here(bucket_i)
  + O_ddp + codec + U, O_ddp what DDP's own loop, timed by the profile, costs beyond the two
  (``loopback.ddp_overhead_s``); behind the emulated links T = S_p + Σ_i AR_here(bucket_i) + O_ddp
  + codec + U + E, E the token bucket's wait (``shaper.shaper_delay_s``) left after backward, and
  with more ranks than cores each collective the slower of its host part and the wire
  (``shaper.beyond_host_s``).
- ``ps/sync`` (:func:`ps_sync_exchange_s`): on loopback at the profiled ranks with one server, the
  hardsync loop's period beyond the workers' lockstep span; behind the emulated links, two phases
  behind the buckets whose host part is that loop's exchange.
- ``ps/async``, n-softsync, EASGD (:func:`ps_link`, ``loopback.loop_link``): on loopback at the
  profiled ranks the point-to-point line α', β' at which ``ps/async``'s queue cycles in the timed
  header-only and whole-model loops; behind the emulated links every message passes the buckets
  of both ends (what a bucket refilled while its direction idled goes at the host's speed, the
  rest at the rate), never faster than that in-loop line (``shaper.behind_shaper_s``), and a
  worker's link idles through its whole cycle but its own message out.
- ``bmuf`` / ``local_sgd`` (:func:`block_parts`): the trainer's own loop of a block, timed by the
  profile, and behind the emulated links the bucket's wait once a block.
- ``stanza`` (:func:`stanza_line`, :func:`stanza_schedule`): the in-loop line, and behind the
  emulated links ``shaper.stanza_behind_shaper``.
"""
from __future__ import annotations

from typing import Dict, Optional, Sequence, Tuple

from workbench.perfmodel import stanza as st
from workbench.perfmodel.cluster import Cluster, bucket_ready, exposed_after_backward, worker_compute
from workbench.perfmodel.loopback import (collective_s, ddp_overhead_s, loop_link, oversubscribed,  # noqa: F401
                                          profiled_ranks_here, ps_loop_s, steps_together, timed_collective_s,
                                          timed_here)
from workbench.perfmodel.profile.schema import Profile
from workbench.perfmodel.shaper import (ShapedLink, dp_wire_s, host_line, loopback_twin, ps_phase_s,
                                        shaper_delay_s, stanza_behind_shaper)


def shaped(cl: Cluster) -> bool:
    """The row's links are the emulated links' token buckets."""
    return cl.shaper_rate > 0


def dp_exposed_s(prof: Profile, cl: Cluster, comp: float, codec_s: Sequence[float], upd: float,
                 comm: Sequence[float], overhead: float, sent: Sequence[float], parts: Sequence[Sequence[tuple]],
                 numels: Sequence[float]) -> Optional[float]:
    """DDP's communication left exposed in a step on this host; None on a cluster of hosts.

    On loopback all of it, and what DDP's own loop adds (``overhead``). Behind the emulated links
    at the profiled ranks, the collectives' host part (timed in situ) takes the shared cores and
    never hides; what the shaper holds a collective beyond it spends no CPU and overlaps backward
    as on a link (``shaper.dp_wire_s``)."""
    if cl.shared_host:
        return sum(comm) + overhead
    if not timed_here(prof, cl):
        return None
    bwd = (1 - prof.fwd_share) * comp
    beyond = dp_wire_s(prof, cl, sent, parts, comp + sum(codec_s) + upd + sum(comm) + overhead)
    return sum(comm) + overhead + exposed_after_backward(bwd, beyond, numels, bucket_ready(prof))


def ps_sync_exchange_s(prof: Profile, cl: Cluster, workers: int, servers: int, comp: float,
                       apply: float) -> Optional[float]:
    """Hardsync's push and pull on this host; None on a cluster of hosts. On loopback at the
    profiled ranks with one server, the hardsync round timed in the loop beyond the workers'
    lockstep span; behind the emulated links, two phases behind the token buckets whose host part
    is that same loop's exchange where it was timed (``shaper.ps_phase_s``)."""
    loop = ps_loop_s(prof, cl, "sync", servers)
    if loop is not None:
        return max(0.0, loop - prof.sync_compute_s(workers) - apply)
    if not shaped(cl):
        return None
    here = ps_loop_s(prof, loopback_twin(cl), "sync", servers)
    host_s = max(0.0, here - prof.sync_compute_s(workers) - apply) / 2 if here is not None else None
    return 2 * ps_phase_s(prof, cl, workers, servers, comp + apply, host_s)


def ps_link(prof: Profile, cl: Cluster, servers: int) -> Optional[ShapedLink]:
    """The asynchronous PS exchange behind the emulated links' token buckets; None elsewhere."""
    return ShapedLink(prof, cl, servers) if shaped(cl) else None


def block_parts(prof: Profile, cl: Cluster, block: int, ring: float) -> Optional[Tuple[float, float, float]]:
    """BMUF's and local SGD's (compute, update, block all-reduce) seconds on this host; None on a
    cluster of hosts. The block all-reduce waits for the slowest rank's ``block`` local steps,
    and on a shared host the scheduler's unfairness evens out over a block only in part, so the
    lockstep span over-prices it. At the profiled ranks, the trainer's own loop of a block
    (``loops["block/<block>"]``: local steps with their update, then the block's end as the
    trainer runs it), or else the loop of ``block`` steps and a one-float all-reduce
    (``loops["aligned/<block>"]``) with the in-situ all-reduce; behind the emulated links the
    shaper's wait for the ring's ``ring`` bytes on top, once a block."""
    if not cl.shares_cores:
        return None
    timed = profiled_ranks_here(prof, cl) and not cl.stragglers
    own = prof.loops.get(f"block/{block}") if timed else None
    if own is not None:
        return own, 0.0, shaper_delay_s(cl, ring, block * own)  # the loop holds the updates
    loop = prof.loops.get(f"aligned/{block}") if timed else None  # profiles without the trainer's own loop
    comp = loop if loop is not None else max(worker_compute(prof, cl, cl.ranks, lockstep=True))
    upd = prof.update_s()
    ar = collective_s(prof, cl, "allreduce", "float32", prof.model_bytes)
    if timed_here(prof, cl):  # looked up, as in DDP's rows: the shaper waits on top, once a block
        ar += shaper_delay_s(cl, ring, block * (comp + upd) + ar)
    return comp, upd, ar


def stanza_line(prof: Profile, cl: Cluster) -> Cluster:
    """The link Stanza's activations and sub-group rings take: behind the emulated links this
    host's part alone (the shaper's wait is :func:`stanza_schedule`'s), on loopback at the
    profiled ranks the in-loop line, else ``cl`` itself."""
    return host_line(prof, cl) if shaped(cl) else loop_link(prof, cl)


def stanza_schedule(prof: Profile, cl: Cluster, x: st.StanzaInputs, n_c: int, n_f: int) -> Optional[Dict[str, float]]:
    """Stanza's schedule behind the emulated links' token buckets (``shaper.stanza_behind_shaper``);
    None elsewhere, where ``perfmodel.stanza.breakdown`` holds."""
    return stanza_behind_shaper(prof, cl, x, n_c, n_f) if shaped(cl) else None

