"""The discrete-event simulator (workbench.sim): its clock and queues on schedules computed by hand,
that it runs the real protocol code (and reproduces a real run's staleness gradient by gradient),
its bad-input refusals, and a 1024-learner plan."""
import json
import subprocess
import sys

import pytest

from conftest import launch_run
from perfmodel_fixtures import synthetic_profile
from workbench.config import ConfigError
from workbench.ps import rules
from workbench.sim import SimSpec, check, estimate_s, replay, simulate
from workbench.sim import ps as simps
from workbench.sim.engine import EventQueue


def two(**kw):
    """Two workers, one server, no link cost unless given: every time is a hand-computed sum."""
    base = dict(workers=2, compute_s=1.0, model_bytes=0, bandwidth=1e9, steps=3)
    base.update(kw)
    return SimSpec(**base)


def test_queue_pops_in_time_order_and_ties_in_schedule_order():
    q = EventQueue()
    q.at(2.0, "b")
    q.at(1.0, "a")
    q.at(2.0, "c")
    assert [q.pop() for _ in range(3)] == [("a",), ("b",), ("c",)] and q.now == 2.0 and q.events == 3
    with pytest.raises(ValueError):
        q.at(1.5, "late")  # the clock never goes back


def test_async_two_workers_fixed_times():
    # worker 0 pushes at 1, 2, 3; worker 1 (1.6x slower) at 1.6, 3.2, 4.8; each push is an update (c = 1)
    # 1.0 w0 on ts 0: τ 0 -> T1 | 1.6 w1 on 0: τ 1 -> T2 | 2.0 w0 on 1: τ 1 -> T3 | 3.0 w0 on 3: τ 0 -> T4
    # 3.2 w1 on 2: τ 2 -> T5 | 4.8 w1 on 5: τ 0 -> T6
    r = simulate(two(stragglers=((1, 1.6, 0.0),)), record=True)
    assert r["applied"] == [[[0, 0]], [[1, 1]], [[0, 1]], [[0, 0]], [[1, 2]], [[1, 0]]]
    assert r["staleness_hist"] == [3, 2, 1] and r["max_staleness"] == 2 and r["mean_staleness"] == pytest.approx(4 / 6)
    assert r["elapsed_s"] == pytest.approx(4.8) and r["updates"] == 6
    assert r["updates_per_s"] == pytest.approx(6 / 4.8)
    # until worker 0 is done (3.0 s) 4 gradients arrived: a worker's step is 2 x 3.0 / 4 in steady state
    assert r["step_s"] == pytest.approx(1.5) and r["samples_per_s"] == pytest.approx(4 * 16 / 3.0)


def test_the_server_link_is_one_queue():
    # M = 1000 bytes at 1000 B/s: a push takes the server 1 s to receive, a reply 1 s to drain on the
    # outgoing half of its link, which does not hold the server (the reply fits the socket buffer).
    # both push at 1; w0 is received 1-2, its reply drains 2-3; w1 waits, received 2-3, reply 3-4;
    # w0 pushes at 4: 4-5, reply 5-6, then DONE; w1 pushes at 5: 5-6, reply 6-7, then DONE;
    # w0's DONE (arrived at 6) is served 6-6.032 (a 32-byte header); w1's DONE 7-7.032.
    r = simulate(two(model_bytes=1000, bandwidth=1000.0, steps=2), record=True)
    assert [u[0] for u in r["applied"]] == [[0, 0], [1, 1], [0, 1], [1, 1]]
    assert r["elapsed_s"] == pytest.approx(7.032)
    assert r["server_utilisation"] == pytest.approx(4.064 / 7.032)
    assert r["step_s"] == pytest.approx(2 * 6 / 3)  # 3 pushes (at 1, 1, 4) when w0 is done at 6
    assert r["bytes_per_worker_step"] == {"grad_push": 1000, "param_pull": 1000, "ps_control": 64}


def test_a_reply_larger_than_the_send_buffer_holds_the_server():
    # 8 MiB at 8 MiB/s: receiving takes 1 s; the reply's 4 MiB beyond the socket buffer hold the
    # server 0.5 s more. Both push at 1: w0 received 1-2, held to 2.5, its reply drains 2-3;
    # w1 received 2.5-3.5, held to 4, reply 3.5-4.5. One step each: DONEs at 3 and 4.5.
    mb = 8 * 2**20
    r = simulate(two(model_bytes=mb, bandwidth=float(mb), steps=1), record=True)
    assert r["done_s"] == pytest.approx([3.0, 4.5])
    hdr = 32 / mb
    assert r["elapsed_s"] == pytest.approx(4.5 + hdr)


