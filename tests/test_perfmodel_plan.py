"""The one performance model (workbench/perfmodel: collectives, paradigms, profile) and the planner
(workbench/plan/): collective costs against the meter's byte formulas, every step-time function
on hand-computed cases, the ranking flip between a compute-bound and a link-bound network, bad
input (one line, exit 2, nothing profiled), and ``--verify --json`` on the small CNN with 3 ranks
(predicted bytes equal measured bytes exactly).

    PYTHONPATH=. .venv/bin/python -m pytest -q tests/test_perfmodel_plan.py -m "not slow"
"""
import dataclasses
import json
import math
import statistics
from pathlib import Path

import pytest

from perfmodel_fixtures import synthetic_profile
from workbench import meter
from workbench.perfmodel import collectives as C
from workbench.perfmodel import paradigms as P
from workbench.perfmodel import queueing as Q
from workbench.perfmodel import shaper
from workbench.perfmodel import stanza as st
from workbench.perfmodel.profile import LOOP_PASSES, Profile

PROF = synthetic_profile()
M = PROF.model_bytes  # 40 000 bytes
U = 1e-8 * 10_000  # optimizer over every parameter
GBIT = 1e9 / 8


# -- collectives ---------------------------------------------------------------------------------

def test_collective_times_by_hand():
    assert C.allreduce_time(1e8, 4, 1e9, 1e-3) == pytest.approx(6e-3 + 0.15)
    assert C.allgather_time(1e6, 4, 1e9, 1e-3) == pytest.approx(3e-3 + 3e-3)
    assert C.allreduce_time(1e8, 1, 1e9, 1e-3) == C.allgather_time(1e8, 1, 1e9) == 0.0
    assert C.p2p_time(1e6, 1e9, 1e-3) == pytest.approx(2e-3)
    # incast: 6 workers on 2 servers; a server takes each worker's header and half-payload in turn
    assert C.ps_transfer_time(1e6, 6, 2, 1e9, 1e-3) == pytest.approx(6 * (2e-3 + 0.5e-3))
    assert C.ps_transfer_time(1e6, 1, 2, 1e9, 1e-3) == pytest.approx(2e-3 + 1e-3)  # the worker's own link
    # a server's busy time per exchange: the push in; a reply that fits the send buffer drains behind
    # the next push, and only what does not fit holds the server
    assert C.server_service_time(1e6, 2, 1e9, 1e-3) == pytest.approx(2e-3 + 0.5e-3)
    assert C.server_service_time(1e7, 1, 1e9, 1e-3, send_buffer=4e6) == pytest.approx(2e-3 + 1e-2 + 6e-3)
    assert C.SEND_BUFFER == 4 * 2**20
    with pytest.raises(ValueError):
        C.ps_transfer_time(1e6, 0, 1, 1e9)


@pytest.mark.parametrize("n", [4, 1000, 605224, 4 * 12345 + 4])
@pytest.mark.parametrize("p", [1, 2, 3, 4, 7])
def test_collective_bytes_are_the_meters(n, p):
    assert C.allreduce_bytes(n, p) == (meter.allreduce_bytes(n, p) if p > 1 else 0)
    # Meter.all_gather_varlen: (p-1) * own + 8 (p-1) sent (the int64 lengths exchanged first)
    assert C.allgather_varlen_bytes(n, p) == (p - 1) * n + 8 * (p - 1)
    assert C.allgather_bytes(n, p) == (p - 1) * n


def test_the_ring_formula_is_written_once():
    """perfmodel.stanza prices the ring through collectives."""
    x = st.StanzaInputs(t_c=1e-3, t_f=1e-4, a=50, p_c=1000, p_f=9000, b=10, beta=1e6, alpha=1e-4, beta_allreduce=5e5)
    assert st.allreduce_time(4000, 3, x) == C.allreduce_time(4000, 3, 5e5, 1e-4)
    assert st.ring_allreduce_bytes(4001, 3) == meter.allreduce_bytes(4001, 3)


# -- step-time functions, by hand -------------------------------------------------------------------

def net(ranks, bw=GBIT, **kw):
    return P.Cluster(ranks, bw, 5e-5, **kw)


def test_sync_hides_every_bucket_but_the_last_behind_backward_on_a_network():
    """DDP launches a bucket when backward has produced its gradients and runs one at a time; the
    last bucket is ready only when backward ends, so a one-bucket model hides nothing."""
    import dataclasses
    comp = 10 * (1e-3 + 1e-4)  # one rank per host: concurrency 1
    bwd = 0.75 * comp
    ar = C.allreduce_time(M, 4, GBIT, 5e-5)
    p = P.sync(PROF, net(4))  # the fixture's one bucket
    assert p.step_s == pytest.approx(comp + ar + U)
    assert p.samples_per_s == pytest.approx(40 / p.step_s) and p.bottleneck == "compute"
    # two buckets, FC's 9000 parameters first (ready at 0.9 of backward), then conv's 1000
    two = dataclasses.replace(PROF, buckets=[{"numel": 9000, "shapes": [[9000]]}, {"numel": 1000, "shapes": [[1000]]}])
    a1, a2 = C.allreduce_time(36_000, 4, GBIT, 5e-5), C.allreduce_time(4_000, 4, GBIT, 5e-5)
    assert P.sync(two, net(4)).step_s == pytest.approx(comp + max(0.9 * bwd + a1, bwd) + a2 - bwd + U)
    slow = P.sync(two, net(4, bw=1e5))  # link-bound: the first bucket's exchange outlasts backward
    s1, s2 = C.allreduce_time(36_000, 4, 1e5, 5e-5), C.allreduce_time(4_000, 4, 1e5, 5e-5)
    assert slow.step_s == pytest.approx(0.25 * comp + 0.9 * bwd + s1 + s2 + U)
    assert slow.bottleneck == "link"
    assert P.exposed_after_backward(1.0, [0.1, 0.1], [1, 1]) == pytest.approx(0.1)  # 0.5+0.1, then 1.0+0.1
    assert P.exposed_after_backward(1.0, [0.8, 0.1], [1, 1]) == pytest.approx(0.4)  # 0.5+0.8, then +0.1
    # when the profile timed DDP's hook calls, they say when a bucket is ready, not its parameters:
    # the first bucket handed over at 0.2 of backward hides behind the rest of it
    assert P.exposed_after_backward(1.0, [0.8, 0.1], [1, 1], ready=[0.2, 1.0]) == pytest.approx(0.1)  # 1.0, +0.1
    assert P.exposed_after_backward(1.0, [0.9, 0.1], [1, 1], ready=[0.2, 1.0]) == pytest.approx(0.2)  # 1.1, +0.1
    timed = dataclasses.replace(two, buckets=[{**two.buckets[0], "ready": 0.3}, {**two.buckets[1], "ready": 1.0}])
    assert P.bucket_ready(two) is None and P.bucket_ready(timed) == [0.3, 1.0]
    assert P.sync(timed, net(4, bw=1e5)).step_s == pytest.approx(0.25 * comp + 0.3 * bwd + s1 + s2 + U)
    assert p.bytes == {"allreduce": {"sent": meter.allreduce_bytes(M, 4), "recv": meter.allreduce_bytes(M, 4)}}


def test_sync_on_a_shared_host_pays_concurrency_and_does_not_overlap():
    cl = P.Cluster(4, 1e9, 1e-5, allreduce_bandwidth=5e8, shared_host=True)
    comp = 10 * (4e-3 + 4e-4)  # four ranks computing at once on one host
    assert P.sync(PROF, cl).step_s == pytest.approx(comp + C.allreduce_time(M, 4, 5e8, 1e-5) + U)
    # beyond the profiled ranks the host time-shares
    assert PROF.t_c(8) == pytest.approx(8e-3)


