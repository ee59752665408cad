"""This host's cores as the profile timed them: the rows whose ranks are the profiled ranks on this
machine (loopback, or the emulated links here) read the profile's own timings instead of an α-β
line, because there a collective's or a message's cost is the scheduler's (a blocking receive
waits for a core while the other ranks compute), not the link's (docs/planner.md).

- :func:`timed_collective_s`: a collective timed in situ, after a lockstep backward;
- :func:`ddp_overhead_s`: what DDP's own loop costs beyond its parts;
- :func:`ps_loop_s` and :func:`loop_link`: the parameter server's loop, and the point-to-point
  line α', β' at which its queue cycles in it.

Only :mod:`workbench.perfmodel.testbed` and :mod:`workbench.perfmodel.shaper` use these.
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Callable, List, Optional

from workbench.perfmodel.cluster import Cluster, line_s
from workbench.perfmodel.profile.schema import Profile
from workbench.perfmodel.queueing import LineLink, closed_loop, increasing_root


def oversubscribed(prof: Profile, cl: Cluster) -> bool:
    """More ranks than the profile's host has cores: a rank's collective then spends much of its
    in-situ time waiting for a core (:func:`workbench.perfmodel.shaper.beyond_host_s`). A profile
    that does not say its cores counts as not oversubscribed."""
    return cl.ranks > int(prof.machine.get("cores") or cl.ranks)


def timed_here(prof: Profile, cl: Cluster) -> bool:
    """The row's collectives are the ones the profile timed: this host's ranks, as many as profiled."""
    return bool(cl.shares_cores and cl.ranks == prof.ranks and prof.collectives)


def profiled_ranks_here(prof: Profile, cl: Cluster) -> bool:
    """The row runs the profiled ranks on this host at the profile's own speed, on loopback or
    behind the emulated links: the loops the profile timed hold its host work."""
    return cl.shares_cores and cl.ranks == prof.ranks and prof.speedup == 1.0


def loop_here(prof: Profile, cl: Cluster) -> bool:
    """The row is a loop the profile timed (``Profile.loops``): loopback, the profiled ranks, the
    profile's own speed."""
    return cl.shared_host and profiled_ranks_here(prof, cl)


def timed_collective_s(prof: Profile, cl: Cluster, collective: str, dtype: str, nbytes: float) -> Optional[float]:
    """Seconds of one collective of ``nbytes`` as the profile timed it (in situ, after a lockstep
    backward) when the row's ranks are the ones profiled on this host (loopback, or emulated links
    here, whose shaper the caller adds); None elsewhere, where the α-β formulas price it."""
    if timed_here(prof, cl):
        return prof.collective_s(collective, dtype, nbytes)
    return None


def collective_s(prof: Profile, cl: Cluster, collective: str, dtype: str, nbytes: float) -> float:
    """:func:`timed_collective_s`, or the α-β line where the profile did not time it."""
    here = timed_collective_s(prof, cl, collective, dtype, nbytes)
    return here if here is not None else line_s(cl, collective, nbytes, cl.ar_bw, cl.bandwidth)


def steps_together(prof: Profile, cl: Cluster, compressor: Optional[str], comm: List[float],
                   parts: List[list]) -> tuple:
    """The step's collectives timed together in the loop (``Profile.beyond_step_s``) re-align the
    ranks once, where each timed alone paid that wait again: their total shared out over the
    buckets as their own timings (``comm``, and each message's host part, the first of each tuple
    in ``parts``). Unchanged where the profile did not time this row's step."""
    together = prof.beyond_step_s(f"collectives/{compressor or 'sync'}") if timed_here(prof, cl) else None
    if together is None or not comm:
        return comm, parts
    total = sum(comm)
    f = together / total if total > 0 else 1.0
    comm = [together * (c / total if total > 0 else 1 / len(comm)) for c in comm]
    parts = [[(m[0] * f, *m[1:]) for m in msgs] for msgs in parts]
    return comm, parts