def test_hardsync_waits_for_the_slowest():
    r = simulate(two(protocol="hardsync", stragglers=((1, 1.6, 0.0),)), record=True)
    assert r["applied"] == [[[0, 0], [1, 0]]] * 3 and r["elapsed_s"] == pytest.approx(4.8)
    assert r["step_s"] == pytest.approx(1.6)


def test_the_bound_blocks_the_fast_worker():
    # s = 0 with c = 1: an update may not make the straggler's gradient stale, so worker 0 waits for it
    r = simulate(two(stragglers=((1, 1.6, 0.0),), max_staleness=0), record=True)
    assert r["max_staleness"] == 0 and r["blocked_pushes"] > 0


def test_easgd_exchanges_every_period():
    r = simulate(two(protocol="easgd", period=2, steps=4, update_s=0.5))
    # two exchanges per worker, each after 2 x (1 s compute + 0.5 s local optimizer); the server's
    # elastic update takes 0.5 s (S = 1). Both arrive at 3: w0 served 3-3.5, w1 waits, 3.5-4;
    # w0 again at 3.5 + 3 = 6.5 (served to 7), w1 at 4 + 3 = 7 (served to 7.5); the DONE headers are 32 ns.
    assert r["exchanges"] == 4 and r["elapsed_s"] == pytest.approx(7.5)
    assert "mean_staleness" not in r
    # a worker's step is a local step, not a period (it was the period times the period): w0 is
    # done first, at 7, when 3 exchanges have been served (w0's first at 3.5, w1's at 4, w0's second at 7)
    assert r["step_s"] == pytest.approx(2 * 7 / (3 * 2))


def test_the_simulator_runs_the_real_protocol():
    # the servers are the class the real GradientRule is; only the update (tensors vs counting) differs
    assert issubclass(simps.SimProtocol, rules.Protocol) and issubclass(rules.GradientRule, rules.Protocol)
    for name in ("on_push", "on_pull", "on_done", "finish", "_try_update", "_apply", "_may_advance", "_release"):
        assert getattr(simps.SimProtocol, name) is getattr(rules.Protocol, name)
        assert name in ("on_push", "on_pull", "on_done") or getattr(rules.GradientRule, name) is getattr(rules.Protocol, name)


@pytest.mark.parametrize("extra", [[], ["trainer.max_staleness=1"]])
def test_a_real_schedule_replayed_gives_the_same_staleness(run_overrides, tmp_path, monkeypatch, extra):
    """A real 3-softsync run (λ = 3, a straggler) records its server's schedule; replaying the order
    of arrivals through the simulator gives every gradient the same τ."""
    trace = tmp_path / "trace"
    trace.mkdir()
    monkeypatch.setenv("WORKBENCH_PS_TRACE", str(trace))
    run = launch_run(run_overrides + ["trainer=staleness", "trainer.n=3", "cluster.nproc=4", "trainer.max_steps=12",
                                      "trainer.eval_every=6", "inject.straggler_ranks=[2]",
                                      "inject.straggler_delay_s=0.03", *extra])
    assert run.status == "completed"
    files = list(trace.glob("server-*.jsonl"))
    assert len(files) == 1
    recs = [json.loads(line) for line in files[0].read_text().splitlines()]
    real = [r["apply"] for r in recs if "apply" in r]
    assert sum(len(u) for u in real) == 36
    opts = {"max_staleness": 1} if extra else {}
    assert replay(recs, 3, hardsync=False, c=1, **opts) == real
    assert max(t for u in real for _, t in u) >= 1  # the schedule was asynchronous, not trivially τ = 0


@pytest.mark.parametrize("spec,msg", [
    (dict(workers=0), "workers"),
    (dict(workers=4, n=5), r"for n: must be in \[1, 4\]"),
    (dict(workers=4, n=0), "for n"),
    (dict(workers=4, cv=-0.1), "for cv"),
    (dict(workers=4, stragglers=((0, 0.5, 0.0),)), "slowdown"),
    (dict(workers=1024, steps=10**6), "would take about"),
])
def test_bad_input_is_refused_before_simulating(spec, msg):
    base = dict(compute_s=0.1, model_bytes=1000, bandwidth=1e9)
    base.update(spec)
    with pytest.raises(ConfigError, match=msg) as e:
        check(SimSpec(**base))
    assert "\n" not in str(e.value)