def test_synchronous_protocols_on_a_shared_host_wait_for_the_last_rank_asynchronous_ones_do_not():
    """With the profile's lockstep spans (the last of k ranks' backward) and its collectives timed
    at their sizes, synchronous paradigms on this host pay the span, a codec slows as the span
    does, and a collective costs what it measured (BMUF's block too: it waits for the slowest rank);
    free-running paradigms (PS async) keep the mean rate, and other rank counts or hosts keep the
    α-β line."""
    import dataclasses
    from workbench.plan import cluster_for
    import workbench
    span = (0.012, 0.03, 0.05, 0.08)
    small = M // 32
    prof = dataclasses.replace(PROF, span_at=span, collectives={f"allreduce:float32:{M}": 4e-3,
                                                                 f"allreduce:float32:{small}": 1e-3})
    assert prof.sync_compute_s(4) == 0.08 and prof.sync_compute_s(4, batch=20) == pytest.approx(0.16)
    assert prof.host_slowdown(4) == pytest.approx(0.08 / 0.012) and PROF.host_slowdown(4) == pytest.approx(4)
    assert prof.collective_s("allreduce", "float32", (M + small) / 2) == pytest.approx(2.5e-3)
    assert prof.collective_s("allreduce", "float32", 1) == 1e-3 and prof.collective_s("allreduce", "float32", 2 * M) == 8e-3
    assert prof.collective_s("allgather", "uint8", M) is None
    cl = cluster_for(workbench.compose([]), prof, 4, "loopback", 5e-5)
    assert P.sync(prof, cl).step_s == pytest.approx(0.08 + 4e-3 + U)
    assert P.compressed(prof, cl, "powersgd").step_s == pytest.approx(0.08 + 1e-3 + 1e-3 * 0.08 / 0.012 + U)
    # a codec timed with every rank encoding at once costs that at the profiled ranks, and scales to
    # other rank counts as the span does; on cores of its own it costs its time alone
    together = {**prof.codecs["powersgd"], "codec_shared_s": [9e-3]}
    both = dataclasses.replace(prof, codecs={**prof.codecs, "powersgd": together})
    assert both.codec_s("powersgd", 0, 4, True) == 9e-3 and both.codec_s("powersgd", 0, 4, False) == 1e-3
    assert both.codec_s("powersgd", 0, 2, True) == pytest.approx(9e-3 * 0.03 / 0.08)
    assert prof.codec_s("powersgd", 0, 4, True) == pytest.approx(1e-3 * 0.08 / 0.012)  # none timed at once
    assert P.compressed(both, cl, "powersgd").step_s == pytest.approx(0.08 + 1e-3 + 9e-3 + U)
    # a step's collectives timed together in the loop (its period beyond the span) stand for the
    # sum of their timings alone, which re-aligned the ranks once each
    tog = dataclasses.replace(prof, loops={"collectives/powersgd": 0.08 + 5e-4, "collectives/sync": 0.08 + 3e-3})
    assert tog.beyond_step_s("collectives/powersgd") == pytest.approx(5e-4) and tog.beyond_step_s("ddp") is None
    assert P.compressed(tog, cl, "powersgd").step_s == pytest.approx(0.08 + 5e-4 + 1e-3 * 0.08 / 0.012 + U)
    assert P.sync(tog, cl).step_s == pytest.approx(0.08 + 3e-3 + U)
    assert P.ddp_overhead_s(dataclasses.replace(tog, loops={**tog.loops, "ddp": 0.08 + 5e-3}), cl) == pytest.approx(2e-3)
    assert P.sync(tog, net(4)).step_s == P.sync(PROF, net(4)).step_s  # on a network: the α-β line
    # with the loop of the step and a one-float all-reduce timed (``loops["aligned"]``), the collectives
    # cost their loop's period beyond it, not beyond the span: a span longer than the loop (ResNet-18
    # on a VM without AVX2) priced a 44.7 MB all-reduce at 0 s
    slow = dataclasses.replace(prof, loops={"collectives/sync": 0.075, "aligned": 0.07})
    assert slow.beyond_step_s("collectives/sync") == pytest.approx(5e-3)
    assert dataclasses.replace(prof, loops={"collectives/sync": 0.075}).beyond_step_s("collectives/sync") == 0.0
    assert P.sync(slow, cl).terms["communication"] == pytest.approx(5e-3)
    assert P.sync(dataclasses.replace(slow, loops={**slow.loops, "ddp": 0.078}), cl).step_s == pytest.approx(0.08 + U)
    assert P.ps_sync(prof, cl).terms["compute"] == 0.05  # 3 workers in lockstep
    assert P.ps_async(prof, cl).terms["compute"] == pytest.approx(10 * (3e-3 + 3e-4))  # the mean rate
    assert P.bmuf(prof, cl).terms["compute"] == 0.08  # a block ends with the slowest rank's steps
    assert P.bmuf(prof, cl).terms["allreduce"] == pytest.approx(4e-3 / 8)
    three = cluster_for(workbench.compose([]), prof, 3, "loopback", 5e-5)  # not the profiled ranks
    assert P.sync(prof, three).step_s == pytest.approx(0.05 + C.allreduce_time(M, 3, PROF.beta_allreduce, PROF.alpha) + U)
    # DDP's own loop, timed here: what it costs beyond the span and the bucket's all-reduce joins
    # every DDP row on this host (a compressor's hook runs in the same reducer), not BMUF's
    ddp = dataclasses.replace(prof, loops={"ddp": 0.08 + 4e-3 + 2e-3})
    assert P.ddp_overhead_s(ddp, cl) == pytest.approx(2e-3)
    assert P.sync(ddp, cl).step_s == pytest.approx(0.08 + 4e-3 + 2e-3 + U)
    assert P.compressed(ddp, cl, "powersgd").step_s == pytest.approx(P.compressed(prof, cl, "powersgd").step_s + 2e-3)
    assert P.bmuf(ddp, cl).step_s == P.bmuf(prof, cl).step_s
    assert P.ddp_overhead_s(ddp, three) == 0.0
    # a loop shorter than the span and the all-reduce hid the all-reduce behind backward: the step
    # is the loop, never less than the span
    hid = dataclasses.replace(ddp, loops={"ddp": 0.08 + 1e-3})
    assert P.ddp_overhead_s(hid, cl) == pytest.approx(-3e-3) and P.sync(hid, cl).step_s == pytest.approx(0.08 + 1e-3 + U)
    short = dataclasses.replace(ddp, loops={"ddp": 0.01})
    assert P.ddp_overhead_s(short, cl) == pytest.approx(-4e-3) and P.sync(short, cl).step_s == pytest.approx(0.08 + U)
    # behind the emulated links on this host its part above 0 joins too, in series with the wire
    # (the shaper hides what backward leaves); what a loop hid behind backward does not carry over
    emulated = cluster_for(workbench.compose([]), ddp, 4, "emulated:1gbit", 5e-5)
    assert P.ddp_overhead_s(ddp, emulated) == pytest.approx(2e-3)
    assert P.sync(ddp, emulated).step_s > P.sync(prof, emulated).step_s + 2e-3 - 1e-12
    assert P.ddp_overhead_s(hid, emulated) == 0.0 and P.sync(hid, emulated).step_s == P.sync(prof, emulated).step_s
    # a compressor's own loop (DDP with its hook), timed here: what it costs beyond the span, the
    # step's collectives together and the codec timed at once joins that compressor's row, in
    # place of DDP's; other compressors keep DDP's, and other rank counts neither
    hook = dataclasses.replace(both, loops={"ddp": 0.08 + 4e-3 + 2e-3, "collectives/powersgd": 0.08 + 5e-4,
                                            "compressed/powersgd": 0.08 + 5e-4 + 9e-3 + 3e-3})
    assert P.ddp_overhead_s(hook, cl, "powersgd") == pytest.approx(3e-3)
    assert P.compressed(hook, cl, "powersgd").step_s == pytest.approx(0.08 + 5e-4 + 9e-3 + 3e-3 + U)
    assert P.ddp_overhead_s(hook, cl, "topk") == pytest.approx(2e-3) and P.ddp_overhead_s(hook, cl) == pytest.approx(2e-3)
    assert P.ddp_overhead_s(hook, three, "powersgd") == 0.0
    # on a network (one rank per host) nothing changes
    assert P.sync(prof, net(4)).step_s == P.sync(PROF, net(4)).step_s


def test_emulated_links_here_share_the_cores_add_the_shaper_and_overlap():
    """emulated:<rate>: this host's ranks (compute at concurrency p) behind shaped links. Where the
    profile timed this host's collectives (its rank count) a collective costs the slower of that, on
    the shared cores, and the idle stack plus the token bucket's wait for what its refilled burst
    does not cover, whose part beyond the host's overlaps backward as on a link; elsewhere a byte costs the host's loopback time plus the shaper's 8/rate."""
    import dataclasses
    import workbench
    from workbench.network.emulated import PAYLOAD_PER_FRAME, tbf_burst
    from workbench.plan import cluster_for, parse_bandwidths
    assert parse_bandwidths("loopback,emulated:100mbit") == ["loopback", "emulated:100mbit"]
    cl = cluster_for(workbench.compose([]), PROF, 4, "emulated:100mbit", 5e-5)
    rate = 12.5e6 * 1448 / 1514  # tc counts frames: 1448 payload bytes of TCP in each 1514-byte frame
    assert PAYLOAD_PER_FRAME == 1448 / 1514
    assert cl.bandwidth == pytest.approx(1 / (1 / rate + 1 / PROF.beta))
    assert cl.ar_bw == pytest.approx(1 / (1 / rate + 1 / PROF.beta_allreduce))
    assert cl.latency == PROF.alpha and cl.concurrency(4) == 4
    burst = 50_000 * 1448 / 1514
    assert cl.shaper_rate == pytest.approx(rate) and tbf_burst(1e8) == 50_000
    assert cl.shaper_burst == pytest.approx(burst)
    comp = 10 * (4e-3 + 4e-4)
    ar = C.allreduce_time(M, 4, cl.ar_bw, PROF.alpha)
    assert not PROF.collectives  # no timings of this host's collectives: the α-β line, one bucket exposed
    assert P.sync(PROF, cl).step_s == pytest.approx(comp + ar + U)
    # with the in-situ timing of the one bucket's all-reduce, 2 ms, on a host with a core per rank
    here = dataclasses.replace(PROF, collectives={f"allreduce:float32:{M}": 2e-3}, machine={"cores": 4})
    sent = meter.allreduce_bytes(M, 4)  # 60 000 bytes per rank
    assert P.shaper_delay_s(cl, sent, 1.0) == pytest.approx((sent - burst) / rate)  # a full bucket
    assert P.shaper_delay_s(cl, sent, 1e-3) == pytest.approx((sent - 1e-3 * rate) / rate)  # refilled 1 ms
    wait = P.shaper_delay_s(cl, sent, comp + 2e-3 + U)
    assert not P.oversubscribed(here, cl) and not P.oversubscribed(PROF, cl)  # cores unknown: not
    assert P.sync(here, cl).step_s == pytest.approx(comp + 2e-3 + wait + U)  # host part, then the wire
    # 4 ranks on 2 cores: the all-reduce is the slower of two stages of one pipeline, its host part
    # (2 ms in situ) and the idle stack's α-β time plus the bucket's wait (P.beyond_host_s)
    crowded = dataclasses.replace(here, machine={"cores": 2})
    assert P.oversubscribed(crowded, cl)
    stack = C.allreduce_time(M, 4, PROF.beta_allreduce, PROF.alpha)
    assert stack + wait < 2e-3  # 100 Mbit/s: the bucket holds back 12 KB, 1 ms; the host part is the slower
    assert P.sync(crowded, cl).step_s == pytest.approx(comp + 2e-3 + U)
    slow = cluster_for(workbench.compose([]), PROF, 4, "emulated:10mbit", 5e-5)
    wait = P.shaper_delay_s(slow, sent, comp + 2e-3 + U)
    assert wait > 30e-3  # 10 Mbit/s: the wire is the slower stage and the host part hides behind it
    assert P.sync(crowded, slow).step_s == pytest.approx(comp + stack + wait + U)
    assert P.sync(here, slow).step_s == pytest.approx(comp + 2e-3 + wait + U)
    assert P.beyond_host_s([[(2e-3, stack, sent)]], wait) == [pytest.approx(stack + wait - 2e-3)]
    # two collectives in turn each take their own slower stage; the wait is shared by their bytes
    assert P.beyond_host_s([[(1e-3, 0.0, 1.0), (0.0, 0.0, 3.0)]], 4e-3) == [pytest.approx(0.0 + 3e-3)]
    assert P.sync(here, dataclasses.replace(cl, ranks=3)).step_s != P.sync(here, cl).step_s  # other ranks: α-β
    fast = cluster_for(workbench.compose([]), PROF, 4, "emulated:10gbit", 5e-5)  # the burst covers it
    assert P.sync(here, fast).step_s == pytest.approx(comp + 2e-3 + U)