def ddp_overhead_s(prof: Profile, cl: Cluster, compressor: Optional[str] = None) -> float:
    """What DDP's reducer adds to a step on this host beyond the lockstep span, the step's
    collectives timed in the loop and, with a compressor, its codec timed with every rank at once:
    the profile's loop of that step (``Profile.loops["ddp"]``, or ``["compressed/<c>"]``, DDP with
    the compressor's hook; a profile without it: DDP's, the codec aside) less those parts, on this
    host at the profiled ranks; 0 elsewhere (on a link, at other rank counts, on other hardware).

    On loopback it may fall below 0, where the loop hid part of those collectives behind backward
    (DDP's reducer issues a bucket while backward still runs): the step is the loop, at least the
    span. Behind the emulated links here only its part above 0 counts: the reducer's and the
    hook's host work is the same there, but what the loop hid behind backward is the shaper's to
    hide (``exposed_after_backward``). ``sync`` and the compressors both pay it, so that their
    crossover on one host compares like with like (docs/notes/2026-12-06-perfmodel-history.md)."""
    own = f"compressed/{compressor}" if compressor is not None else "ddp"
    name = own if own in prof.loops else "ddp"
    loop = prof.loops.get(name)
    if loop is None or not prof.collectives or not profiled_ranks_here(prof, cl):  # beyond the collectives it timed
        return 0.0
    parts = prof.beyond_step_s(f"collectives/{compressor}" if name != "ddp" else "collectives/sync")
    if parts is None:
        parts = sum(prof.collective_s("allreduce", "float32", 4 * bk["numel"]) or 0.0 for bk in prof.buckets)
    if name != "ddp":  # the hook's loop holds the codec too
        parts += sum(prof.codec_s(compressor, i, prof.ranks, True) for i in range(len(prof.buckets)))
    rest = loop - prof.sync_compute_s(prof.ranks) - parts
    return max(-parts, rest) if cl.shared_host else max(0.0, rest)


def ps_loop_s(prof: Profile, cl: Cluster, mode: str, servers: int = 1) -> Optional[float]:
    """The parameter server's loop as the profile timed it on this host (``Profile.loops``
    ``"ps/<mode>"``: "sync", "async", "async/header"; seconds per worker step), when the row is that
    loop: loopback, the profiled ranks, one server, the profile's own speed; else None."""
    return prof.loops.get(f"ps/{mode}") if servers == 1 and loop_here(prof, cl) else None


def loop_link(prof: Profile, cl: Cluster, servers: int = 1) -> Cluster:
    """``cl`` with this host's point-to-point line *in the loop* where the profile timed the PS
    loops here for a row of ``servers`` (:func:`ps_loop_s`), else ``cl`` itself: the latency α' at
    which ``ps/async``'s queue (c = 1, no stragglers) cycles in the header-only loop's period, then
    the bandwidth β' at which it cycles in the whole model's. Two measured periods, two
    parameters. Every point-to-point transfer of a row on this host takes them: the PS exchanges
    (n-softsync's fewer updates, EASGD's longer think time, stragglers) and Stanza's activations
    and sub-group all-reduces. What they hold that the idle ping-pong's α and β do not: a blocking
    receive waits for a core while the other ranks compute, and the server's copies share the
    cores with them (docs/planner.md)."""
    header, full = ps_loop_s(prof, cl, "async/header", servers), ps_loop_s(prof, cl, "async", servers)
    if header is None or full is None:
        return cl
    plain, w = replace(cl, stragglers=()), cl.ranks - 1
    empty = replace(prof, params_conv=0, params_fc=0)  # headers only: no payload, an empty update

    def period(p: Profile, lat: float, per_byte: float) -> float:
        c = replace(plain, latency=lat, bandwidth=1 / per_byte if per_byte > 0 else math.inf)
        return closed_loop(p, c, LineLink(p, c, 1), w, 1, False, p.update_s(), {}).step_s

    def solve(h: Callable[[float], float], start: float) -> float:
        if h(0.0) >= 0:
            return 0.0
        hi = start
        while h(hi) < 0 and hi < 1e6 * start:
            hi *= 2
        return increasing_root(h, 0.0, hi, 60)
    lat = solve(lambda a: period(empty, a, 0.0) - header, max(cl.latency, 1e-6))
    per_byte = solve(lambda x: period(prof, lat, x) - full, 1 / cl.bandwidth)
    return replace(cl, latency=lat, bandwidth=1 / per_byte if per_byte > 0 else math.inf)