def test_cli_bad_input_exits_2_with_one_line():
    p = subprocess.run([sys.executable, "-m", "workbench.sim", "--workers", "1024", "--steps", "1000000"],
                       capture_output=True, text=True)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.count("\n") == 1 and "would take about" in p.stderr


def test_estimate_scales_with_events():
    s = SimSpec(workers=1024, compute_s=0.1, model_bytes=1000, bandwidth=1e9, steps=1000)
    assert estimate_s(s) == pytest.approx(1024 * 1000 * 12e-6)
    assert estimate_s(SimSpec(**{**s.__dict__, "servers": 4})) == pytest.approx(4 * estimate_s(s))
    assert estimate_s(SimSpec(**{**s.__dict__, "host_cores": 2})) == pytest.approx(6 * estimate_s(s))


def test_rudra_staleness_grows_with_n():
    """Rudra: ⟨τ⟩ ≈ n under n-softsync, and τ rarely beyond 2n (λ = 30, a 10 % compute spread)."""
    for n in (1, 2, 5, 10, 30):
        r = simulate(SimSpec(workers=30, compute_s=0.1, model_bytes=10**5, bandwidth=1.25e9, n=n, steps=60, cv=0.1))
        assert 0.8 * n - 0.5 <= r["mean_staleness"] <= 1.2 * n + 0.5
        beyond = sum(r["staleness_hist"][2 * n + 1:]) / sum(r["staleness_hist"])
        assert beyond < 0.01


def test_plan_at_1024_learners():
    """The planner at 1024 processes: the asynchronous paradigms simulated, staleness in the rows."""
    from workbench.plan import plan
    df = plan([], bandwidths=["10gbit"], workers=[1024], profile=synthetic_profile(), only=["ps", "staleness", "easgd"])
    rows = {r["paradigm"]: r for r in df.to_dict("records")}
    assert {"ps/sync", "ps/async", "staleness/n=1", "staleness/n=512", "staleness/n=1023", "easgd/async"} <= set(rows)
    assert rows["ps/async"]["simulated"] is True and rows["ps/async"]["max_staleness"] <= 1022
    assert rows["ps/async"]["mean_staleness"] > 900
    one = rows["staleness/n=1"]
    assert one["max_staleness"] <= 2 and sum(one["staleness_hist"]) > 0
    assert rows["easgd/async"]["simulated"] is True
    assert rows["ps/sync"]["simulated"] is not True  # synchronous: the analytic model


# -- the shared host: a processor-sharing pool of cores ------------------------------------------

def _pool_ends(cores, works):
    """When each job of ``works`` CPU-seconds, all started at 0, ends in a pool of ``cores``."""
    from workbench.sim.engine import POOL, CorePool
    q = EventQueue()
    pool = CorePool(q, cores)
    for i, w in enumerate(works):
        pool.start(w, i)
    ends = {}
    while q:
        kind, p, version = q.pop()
        assert kind == POOL
        for i in p.fire(version):
            ends[i] = q.now
    return [ends[i] for i in range(len(works))]


def test_pool_shares_cores_between_active_jobs():
    # 1 core, two 1 s jobs: each runs at 1/2, both end at 2
    assert _pool_ends(1, [1.0, 1.0]) == pytest.approx([2.0, 2.0])
    # 1 core, 1 s and 2 s: half speed until the first ends at 2 (1 s each done), then the other alone: 3
    assert _pool_ends(1, [1.0, 2.0]) == pytest.approx([2.0, 3.0])
    # 2 cores: a job never runs faster than one core, so nobody waits
    assert _pool_ends(2, [1.0, 2.0]) == pytest.approx([1.0, 2.0])
    # 2 cores, three 1 s jobs: each at 2/3, all end at 1.5
    assert _pool_ends(2, [1.0, 1.0, 1.0]) == pytest.approx([1.5, 1.5, 1.5])


def test_pool_retimes_jobs_started_later():
    # 1 core: A (2 s) alone until 1 (1 s left); B (0.5 s) starts at 1: both at 1/2, B ends at 2, A at 2.5
    from workbench.sim.engine import POOL, CorePool
    q = EventQueue()
    pool = CorePool(q, 1)
    pool.start(2.0, "A")
    q.at(1.0, "start B")
    ends = {}
    while q:
        ev = q.pop()
        if ev == ("start B",):
            pool.start(0.5, "B")
            continue
        for tok in ev[1].fire(ev[2]):
            ends[tok] = q.now
    assert ends == pytest.approx({"A": 2.5, "B": 2.0})