def test_compressed_adds_its_codec_and_sends_its_payload():
    p = P.compressed(PROF, net(4, bw=1e5), "powersgd")
    comp = 10 * 1.1e-3
    payload = M // 32
    assert p.step_s == pytest.approx(comp + C.allreduce_time(payload, 4, 1e5, 5e-5) + 1e-3 + U)
    assert p.bytes == {"compressed": {"sent": meter.allreduce_bytes(payload, 4), "recv": meter.allreduce_bytes(payload, 4)}}
    g = P.compressed(PROF, net(4), "topk")
    assert g.bytes["compressed"]["sent"] == 3 * (payload + 8)
    assert g.crossover_bps is not None and 0 < g.crossover_bps < math.inf


def test_ps_sync_waits_for_the_slowest_worker_and_the_servers_links():
    comp = 10 * 1.1e-3
    p = P.ps_sync(PROF, net(4), servers=1)  # 3 workers + 1 server
    assert p.step_s == pytest.approx(comp + 2 * 3 * (2 * 5e-5 + M / GBIT) + U)
    assert p.samples_per_s == pytest.approx(30 / p.step_s)
    assert p.bytes == {"grad_push": {"sent": M, "recv": 0}, "param_pull": {"sent": 0, "recv": M},
                       "ps_control": {"sent": 32, "recv": 32}}
    straggler = P.ps_sync(PROF, net(4, stragglers=((1, 2.0, 0.01),)))
    assert straggler.step_s == pytest.approx(p.step_s + comp + 0.01)
    two = P.ps_sync(PROF, net(4), servers=2)
    assert two.bytes["ps_control"] == {"sent": 64, "recv": 64}
    with pytest.raises(ValueError):
        P.ps_sync(PROF, net(1))


def test_ps_behind_token_buckets_pays_what_the_refilled_burst_does_not_cover():
    """On the emulated links (both directions of every link a token bucket) a lockstep push sends M
    through each worker's bucket and W·M/S through each server's, starting with what refilled while
    the link idled (compute, update, the other phase): ps/sync at 1 Gbit/s, 3 workers, 1 server."""
    import workbench
    from workbench.plan import cluster_for
    prof = synthetic_profile(params_conv=100_000, params_fc=100_000)  # M = 800 kB
    m = prof.model_bytes
    cl = cluster_for(workbench.compose([]), prof, 4, "emulated:1gbit", 5e-5)
    R, B, host = cl.shaper_rate, cl.shaper_burst, 1 / (1 / cl.bandwidth - 1 / cl.shaper_rate)
    assert host == pytest.approx(prof.beta)
    comp, apply = prof.sync_compute_s(3), prof.update_s()
    assert comp + apply > B / R  # the buckets refill fully between phases: the hand case below
    worker = 2 * prof.alpha + m / host + (m - B) / R
    server = 3 * (2 * prof.alpha + m / host) + (3 * m - B) / R
    p = P.ps_sync(prof, cl)
    assert p.step_s == pytest.approx(comp + 2 * max(worker, server) + apply, rel=1e-9)
    # a link with no shaper (a real network) charges every byte at the line rate, as before
    real = P.ps_sync(prof, net(4))
    assert real.step_s == pytest.approx(real.terms["compute"] + 2 * C.ps_transfer_time(m, 3, 1, GBIT, 5e-5) + apply)
    # asynchronous, one worker: nothing queues, and both directions refill fully during compute
    one = cluster_for(workbench.compose([]), prof, 2, "emulated:1gbit", 5e-5)
    a = P.ps_async(prof, one)
    c1 = prof.compute_s(1)
    assert c1 > B / R
    assert a.step_s == pytest.approx(c1 + 2 * (2 * prof.alpha + m / host + (m - B) / R) + apply, rel=1e-9)
    # many workers on a slow link: the server's bucket never refills between pushes (the gap, 1/X − D,
    # the fixed point of the service it sets, tends to 0) and the servers serve 1/D of the empty bucket
    slow = cluster_for(workbench.compose([]), prof, 17, "emulated:50mbit", 5e-5)
    q = P.ps_async(prof, slow)
    d_empty = 2 * prof.alpha + m / host + m / slow.shaper_rate + apply
    d_full = d_empty - slow.shaper_burst / slow.shaper_rate
    assert 0.97 / d_empty < q.samples_per_s / prof.batch <= 1 / d_full and q.bottleneck == "server"


def mva_residence(Z: float, D: float, N: int) -> float:
    """The textbook single-class MVA recursion: residence at the one queue with N customers."""
    q = 0.0
    for n in range(1, N + 1):
        r = D * (1 + q)
        q = n * r / (Z + r)
    return r


def test_ps_async_is_a_closed_queue_at_the_servers():
    """Each worker's cycle alone is compute + push + reply + update; the servers are a FIFO queue of
    service D (the push in, the update); exact MVA gives the cycle with queueing, within the closed
    queue's bounds. Hand-computed with the single-class recursion R(n) = D(1 + Q(n−1))."""
    comp = 10 * 1.1e-3
    cycle = comp + 2 * (2 * 5e-5 + M / GBIT) + U
    D = 2 * 5e-5 + M / GBIT + U
    Z = cycle - D
    r = mva_residence(Z, D, 3)
    p = P.ps_async(PROF, net(4))  # 3 workers, 1 server
    assert p.step_s == pytest.approx(Z + r) and p.samples_per_s == pytest.approx(10 * 3 / (Z + r))
    assert max(Z + D, 3 * D) <= p.step_s <= Z + 3 * D
    # a slow server link: the server saturates, throughput tends to 1/D and waiting dominates
    slow = P.ps_async(PROF, net(17, bw=1e6))
    d_slow = 2 * 5e-5 + M / 1e6 + U
    assert 0.95 / d_slow < slow.samples_per_s / 10 <= 1 / d_slow and slow.bottleneck == "server"
    # a straggler: two classes; it cycles slower, the others faster than without it, and exact MVA
    # agrees with Schweitzer's approximation to a few per cent
    s = P.ps_async(PROF, net(4, stragglers=((1, 3.0, 0.0),)))
    assert s.step_s < p.step_s and s.samples_per_s < p.samples_per_s
    think = [Z, Z + 2 * comp, Z]
    exact_x, exact_r = P.mva(think, D)
    old, Q.MVA_POPULATIONS = Q.MVA_POPULATIONS, 0
    try:
        approx_x, _ = P.mva(think, D)
    finally:
        Q.MVA_POPULATIONS = old
    assert exact_x[0] == exact_x[2] > exact_x[1] and sum(exact_x) * 10 == pytest.approx(s.samples_per_s)
    assert sum(approx_x) == pytest.approx(sum(exact_x), rel=0.05)
    # the measured case of docs/planner.md: 2 workers, D = 101 ms at the server, Z = 106 ms
    x2, r2 = P.mva([0.106, 0.106], 0.101)
    assert 0.106 + r2[0] == pytest.approx(0.106 + 0.101 * (1 + 0.101 / 0.207))  # 256 ms


def test_softsync_pays_the_update_once_per_c_gradients():
    lam = 3
    one = P.staleness(PROF, net(lam + 1), n=lam)  # n = lambda: c = 1, asynchronous
    assert one.step_s == pytest.approx(P.ps_async(PROF, net(lam + 1)).step_s)
    n1 = P.staleness(PROF, net(lam + 1), n=1)  # c = 3: a third of the update per gradient
    comp = 10 * 1.1e-3
    alone = comp + 2 * (2 * 5e-5 + M / GBIT) + U / 3
    D = 2 * 5e-5 + M / GBIT + U / 3
    assert n1.step_s == pytest.approx(alone - D + mva_residence(alone - D, D, lam))
    assert n1.step_s < one.step_s
    assert P.staleness(PROF, net(lam + 1), hardsync=True).step_s == P.ps_sync(PROF, net(lam + 1)).step_s
    with pytest.raises(ValueError):
        P.staleness(PROF, net(lam + 1), n=lam + 1)


def test_ps_rows_on_this_host_take_the_loop_the_profile_timed():
    """On loopback at the profiled ranks with one server, ``ps/sync`` is the hardsync loop the
    profile timed beyond the workers' lockstep span, and the asynchronous rows and Stanza take the
    in-loop point-to-point line: the α' at which ``ps/async``'s queue cycles in the header-only
    loop, then the β' at which it cycles in the whole model's. n-softsync and EASGD then follow by
    hand on that line; other ranks or a speed-up keep the idle α-β (an emulated link here takes the
    line as its floor: the next test)."""
    import dataclasses
    from workbench.plan import cluster_for
    import workbench
    prof = dataclasses.replace(PROF, loops={"ps/async": 0.05, "ps/async/header": 0.04, "ps/sync": 0.06})
    cfg = workbench.compose([])
    here = cluster_for(cfg, prof, 4, "loopback", 5e-5)
    link = P.loop_link(prof, here)
    lat, bw, comp = link.latency, link.bandwidth, prof.compute_s(3)
    assert lat > PROF.alpha and bw < PROF.beta  # the loop is slower than the idle ping-pong says

    def queued(steps, local, per_update, n=M):
        alone = steps * (comp + local) + 2 * C.ps_transfer_time(n, 1, 1, bw, lat) + per_update
        D = C.server_service_time(n, 1, bw, lat) + per_update
        return alone - D + mva_residence(alone - D, D, 3)
    assert queued(1, 0, 0, n=0) == pytest.approx(0.04, rel=1e-9)  # headers only, an empty update
    assert queued(1, 0, U) == pytest.approx(0.05, rel=1e-9)
    assert P.ps_async(prof, here).step_s == pytest.approx(0.05, rel=1e-9)
    assert P.staleness(prof, here, n=1).step_s == pytest.approx(queued(1, 0, U / 3))  # c = 3
    assert P.easgd(prof, here, period=4).step_s == pytest.approx(queued(4, U, U) / 4)
    assert P.stanza(prof, here).step_s == pytest.approx(st.step_time(P.stanza_inputs(prof, link), 3, 1))
    assert P.stanza(prof, here).step_s > P.stanza(PROF, here).step_s
    # hardsync: the loop, and a straggler's extra compute on top of it
    assert P.ps_sync(prof, here).step_s == pytest.approx(0.06)
    slow = dataclasses.replace(here, stragglers=((1, 2.0, 0.0),))
    assert P.ps_sync(prof, slow).step_s == pytest.approx(0.06 + prof.sync_compute_s(3))
    assert P.ps_async(prof, slow).step_s != pytest.approx(0.05)  # the straggler changes the queue, not the line
    # loops faster than the workers' compute alone: no exchange cost at all
    fast = dataclasses.replace(PROF, loops={"ps/async": comp / 2, "ps/async/header": comp / 2})
    assert P.loop_link(fast, here).latency == 0.0 and P.loop_link(fast, here).bandwidth == math.inf
    assert P.loop_link(dataclasses.replace(PROF, loops={"ps/async": 0.05}), here) is here  # both loops, or none
    # elsewhere the α-β exchange, as without the loops
    for cl in (cluster_for(cfg, prof, 3, "loopback", 5e-5), cluster_for(cfg, prof, 3, "emulated:1gbit", 5e-5), net(4)):
        assert P.ps_async(prof, cl).step_s == P.ps_async(PROF, cl).step_s
        assert P.ps_sync(prof, cl).step_s == P.ps_sync(PROF, cl).step_s
    assert P.ps_async(prof.with_speedup(2.0), here).step_s == P.ps_async(PROF.with_speedup(2.0), here).step_s
    assert P.ps_async(prof, here, servers=2).step_s == P.ps_async(PROF, here, servers=2).step_s
    # the planner keeps these step times and takes only the staleness from the simulator there
    from workbench.plan import plan
    rows = {r["paradigm"]: r for r in plan([], bandwidths=["loopback"], workers=[4], profile=prof,
                                           only=["ps", "staleness/n=1"]).to_dict("records")}
    assert rows["ps/async"]["predicted_step_s"] == pytest.approx(0.05, rel=1e-9)
    assert rows["ps/async"]["simulated"] is True and rows["ps/async"]["mean_staleness"] > 0
    assert rows["staleness/n=1"]["predicted_step_s"] == pytest.approx(queued(1, 0, U / 3))
    assert rows["ps/sync"]["predicted_step_s"] == pytest.approx(0.06)


def test_ps_async_behind_the_shapers_here_never_beats_the_in_loop_line():
    """Behind the emulated links at the profiled ranks a PS message has two stages: the loopback's
    in-loop line on the same cores, and the token bucket's wait. Where the ranks outnumber the cores
    it takes the slower of this host's idle stack plus the wait and that line; with a core per rank
    the line and the wait in series. A fast link's exchange is the in-loop one either way; a slow
    link's is the bucket's wait plus the line with a core per rank, as without the loops otherwise."""
    import dataclasses
    import workbench
    from workbench.plan import cluster_for
    cfg = workbench.compose([])
    prof = dataclasses.replace(PROF, loops={"ps/async": 0.05, "ps/async/header": 0.04, "ps/sync": 0.06})
    line = P.loop_link(prof, cluster_for(cfg, prof, 4, "loopback", 5e-5))
    in_loop = 2 * (2 * line.latency + M / line.bandwidth)  # push and pull, a header and a payload each
    fast = cluster_for(cfg, prof, 4, "emulated:10gbit", 5e-5)
    idle = 2 * (2 * prof.alpha + M / prof.beta)
    assert M < fast.shaper_burst and idle < in_loop  # the burst holds the model: only the stacks differ
    shared = dataclasses.replace(prof, machine={"cores": 2})  # 4 ranks on 2 cores
    for pr in (prof, shared):
        a = P.ps_async(pr, fast)
        assert a.terms["exchange"] == pytest.approx(in_loop + U, rel=1e-9)
        assert P.easgd(pr, fast, period=4).terms["exchange"] == pytest.approx((in_loop + U) / 4, rel=1e-9)
        assert P.staleness(pr, fast, n=1).terms["exchange"] == pytest.approx(in_loop + U / 3, rel=1e-9)
    assert P.ps_async(PROF, fast).terms["exchange"] == pytest.approx(idle + U, rel=1e-9)
    slow = cluster_for(cfg, prof, 4, "emulated:10mbit", 5e-5)
    # the bucket's wait dominates where the cores are shared; with a core per rank the line adds to it
    assert P.ps_async(shared, slow).step_s == P.ps_async(dataclasses.replace(shared, loops={}), slow).step_s
    assert P.ps_async(prof, slow).step_s > P.ps_async(PROF, slow).step_s
    wait, msg = 0.01, 2 * line.latency + M / line.bandwidth
    assert shaper.behind_shaper_s(slow, line, M, wait, series=True) == pytest.approx(msg + wait, rel=1e-12)
    assert shaper.behind_shaper_s(slow, line, M, wait) == pytest.approx(max(msg, 2 * slow.latency + M / prof.beta + wait))
    # hardsync behind a fast link: the loop's own exchange, as on loopback (its host part; no wait)
    here = cluster_for(cfg, prof, 4, "loopback", 5e-5)
    assert P.ps_sync(prof, fast).step_s == pytest.approx(P.ps_sync(prof, here).step_s, rel=1e-9)
    assert P.ps_sync(prof, fast).step_s > P.ps_sync(PROF, fast).step_s  # the idle stack alone was faster
    # not the profiled ranks, or another speed: the idle stack, as before
    for cl, pr in ((cluster_for(cfg, prof, 3, "emulated:10gbit", 5e-5), prof), (fast, prof.with_speedup(2.0))):
        assert P.ps_async(pr, cl).step_s == P.ps_async(dataclasses.replace(pr, loops={}), cl).step_s
        assert P.ps_sync(pr, cl).step_s == P.ps_sync(dataclasses.replace(pr, loops={}), cl).step_s


def test_ps_hardsync_behind_the_shapers_here_adds_the_wait_to_the_loop_on_a_core_per_rank():
    """One worker and one server, a core each, behind links whose bucket does not hold the model:
    the hardsync loop's exchange (timed on loopback) plus each phase's wait for what the refilled
    burst does not cover. The asynchronous loop of one worker is the same loop: its link idles
    through the update, the pull and its compute, not the compute alone, so it refills as fully
    (measured on the Xeon VM pinned, 2026-12-05: both 6.7–7.2 ms behind 1 Gbit/s)."""
    import dataclasses
    import workbench
    from workbench.plan import cluster_for
    cfg = workbench.compose([])
    base = synthetic_profile(params_conv=50_000, params_fc=50_000)  # M = 400 kB
    m, comp, apply = base.model_bytes, base.sync_compute_s(1), base.update_s()
    loop = comp + apply + 3e-3  # the hardsync round on loopback: 3 ms of exchange
    prof = dataclasses.replace(base, ranks=2, machine={"cores": 2},
                               loops={"ps/sync": loop, "ps/async": loop, "ps/async/header": comp + 1e-3})
    cl = cluster_for(cfg, prof, 2, "emulated:100mbit", 5e-5)
    R, B = cl.shaper_rate, cl.shaper_burst
    assert B < m and comp + apply > B / R  # a full bucket each phase, which does not hold the model
    p = P.ps_sync(prof, cl)
    assert p.step_s == pytest.approx(comp + 3e-3 + 2 * (m - B) / R + apply + prof.bookkeeping_s(), rel=1e-9)
    a = P.ps_async(prof, cl)
    assert a.step_s == pytest.approx(p.step_s, rel=0.05)
    # 2 ranks on 1 core: the slower of the idle stack plus the wait, and the loop's part
    one = dataclasses.replace(prof, machine={"cores": 1})
    host_s, stack = 1.5e-3, 2 * prof.alpha + m / prof.beta
    q = P.ps_sync(one, cl)
    assert q.step_s == pytest.approx(comp + 2 * max(stack + (m - B) / R, host_s) + apply + prof.bookkeeping_s(), rel=1e-9)