@pytest.mark.parametrize("lam", [1, 4])
def test_one_core_caps_the_throughput(lam):
    # λ workers of c = 0.5 s with a free server (no bytes, no update): on one shared core the pool is
    # the bottleneck, 1/c = 2 gradients/s in total whatever λ; with a host per worker λ/c
    kw = dict(workers=lam, compute_s=0.5, model_bytes=0, bandwidth=1e15, steps=6)
    shared = simulate(SimSpec(**kw, host_cores=1))
    apart = simulate(SimSpec(**kw))
    assert shared["gradients_applied"] == apart["gradients_applied"] == 6 * lam
    assert shared["gradients_applied"] / shared["elapsed_s"] == pytest.approx(2.0)
    assert apart["gradients_applied"] / apart["elapsed_s"] == pytest.approx(2.0 * lam)
    # two cores: twice one core while λ ≥ 2
    two_cores = simulate(SimSpec(**kw, host_cores=2))
    assert two_cores["gradients_applied"] / two_cores["elapsed_s"] == pytest.approx(2.0 * min(lam, 2))


def test_shared_host_charges_the_copies_and_the_update():
    # one worker on one core, M/β = 1 s per message, update 0.5 s, c = 1: per step compute 1, the push's
    # copy 1 (both ends at once: two jobs of 1 s on one core end at 2 s, so 2), update 0.5, the reply's
    # copy 2 again: 5.5 s per step on one core; with two cores the copies' two ends run side by side: 3.5
    kw = dict(workers=1, compute_s=1.0, model_bytes=1000, bandwidth=1000.0, update_s=0.5, steps=2)
    assert simulate(SimSpec(**kw, host_cores=1), record=True)["done_s"][0] == pytest.approx(2 * 5.5)
    assert simulate(SimSpec(**kw, host_cores=2))["done_s"][0] == pytest.approx(2 * 3.5)


def test_shared_host_keeps_the_protocol_and_refuses_bad_cores():
    # hand-computed async schedule above (worker 1 1.6x slower), on 2 cores with a free server: each
    # worker has a core of its own, so the same τ sequence
    r = simulate(two(stragglers=((1, 1.6, 0.0),), host_cores=2, bandwidth=1e15), record=True)
    assert r["applied"] == [[[0, 0]], [[1, 1]], [[0, 1]], [[0, 0]], [[1, 2]], [[1, 0]]]
    assert r["elapsed_s"] == pytest.approx(4.8)
    with pytest.raises(ConfigError, match="host_cores") as e:
        check(two(host_cores=0))
    assert "\n" not in str(e.value)


def _loop_profile():
    """The synthetic profile (4 ranks: 3 workers and a server) with the loops the planner prices a
    row on this host from: the PS loops (header-only and whole-model) and the training loop's
    bookkeeping, each well above what the idle line and the compute alone would give."""
    return synthetic_profile(params_conv=100_000, params_fc=50_000,
                             loops={"ps/async/header": 0.040, "ps/async": 0.060, "bookkeeping": 0.008})


@pytest.mark.parametrize("n", [1, 3])
def test_on_host_matches_the_planner_from_the_same_profile_terms(n):
    # a run on this host (loopback, the profiled ranks): the simulator's step and the planner's
    # analytic ps_async/n-softsync step, both from one profile; dropping any of the terms the
    # planner charges (compute at λ ranks, the bookkeeping, the in-loop line) leaves the simulator
    # far outside the tolerance, as the shared-host pool's ideal sharing did (docs/notes/2026-12-08-simulator-throughput.md)
    from dataclasses import replace

    from workbench.perfmodel import paradigms as P
    from workbench.perfmodel.cluster import Cluster
    from workbench.sim.spec import on_host
    prof = _loop_profile()
    cl = Cluster(prof.ranks, prof.beta, prof.alpha, prof.beta_allreduce, shared_host=True)
    planned = P.staleness(prof, cl, 1, n=n).step_s
    spec = on_host(prof, cl, 1, n=n, steps=200)
    assert spec.workers == 3 and spec.compute_s == pytest.approx(prof.compute_s(3) + prof.bookkeeping_s())
    tol = 0.10
    assert simulate(spec)["step_s"] == pytest.approx(planned, rel=tol)
    # each term matters: without it the simulated step misses the planner's by more than the tolerance
    idle_line = replace(spec, bandwidth=prof.beta, latency=prof.alpha)
    no_book = replace(spec, compute_s=spec.compute_s - prof.bookkeeping_s())
    one_rank = replace(spec, compute_s=prof.compute_s(1) + prof.bookkeeping_s())
    for off in (idle_line, no_book, one_rank):
        assert abs(simulate(off)["step_s"] / planned - 1) > tol