def test_bmuf_and_easgd_amortise_their_exchange():
    comp = 10 * 1.1e-3
    b = P.bmuf(PROF, net(4), block=8)
    assert b.step_s == pytest.approx(comp + U + (C.allreduce_time(M, 4, GBIT, 5e-5) + U) / 8)
    assert b.bytes["allreduce"]["sent"] == meter.allreduce_bytes(M, 4) / 8
    e = P.easgd(PROF, net(4), period=4, sync=True)
    assert e.step_s == pytest.approx(comp + U + (2 * C.ps_transfer_time(M, 3, 1, GBIT, 5e-5) + U) / 4)
    assert e.bytes["param_push"]["sent"] == M / 4 and e.bytes["ps_control"]["recv"] == 8
    a = P.easgd(PROF, net(4), period=4)  # 3 workers queue at the centre every 4 local steps
    alone = 4 * (comp + U) + 2 * (2 * 5e-5 + M / GBIT) + U
    D = 2 * 5e-5 + M / GBIT + U
    assert a.step_s == pytest.approx((alone - D + mva_residence(alone - D, D, 3)) / 4)
    assert comp + U + (2 * (2 * 5e-5 + M / GBIT) + U) / 4 < a.step_s  # the queue costs something


def test_bmuf_on_this_host_pays_the_loop_that_realigns_once_a_block():
    """On the profiled ranks of one host, BMUF's and local SGD's compute is the profile's loop of a
    block of free-running steps and a one-float all-reduce (``loops["aligned/<block>"]``), not the
    lockstep span every step; elsewhere, or for another block, the span as before."""
    from dataclasses import replace
    prof = replace(PROF, ranks=4, span_at=(0.01, 0.02, 0.03, 0.04), loops={"aligned/8": 0.025})
    here = P.Cluster(4, 1e9, 1e-5, allreduce_bandwidth=5e8, shared_host=True)
    with_loop, other_block = P.bmuf(prof, here, block=8), P.bmuf(prof, here, block=4)
    assert with_loop.terms["compute"] == 0.025 and other_block.terms["compute"] == pytest.approx(0.04)
    ar = 4 * other_block.terms["allreduce"]  # the model's all-reduce, a quarter of it a step
    assert with_loop.step_s == pytest.approx(other_block.step_s - 0.015 + (ar + U) * (1 / 8 - 1 / 4))
    assert P.bmuf(prof, replace(here, ranks=3), block=8).terms["compute"] == pytest.approx(0.03)  # not profiled
    assert P.bmuf(prof, net(4), block=8).terms["compute"] == pytest.approx(10 * 1.1e-3)  # a rank per host


def test_bmuf_on_this_host_pays_its_own_block_loop_and_the_shapers_wait_once_a_block():
    """Where the profile timed the trainer's own block (``loops["block/<B>"]``: local steps with
    their update, then the block's end as the trainer runs it) that loop is the step, with the
    training loop's bookkeeping; behind the emulated links the token bucket's wait for the block's
    all-reduce, refilled over the block, once a block. Bytes as before."""
    from dataclasses import replace

    import workbench
    from workbench.plan import cluster_for
    book = 4e-4
    prof = replace(PROF, ranks=4, span_at=(0.01, 0.02, 0.03, 0.04),
                   loops={"block/8": 0.03, "aligned/8": 0.025, "bookkeeping": book})
    here = P.Cluster(4, 1e9, 1e-5, allreduce_bandwidth=5e8, shared_host=True)
    b = P.bmuf(prof, here, block=8)
    assert b.step_s == pytest.approx(0.03 + book) and b.terms["compute"] == 0.03
    assert b.bytes == P.bmuf(replace(prof, loops={}), here, block=8).bytes
    assert P.bmuf(prof, here, block=4).terms["compute"] == 0.04  # another block: not timed, the span
    slow = cluster_for(workbench.compose([]), prof, 4, "emulated:10mbit", 5e-5)
    ring = C.allreduce_bytes(M, 4)
    wait = (ring - slow.shaper_burst) / slow.shaper_rate
    assert 8 * 0.03 * slow.shaper_rate > slow.shaper_burst  # the bucket refills over the block
    assert P.bmuf(prof, slow, block=8).step_s == pytest.approx(0.03 + book + wait / 8, rel=1e-9)


def _bmuf_block_loop_on_ranks(rank, world, block):
    import torch

    from workbench.meter import Meter
    from workbench.trainers.bmuf import block_loop
    torch.manual_seed(0)
    model = torch.nn.Linear(64, 10)
    before = [p.detach().clone() for p in model.parameters()]
    meter = Meter(60)
    x, y = torch.randn(8, 64), torch.randint(0, 10, (8,))

    def step():
        model.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(x), y).backward()
    seconds = block_loop(block)(model, step, meter, torch.device("cpu"), lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9),
                                12)
    calls = meter.totals().get("allreduce", {}).get("calls", 0)
    same = all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    return seconds, calls, same


def test_the_bmuf_block_loop_runs_the_trainers_block_end_and_puts_the_model_back():
    """``trainers.bmuf.block_loop``: on every rank, blocks of local steps, each block ended by one
    all-reduce of the flat model (the trainer's ``block_sync``), timed per step and agreed on by
    the ranks; the profiled model's weights are as they were."""
    from dist_utils import run_ranks
    out = run_ranks(_bmuf_block_loop_on_ranks, 2, 4, timeout_s=60)
    (s0, c0, same0), (s1, c1, same1) = out[0], out[1]
    assert s0 == s1 and s0 > 0 and c0 == c1 and c0 >= 3 and same0 and same1


def test_the_profile_times_the_block_of_each_planned_bmuf_variant():
    """The trainers bring their loops (``ParadigmSpec.profile_loops``): a BMUF or local SGD variant
    planned with block B adds ``block/<B>`` to the loops the profile times, others add none."""
    import workbench
    from workbench.plan import profile_loops
    base = workbench.compose([])
    cfgs = [workbench.compose(o) for o in (["trainer=bmuf", "trainer.block=4"], ["trainer=local_sgd"], ["trainer=sync"])]
    loops = profile_loops(base, {}, cfgs)
    assert {k for k in loops if k.startswith("block/")} == {"block/4", "block/8"}
    assert not [k for k in profile_loops(base, {}, cfgs[2:]) if k.startswith("block/")]


def _block_loop_on_ranks(rank, world, block):
    import time as t

    from workbench.meter import Meter
    from workbench.perfmodel.profile import block_loop_s
    steps = []
    seconds = block_loop_s(Meter(60), "cpu", lambda: (steps.append(1), t.sleep(0.002 * (rank + 1))), 12, block)
    return seconds, len(steps)


def test_the_block_loop_waits_for_the_slowest_ranks_block():
    """``profile.block_loop_s``: ``block`` steps then a one-float all-reduce, per step, agreed on by
    the ranks; the slower rank (4 ms a step against 2) sets the period of both."""
    from dist_utils import run_ranks
    out = run_ranks(_block_loop_on_ranks, 2, 4, timeout_s=60)
    (s0, n0), (s1, n1) = out[0], out[1]
    assert s0 == s1 and n0 == n1 and n0 % 4 == 0 and n0 >= 4 * 3  # whole blocks, at least 3 of them
    assert 0.004 <= s0 < 0.05  # at least the slower rank's sleep; the all-reduce waits for it


def test_every_paradigm_pays_the_loops_own_bookkeeping_once_a_step():
    """The training loop's own seconds a step (the next batch, the meter's window, the records:
    ``Profile.bookkeeping_s``) add to every synchronous step once, and to an asynchronous worker's
    think time, where the queue at the servers may absorb part of it."""
    from dataclasses import replace
    book = 4e-4
    prof = replace(PROF, loops={"bookkeeping": book})
    cl = net(4)
    for fn, kw in [(P.sync, {}), (P.compressed, {"compressor": "powersgd"}), (P.ps_sync, {}), (P.bmuf, {"block": 8}),
                   (P.easgd, {"sync": True}), (P.stanza, {"fc_workers": 1}), (P.stanza, {"fc_workers": 2})]:
        with_, without = fn(prof, cl, **kw), fn(PROF, cl, **kw)
        assert with_.step_s == pytest.approx(without.step_s + book), fn.__name__
        assert with_.terms["bookkeeping"] == book and without.terms["bookkeeping"] == 0.0
    comp = 10 * 1.1e-3
    a = P.ps_async(prof, cl)  # 3 workers, think time Z = compute + bookkeeping, D at the server
    D = 2 * 5e-5 + M / GBIT + U
    alone = comp + book + 2 * (2 * 5e-5 + M / GBIT) + U
    assert a.step_s == pytest.approx(alone - D + mva_residence(alone - D, D, 3))
    assert P.ps_async(PROF, cl).step_s < a.step_s < P.ps_async(PROF, cl).step_s + book + 1e-12


def _bookkeeping_on_ranks(rank, world, cfg):
    from workbench.meter import Meter
    from workbench.trainers.bookkeeping import bookkeeping_loop_s
    return bookkeeping_loop_s(cfg, None, None, Meter(60), "cpu", None, 20)


def test_the_bookkeeping_loop_times_the_real_loop_around_an_empty_step():
    """``trainers.bookkeeping.bookkeeping_loop_s`` runs ``Trainer.run`` itself (the real loader, meter and
    records) around a step that does nothing, on every rank, and agrees on the slowest rank's mean."""
    import workbench
    from dist_utils import run_ranks
    cfg = workbench.compose(["model=small_cnn", "cluster.nproc=2", "trainer.progress=false"])
    out = run_ranks(_bookkeeping_on_ranks, 2, cfg, timeout_s=60)
    assert out[0] == out[1] and 0 < out[0] < 0.05  # seconds a step: well under a step's compute here


def _update_timed_on_ranks(rank, world, cfg):
    """Which parameters had a gradient whenever the profile's optimizer stepped."""
    import torch
    from workbench import data as data_mod
    from workbench.meter import Meter
    from workbench.models import build_model
    from workbench.perfmodel.profile import measure_ranks
    spec = data_mod.DATASETS[cfg.data.name].spec(cfg.data)
    model = build_model(cfg, spec)
    seen = []

    class Recording(torch.optim.SGD):
        def step(self, closure=None):
            seen.append(sum(p.grad is not None for g in self.param_groups for p in g["params"]))
            return super().step(closure)
    cpu = torch.device("cpu")
    measure_ranks(model, spec, 4, Meter(60), cpu, cpu, 2, lambda ps: Recording(ps, lr=0.1, momentum=0.9), spans=False)
    return seen, len(list(model.parameters()))


def test_the_profiles_update_is_timed_with_every_parameters_gradient():
    """``u`` (the optimizer's seconds per parameter) times a step that updates every parameter, as
    a training step does: SGD skips a parameter without a gradient, and until profile v11 only the
    classifier's were left from the levels timed before it (ResNet-18: 5,130 of 11.2 M parameters)."""
    import workbench
    from dist_utils import run_ranks
    cfg = workbench.compose(["model=small_cnn", "cluster.nproc=2"])
    for seen, n in run_ranks(_update_timed_on_ranks, 2, cfg, timeout_s=60):
        assert seen and all(k == n for k in seen), (seen, n)


def test_stanza_is_perfmodel_stanza_on_the_profile():
    cl = net(4)
    x = P.stanza_inputs(PROF, cl)
    for n_f in (1, 2, 3):
        p = P.stanza(PROF, cl, n_f)
        assert p.step_s == pytest.approx(st.step_time(x, 4 - n_f, n_f))
        assert p.samples_per_s == pytest.approx(st.throughput(x, 4 - n_f, n_f))
    assert P.stanza(PROF, cl, 1).bytes == st.stanza_conv_worker_bytes(1000, 50, 10, 3)


def test_stanza_behind_token_buckets_hides_the_conv_rings_wait_behind_backward():
    """Behind the emulated links Stanza pays, as DDP does there, this host's part of every transfer
    in series and the token bucket's wait for what its refilled burst does not cover; the CONV
    group's DDP rings its buckets while the conv backward still runs, so the bucket's wait of the
    first hides behind the backward's remainder. With the loops timed, the host part is the
    loopback's in-loop line (the same cores and scheduler)."""
    import dataclasses
    import workbench
    from workbench.plan import cluster_for
    pc, pf = 100_000, 9000
    prof = synthetic_profile(params_conv=pc, params_fc=pf, buckets=[{"numel": pf + pc // 2, "shapes": []},
                                                                   {"numel": pc // 2, "shapes": []}])
    assert shaper.conv_bucket_numels(prof) == [pc // 2, pc // 2]  # the classifier fills the first bucket
    cfg = workbench.compose([])
    cl = cluster_for(cfg, prof, 4, "emulated:100mbit", 5e-5)
    host = shaper.host_line(prof, cl)
    assert host.bandwidth == pytest.approx(prof.beta) and host.ar_bw == pytest.approx(prof.beta_allreduce)
    assert host.latency == prof.alpha and host.shaper_rate == cl.shaper_rate
    x = P.stanza_inputs(prof, host)
    t = st.breakdown(x, 3, 1)
    conv, bwd, act = t["conv_compute"], 0.75 * t["conv_compute"], 4 * 50 * 10
    R, B = cl.shaper_rate, cl.shaper_burst
    assert 3 * act < B  # 2 KB of activations from each of 3 CONV workers pass in the burst, both ways
    d, f = t["transfer"], t["fc_compute"]
    fc_phase = d + f + max(3 * d, 2 * f + d)  # together in, then three gradients out one by one
    ring = meter.allreduce_bytes(4 * pc, 3)
    egress = P.shaper_delay_s(cl, ring, fc_phase + 0.25 * conv)  # idle since the activations left
    ingress = max(0.0, ring - min(B, B - act + R * bwd / 2)) / R  # just carried the gradient
    wire = max(egress, ingress)
    assert wire > bwd / 2  # the first bucket's wait outlasts the backward's second half
    exposed = max(bwd, bwd / 2 + wire / 2) + wire / 2 - bwd
    step = fc_phase + conv + t["allreduce_conv"] + exposed + t["update_conv"]
    assert P.stanza(prof, cl, 1).step_s == pytest.approx(step)
    assert exposed < wire  # the overlap pays: the old line charged all of it, and the shaper's 8/rate on every byte
    assert P.stanza(prof, cl, 1).step_s < st.step_time(P.stanza_inputs(prof, cl), 3, 1)
    # with the PS loops timed, the host part is the loopback's in-loop line at the same ranks
    looped = dataclasses.replace(prof, loops={"ps/async": 0.05, "ps/async/header": 0.04})
    line = P.loop_link(looped, cluster_for(cfg, looped, 4, "loopback", 5e-5))
    assert line.latency > prof.alpha and shaper.host_line(looped, cl).latency == pytest.approx(line.latency)
    assert shaper.host_line(looped, cl).bandwidth == pytest.approx(line.bandwidth)


def test_stanza_behind_token_buckets_shares_the_fc_workers_ingress_and_drains_the_rings():
    """Each emulated link is shaped both ways. k CONV workers' activations share the FC worker's
    one ingress, so they arrive together after k·A bytes; the last-served CONV worker's ingress has
    just carried its gradient when its ring starts (the small CNN behind 50 Mbit/s: a CONV worker's
    exchange took 26.5 ms and its ring 20 ms where one bucket per piece said 16 and 8)."""
    import workbench
    from workbench.plan import cluster_for
    cl = cluster_for(workbench.compose([]), synthetic_profile(), 3, "emulated:50mbit", 5e-5)
    R, B = cl.shaper_rate, cl.shaper_burst
    assert 20_000 < B < 30_000  # 25 KB of frames, in payload bytes
    assert P.shaper_after_s(cl, 75_000, 65_000) == pytest.approx(75_000 / R)  # a drained bucket
    assert P.shaper_after_s(cl, 75_000, 5_000) == pytest.approx((75_000 - (B - 5_000)) / R)  # some burst left
    assert P.shaper_after_s(cl, 75_000, 65_000, 1e-3) == pytest.approx((75_000 - R * 1e-3) / R)  # refilled 1 ms
    assert P.shaper_after_s(cl, 75_000, 65_000, 1.0) == pytest.approx((75_000 - B) / R)  # at most the burst
    pc, pf = 20_000, 130_000
    prof = synthetic_profile(t_c=1e-4, params_conv=pc, params_fc=pf, boundary=1024,
                             buckets=[{"numel": pc + pf, "shapes": []}])
    host = shaper.host_line(prof, cl)
    x = P.stanza_inputs(prof, host)
    t = st.parts(x, 2, 1)
    act, d, f, conv = 4 * 1024 * prof.batch, t["transfer"], t["fc_compute"], t["conv_compute"]
    arrive = d + (2 * act - B) / R  # both pieces through one ingress: slower than either egress
    assert arrive > d + P.shaper_delay_s(cl, act, conv)
    fc_phase = arrive + f + max(2 * d + (2 * act - B) / R, f + d)
    bwd = (1 - prof.fwd_share) * conv
    ring = meter.allreduce_bytes(4 * pc, 2)
    wire = max(ring - min(B, R * bwd), 0) / R  # the ingress drained by the gradient, refilled by backward
    assert wire > P.shaper_delay_s(cl, ring, fc_phase)
    step = fc_phase + conv + t["allreduce_conv"] + wire + t["update_conv"]
    assert P.stanza(prof, cl, 1).step_s == pytest.approx(step + prof.bookkeeping_s())


def test_speedup_divides_compute_only():
    fast = PROF.with_speedup(10.0)
    assert fast.compute_s(1) == pytest.approx(PROF.compute_s(1) / 10)
    assert P.sync(fast, net(4, bw=1e5)).bytes == P.sync(PROF, net(4, bw=1e5)).bytes


def test_a_host_that_drifted_slower_slows_every_loopback_prediction_alike_and_not_the_links():
    """``Profile.drifted``: the same host r times slower (bench planner's drift guard). Every second
    it measured is r times longer, so on this host's loopback each paradigm's step is r times the
    step; behind shaped links the shaper's wait is the cluster's, so less than r; bytes unchanged."""
    from workbench import analysis as an
    from workbench.plan import plan
    prof = synthetic_profile(ranks=3, codecs={c: synthetic_profile().codecs["powersgd"]
                                              for c in an.available_compressors() if c != "none"})
    before = {k: list(v["codec_s"]) for k, v in prof.codecs.items()}
    slow = prof.drifted(2.0)
    assert prof.codecs and {k: v["codec_s"] for k, v in prof.codecs.items()} == before  # the original untouched
    assert prof.drifted(1.0) is prof and slow.machine["drift"] == 2.0
    read = dataclasses.replace(prof, loops={"ddp": 0.02}, loop_passes={"ddp": [0.01, 0.02, 0.03]}).drifted(2.0)
    assert read.loops == {"ddp": 0.04} and read.loop_passes == {"ddp": pytest.approx([0.02, 0.04, 0.06])}  # readings too
    rows = lambda p, bw: plan([], bandwidths=[bw], workers=[3], profile=p).set_index("paradigm").sort_index()  # noqa: E731
    a, b = rows(prof, "loopback"), rows(slow, "loopback")
    assert len(a) > 10
    assert (b["predicted_step_s"] / a["predicted_step_s"]).tolist() == pytest.approx([2.0] * len(a))
    assert (b["predicted_bytes_per_step"] == a["predicted_bytes_per_step"]).all()
    a, b = rows(prof, "emulated:10mbit"), rows(slow, "emulated:10mbit")
    ratio = b["predicted_step_s"] / a["predicted_step_s"]
    link = a["bottleneck"] == "link"
    assert link.sum() >= 3 and (ratio[link] < 1.99).all() and ratio.between(1.0, 2.0 + 1e-9).all()
    assert (b["predicted_bytes_per_step"] == a["predicted_bytes_per_step"]).all()


def test_profile_round_trips_and_knows_its_model(tmp_path):
    path = PROF.save(tmp_path / "p.json")
    back = Profile.load(path)
    assert back == PROF
    assert back.matches({"model": "m", "input_shape": [1, 8, 8], "batch": 10}) is None
    assert "model=m" in back.matches({"model": "vgg16", "input_shape": (1, 8, 8), "batch": 10})


# -- the planner ----------------------------------------------------------------------------------

def test_ranking_flips_between_a_link_bound_and_a_compute_bound_network():
    from workbench.plan import plan
    df = plan([], bandwidths=["10mbit", "100gbit"], workers=[4], profile=PROF, only=["sync", "compressed/powersgd"])
    first = df[df["rank"] == 1].set_index("bandwidth")["paradigm"]
    assert first["10mbit"] == "compressed/powersgd"  # link-bound: 32x fewer bytes win
    assert first["100gbit"] == "sync"  # compute-bound: the codec's millisecond loses
    cross = df[df["paradigm"] == "compressed/powersgd"]["crossover_bps"].iloc[0]
    assert 1e7 < cross < 1e11
    assert set(df.columns) >= {"paradigm", "workers", "bandwidth_bps", "predicted_step_s", "predicted_samples_per_s",
                               "predicted_bytes_per_step", "bottleneck"}


def test_every_registered_paradigm_is_planned_with_the_analysis_labels():
    from workbench import analysis as an
    from workbench.plan import plan
    df = plan([], bandwidths=["1gbit"], workers=[3], profile=synthetic_profile(
        codecs={c: synthetic_profile().codecs["powersgd"] for c in an.available_compressors() if c != "none"}))
    labels = set(df["paradigm"])
    assert {"sync", "ps/sync", "ps/async", "staleness/n=1", "staleness/n=2", "stanza/n_f=1", "stanza/n_f=2",
            "compressed/powersgd", "compressed/topk", "easgd/async", "bmuf", "local_sgd"} <= labels
    # the same label workbench.analysis gives a run of that config
    assert an.paradigm_of({"cfg.trainer.name": "staleness", "cfg.trainer.protocol": "softsync", "cfg.trainer.n": 2}) == "staleness/n=2"
    assert an.paradigm_of({"cfg.trainer.name": "stanza", "cfg.trainer.fc_workers": "1"}) == "stanza/n_f=1"
    assert an.paradigm_of({"cfg.trainer.name": "ps", "cfg.trainer.mode": "async", "cfg.compressor.name": "none"}) == "ps/async"


@pytest.mark.parametrize("args,what", [
    (["--bandwidth", "fast"], "--bandwidth"),
    (["--bandwidth", "emulated:fast"], "--bandwidth"),
    (["--workers", "0"], "--workers"),
    (["--workers", "two"], "--workers"),
    (["trainer=nope"], "nope"),
    (["compressor=nope"], "nope"),
    (["--only", "nope"], "nope"),
    (["--speedup", "0"], "--speedup"),
    (["network=emulated", "--bandwidth", "1gbit"], "both name the link"),
    (["network=emulated", "network.latency=5ms"], "network.latency"),
    (["network=emulated", "+network.node_bandwidth.1=10mbit"], "network.node_bandwidth"),
])
def test_bad_input_is_one_line_and_exit_2_before_profiling(args, what, tmp_path, capsys):
    from workbench.plan import main
    assert main([f"output_root={tmp_path}", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and what in err, err
    assert not (tmp_path / "profiles").exists()


def test_network_overrides_name_the_link_planned():
    from workbench.plan.verification import link_from_overrides
    assert link_from_overrides(["model=vgg16", "network=emulated", "network.bandwidth=700mbit"]) == (
        "emulated:700mbit", ["model=vgg16"])
    assert link_from_overrides(["network=loopback", "cluster.nproc=2"]) == ("loopback", ["cluster.nproc=2"])
    assert link_from_overrides(["cluster.nproc=2"]) == (None, ["cluster.nproc=2"])


def test_a_profile_of_another_model_is_refused(tmp_path, capsys):
    from workbench.plan import main
    path = PROF.save(tmp_path / "other.json")
    assert main([f"output_root={tmp_path}", "model=small_cnn", "--profile", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--profile" in err and "model=m" in err


@pytest.mark.slow
@pytest.mark.root
def test_verify_on_emulated_links_bytes_exact(tmp_path, capsys):
    """--verify on emulated:<rate> runs the paradigm on the emulated network; bytes stay exact."""
    from workbench.plan import main
    out = tmp_path / "plan.json"
    assert main([f"output_root={tmp_path}", "cluster.nproc=2", "network=emulated", "network.bandwidth=200mbit",
                 "--verify", "--only", "sync,ps/sync,stanza/n_f=1", "--json", str(out)]) == 0  # = --bandwidth emulated:200mbit
    rows = json.loads(out.read_text())["rows"]
    assert {r["paradigm"] for r in rows} == {"sync", "ps/sync", "stanza/n_f=1"}
    for r in rows:
        assert r["bandwidth"] == "emulated:200mbit" and r["bytes_error"] == 0, r
        from omegaconf import OmegaConf
        cfg = OmegaConf.load(Path(r["run_dir"]) / "config.yaml")
        assert cfg.network.name == "emulated" and cfg.network.bandwidth == "200mbit"


@pytest.mark.slow
def test_verify_json_small_cnn_three_ranks_bytes_exact(tmp_path, capsys):
    """Every paradigm briefly on loopback: predicted bytes equal measured bytes exactly; step times
    are reported with their error (never asserted: this machine is shared)."""
    from workbench.plan import main
    out = tmp_path / "v.json"
    only = "sync,ps,staleness/n=2,stanza,compressed/topk,compressed/powersgd,compressed/fp16,easgd,bmuf,local_sgd"
    assert main(["cluster.nproc=3", f"output_root={tmp_path}", "cluster.timeout_s=120", "--verify", "--only", only,
                 "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert {r["paradigm"] for r in rows} >= {"sync", "ps/sync", "ps/async", "staleness/n=2", "stanza/n_f=1",
                                             "stanza/n_f=2", "compressed/topk", "compressed/powersgd", "easgd/async",
                                             "bmuf", "local_sgd"}
    for r in rows:
        for k in ("paradigm", "workers", "bandwidth_bps", "predicted_step_s", "predicted_samples_per_s",
                  "predicted_bytes_per_step", "measured_step_s", "measured_bytes_per_step", "error"):
            assert k in r, (r["paradigm"], k)
        assert r["measured_bytes_by_category"] == pytest.approx(
            {k: v for k, v in r["predicted_bytes_by_category"].items() if v}, rel=0, abs=1e-9), r["paradigm"]
        assert math.isfinite(r["error"]) and r["measured_step_s"] > 0
    # the profile timed the parameter server's loops on these ranks (what the loopback PS rows use), the
    # step with a one-float all-reduce (what the collectives are priced beyond),
    # each step's collectives together, each compressor's own loop, BMUF's block (its trainer's
    # loop), and every codec with every rank encoding at once
    prof = Profile.load(next((tmp_path / "profiles").glob("*.json")))
    assert set(prof.loops) == {"ps/async", "ps/async/header", "ps/sync", "ddp", "collectives/sync", "bookkeeping", "aligned",
                               "block/8",
                               *(f"collectives/{c}" for c in prof.codecs), *(f"compressed/{c}" for c in prof.codecs)}
    assert min(prof.loops.values()) > 0
    # each loop timed in interleaved passes (the small CNN's steps are short), its median kept
    assert set(prof.loop_passes) == set(prof.loops)
    for name, readings in prof.loop_passes.items():
        assert len(readings) == LOOP_PASSES and prof.loops[name] == statistics.median(readings), name
    assert set(prof.codecs) == {"topk", "powersgd", "fp16"}
    for c in prof.codecs.values():
        assert len(c["codec_shared_s"]) == len(c["codec_s"]) == len(prof.buckets) and min(c["codec_shared_s"]) > 0
    # when DDP handed each bucket to its hook, a share of backward up to the last call (the small CNN: one)
    assert [bk["ready"] for bk in prof.buckets] == [1.0] and P.bucket_ready(prof) == [1.0]


def _die_on_last_rank(model, step, meter, comm_device, make_optimizer, reps, **_):
    """A loop fn whose last rank dies as the kernel's OOM killer would end it: no message, no unwinding."""
    import os

    import torch.distributed as dist
    if dist.get_rank() == dist.get_world_size() - 1:
        os._exit(3)
    meter.barrier("profile")  # the others wait for it, as they would in a collective
    return 0.0


@pytest.mark.slow
def test_a_rank_that_dies_while_profiling_fails_the_profile_and_is_named():
    """A profiling rank that dies without a word fails the profile within seconds, naming the rank
    and its exit code, instead of the others waiting in gloo for half an hour."""
    import time

    import workbench
    from workbench.perfmodel.profile import measure
    cfg = workbench.compose(["model=small_cnn", "cluster.nproc=2", "cluster.timeout_s=60"])
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match="ranks failed: rank 1 exited with code 3"):
        measure(cfg, 2, loop_fns={"dies": _die_on_last_rank})
    assert time.monotonic() - t0 < 300


def test_perfmodel_imports_run_down():
    """perfmodel sits under the running layer: it never imports trainers, the launcher, the parameter
    server or the compressors (they import it); a trainer names its model, the planner asks."""
    import ast
    from pathlib import Path
    import workbench.perfmodel as pkg
    for f in Path(pkg.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(f.read_text())):
            mods = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            for m in mods:
                assert not m.startswith(("workbench.trainers", "workbench.launcher", "workbench.ps",
                                         "workbench.compress", "workbench.plan", "workbench.analysis")), (str(f), m)


def test_the_planner_suite_locates_crossovers_on_the_emulated_links():
    """Measured: log-linear between the two rates the speed-up falls between; the model's: where its
    predicted sync and compressed steps meet on the same emulated cluster."""
    import workbench
    from workbench.bench.planner import crossovers
    from workbench.plan import cluster_for
    cfg = workbench.compose(["cluster.nproc=4"])
    rows = [{"paradigm": k, "bandwidth": b, "measured_step_s": v / 1e3, "_profile": PROF} for k, b, v in
            [("sync", "emulated:50mbit", 100.0), ("sync", "emulated:800mbit", 10.0),
             ("compressed/powersgd", "emulated:50mbit", 25.0), ("compressed/powersgd", "emulated:800mbit", 20.0),
             ("ps/sync", "loopback", 1.0)]]
    (c,) = crossovers({"m": [rows]}, {"m": cfg}, 4)
    # speed-up 4 at 50 Mbit/s, 0.5 at 800: crosses 1 at t = 3/3.5 of the way on the log scale
    measured = math.exp(math.log(50e6) + (3 / 3.5) * (math.log(800e6) - math.log(50e6)))
    assert c["measured crossover"] == f"{measured / 1e6:.3g} Mbit/s"
    assert c["speed-up vs sync, lowest → highest rate"] == "4.00 → 0.50"
    bps = c["_ratio"] * measured
    cl = cluster_for(cfg, PROF, 4, f"emulated:{bps:.3f}bit", 5e-5)
    assert cl.cores_shared and P.sync(PROF, cl).step_s == pytest.approx(P.compressed(PROF, cl, "powersgd").step_s, rel=1e-6)
    assert crossovers({"m": [rows[:1] + rows[4:]]}, {"m": cfg}, 4) == []  # one emulated rate: nothing to locate
    assert c["read / measured"] is None  # rows without predictions: nothing to read
    # the model read at the sweep's rates: its speed-ups there (2.5 at 50 Mbit/s, 0.8 at 800), log-linear
    pred = {("sync", "emulated:50mbit"): 100.0, ("sync", "emulated:800mbit"): 16.0,
            ("compressed/powersgd", "emulated:50mbit"): 40.0, ("compressed/powersgd", "emulated:800mbit"): 20.0}
    for r in rows:
        if (r["paradigm"], r["bandwidth"]) in pred:
            r["predicted_step_s"] = pred[(r["paradigm"], r["bandwidth"])] / 1e3
    (c,) = crossovers({"m": [rows]}, {"m": cfg}, 4)
    read = math.exp(math.log(50e6) + (1.5 / 1.7) * (math.log(800e6) - math.log(50e6)))
    assert c["predicted, read at the sweep's rates"] == f"{read / 1e6:.3g} Mbit/s"
    assert c["read / measured"] == f"{read / measured:.2f}"


def test_the_crossover_table_says_what_speed_up_error_moves_a_crossing_20_percent():
    """A shallow speed-up curve turns a small speed-up error into a large move of the crossing:
    the tolerance is the factor on both speed-ups around the crossing that moves it 20 %, and the
    rounds' spread is the larger (max − min) / median of the two rates around it."""
    from workbench.bench.bandwidth import crossing
    from workbench.bench.planner import resolution
    speeds = {1e8: [2.0, 2.2, 2.1], 1e9: [0.5, 0.6, 0.55], 4e9: [0.4, 0.4, 0.4]}
    r = resolution(speeds)
    assert r["_tolerance"] == pytest.approx(1 / (1 - 1.55 * math.log(1.2) / math.log(10)) - 1)
    assert r["_spread"] == pytest.approx(0.1 / 0.55)  # 1 Gbit/s: the wider of the two
    # the definition: both speed-ups that much higher move the crossing 20 % up the rates
    at = crossing([(1e8, 2.1), (1e9, 0.55)])
    moved = crossing([(1e8, 2.1 * (1 + r["_tolerance"])), (1e9, 0.55 * (1 + r["_tolerance"]))])
    assert moved / at == pytest.approx(1.2)
    assert resolution({1e8: [2.0], 1e9: [1.5]}) == {}  # never crosses: nothing to resolve
    assert resolution({1e8: [2.0], 1e9: [0.5]})["_spread"] is None  # one round: no spread


def test_bmuf_behind_emulated_links_pays_the_shaper_once_a_block():
    """The block all-reduce's host part is the profile's in-situ timing; the token bucket, refilled
    over the block's local steps, passes its burst and holds the rest at the rate."""
    import dataclasses
    import workbench
    from workbench.plan import cluster_for
    here = dataclasses.replace(PROF, collectives={f"allreduce:float32:{M}": 2e-3})
    cl = cluster_for(workbench.compose([]), here, 4, "emulated:10mbit", 5e-5)  # burst 16 KB, 1.25 MB/s of frames
    comp, block = 10 * (4e-3 + 4e-4), 8
    assert P.bmuf(here, cl).terms["compute"] == pytest.approx(comp)
    sent = meter.allreduce_bytes(M, 4)
    e = 1448 / 1514  # payload bytes per byte of frame
    ar = 2e-3 + (sent - 16_000 * e) / (1.25e6 * e)
    assert P.bmuf(here, cl, block=block).step_s == pytest.approx(comp + U + (ar + U) / block)


def test_the_table_shows_the_best_of_each_family_and_all_with_all():
    """stanza/n_f=… and staleness/n=… are families (a count apart): one row each by default, the best
    marked with how many it stands for; --all prints every variant. The JSON rows are not touched."""
    from workbench.plan.tables import family, table
    assert family("stanza/n_f=12+fp16") == "stanza/n_f=*+fp16" and family("staleness/n=2") == "staleness/n=*"
    assert family("ps/sync+topk") == "ps/sync+topk" and family("staleness/hardsync") == "staleness/hardsync"
    speeds = {"stanza/n_f=2": 120, "sync": 100, "stanza/n_f=1+fp16": 90, "stanza/n_f=1": 80, "staleness/n=2": 60,
              "staleness/n=1": 50, "ps/sync": 30}
    rows = [{"paradigm": k, "workers": 4, "bandwidth": "1gbit", "rank": i, "predicted_samples_per_s": v,
             "predicted_step_s": 40 / v, "bottleneck": "link", "crossover_bps": None,
             "predicted_bytes_by_category": {"allreduce": 1e6}} for i, (k, v) in enumerate(speeds.items(), 1)]
    short, full = table(rows, PROF), table(rows, PROF, all_rows=True)
    shown = [line.split()[1] for line in short.splitlines() if line[:3].strip().isdigit()]
    assert shown == ["stanza/n_f=2", "sync", "stanza/n_f=1+fp16", "staleness/n=2", "ps/sync"]
    assert [line.split()[0] for line in short.splitlines() if line[:3].strip().isdigit()] == ["1", "2", "3", "4", "5"]
    assert "stanza/n_f=* (2), staleness/n=* (2); 2 more rows with --all" in short
    listed = [line.split()[1] for line in full.splitlines() if line[:3].strip().isdigit()]
    assert listed == list(speeds) and "stanza/n_f=2 *" in full and "staleness/n=2 *" in full
    assert "stanza/n_f=1 *" not in full and "more rows" not in full


def test_n_softsync_values_with_one_c_are_one_row_with_all():
    """staleness/n=2 and n=3 on 4 processes (λ = 3) both update after c = 1 gradient: the trainer says
    so (ParadigmSpec.same_protocol), the rows carry it, and --all prints them as one row."""
    import workbench
    from workbench.plan.tables import table
    from workbench.trainers import SPECS
    keys = {n: SPECS["staleness"].same_protocol(workbench.compose(["trainer=staleness", f"trainer.n={n}"]), 4)
            for n in (1, 2, 3)}
    assert keys == {1: "softsync c=3", 2: "softsync c=1", 3: "softsync c=1"}
    rows = [{"paradigm": f"staleness/n={n}", "protocol": keys[n], "workers": 4, "bandwidth": "1gbit", "rank": n,
             "predicted_samples_per_s": 100 - n, "predicted_step_s": 0.4, "bottleneck": "compute", "crossover_bps": None,
             "predicted_bytes_by_category": {"grad_push": 1e6}} for n in (1, 2, 3)]
    full = table(rows, PROF, all_rows=True)
    listed = [line.split()[1] for line in full.splitlines() if line[:3].strip().isdigit()]
    assert listed == ["staleness/n=1", "staleness/n=2…3"], full
    assert "staleness/n=2…3: 2 variants, one protocol (softsync c=1)" in full
