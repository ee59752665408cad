"""trainer=ps and the parameter-server machinery: placement, exact sums over real processes,
equivalence with single-process SGD, exact bytes, validation, and failures that end the run."""
import json

import pytest
import torch

import workbench
from conftest import launch_run
from dist_utils import run_ranks
from reference import assert_same_params, single_process_sgd
from workbench.config import ConfigError, validate
from workbench.ps.sharding import ShardLayout, balance


def test_balance_places_every_tensor_once_and_evens_the_load():
    sizes = [3000, 10, 2500, 2400, 7, 600, 590, 1]
    for servers in (1, 2, 3, 5):
        owned = balance(sizes, servers)
        assert sorted(i for o in owned for i in o) == list(range(len(sizes)))
        loads = [sum(sizes[i] for i in o) for o in owned]
        assert max(loads) - min(loads) <= max(sizes)
    # largest first, each to the lighter server: 3000→0, 2500→1, 2400→1 (4900), then 600, 590, 10, 7, 1
    # all go to server 0 (4208 < 4900)
    assert balance(sizes, 2) == [[0, 1, 4, 5, 6, 7], [2, 3]]
    assert balance(sizes, 2) == balance(list(sizes), 2)  # deterministic: every rank computes the same


def test_layout_flatten_roundtrip():
    ts = [torch.randn(3, 4), torch.randn(5), torch.randn(2, 2, 2), torch.randn(7)]
    layout = ShardLayout.of(ts, 2)
    back = [torch.zeros_like(t) for t in ts]
    for s in range(2):
        flat = layout.flatten(ts, s)
        assert flat.numel() == layout.numel(s)
        for v, i in zip(layout.views(flat, s), layout.owned[s]):
            assert torch.equal(v, ts[i])
        layout.unflatten_into(flat, back, s)
    for a, b in zip(ts, back):
        assert torch.equal(a, b)


SHAPES = [(40, 3), (17,), (5, 5, 2), (9,), (1,)]


def _exact_sums(rank, world, servers, hardsync, steps):
    """Workers push rank+1 everywhere for ``steps`` steps; lr 1, no momentum: the servers' weights
    become minus the (mean or) total of everything pushed."""
    from workbench.meter import Meter
    from workbench.ps.protocol import PSClient
    from workbench.ps.rules import GradientRule
    from workbench.ps.server import ServerLoop
    workers = list(range(world - servers))
    server_ranks = list(range(world - servers, world))
    layout = ShardLayout([torch.Size(s) for s in SHAPES], servers)
    meter = Meter(120)
    if rank in server_ranks:
        s = rank - len(workers)
        rule = GradientRule(torch.zeros(layout.numel(s)), workers, hardsync=hardsync, c=1,
                            make_optimizer=lambda ps: torch.optim.SGD(ps, lr=1.0), lr_fn=lambda step: 1.0)
        ServerLoop(meter, rule, workers).run()
        # plain lists: a tensor put on the result queue would be shared with a process about to exit
        return {"server": s, "params": rule.params.tolist(), "updates": rule.stats.v["updates"]}
    client = PSClient(meter, layout, server_ranks)
    params = [torch.zeros(s) for s in SHAPES]
    grads = [torch.full(s, float(rank + 1)) for s in SHAPES]
    for _ in range(steps):
        client.push_pull(grads, params)
    final = [torch.zeros(s) for s in SHAPES]
    if rank == 0:
        client.done(final)
    else:
        client.done()
    return {"final": [t.tolist() for t in final], "comm": meter.totals()}


@pytest.mark.parametrize("hardsync", [False, True])
def test_exact_sums_over_two_servers(hardsync):
    world, servers, steps = 4, 2, 5
    # generous timeouts: on a loaded machine the 4 spawned ranks may start a minute apart
    out = run_ranks(_exact_sums, world, servers, hardsync, steps, timeout_s=180, join_timeout=600)
    workers = world - servers
    total = steps * sum(r + 1 for r in range(workers))  # every gradient, added once
    expected = -(total / workers if hardsync else total)  # hardsync averages one per worker per update
    for o in out[workers:]:
        assert o["params"] and all(v == expected for v in o["params"])  # exact, not approximately
        assert o["updates"] == (steps if hardsync else steps * workers)
    for t, shape in zip(out[0]["final"], SHAPES):
        t = torch.tensor(t)
        assert t.shape == torch.Size(shape) and torch.equal(t, torch.full_like(t, expected))
    model_bytes = sum(torch.Size(s).numel() for s in SHAPES) * 4
    for o in out[:workers]:
        assert o["comm"]["grad_push"]["sent"] == steps * model_bytes
        assert o["comm"]["param_pull"]["recv"] == steps * model_bytes


def _timed_loop(rank, world, name, reps):
    """The profile's timing of the PS loop (``workbench.ps.exchange_timing``) on a small linear model."""
    from workbench.meter import Meter
    from workbench.ps.exchange_timing import LOOPS
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(20, 30), torch.nn.Linear(30, 5))
    before = [p.detach().clone() for p in model.parameters()]
    x, y = torch.randn(8, 20), torch.randint(0, 5, (8,))

    def step():
        model.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(x), y).backward()
    meter = Meter(120)
    fn = LOOPS[name]
    period = fn(model, step, meter, torch.device("cpu"), lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9), reps)
    same = all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    return {"period": period, "same": same, "comm": meter.totals()}


@pytest.mark.parametrize("name", ["ps/async", "ps/sync", "ps/async/header"])
def test_the_profile_times_the_real_ps_loop_and_leaves_the_weights(name):
    """Every rank gets the workers' mean period; each worker pushed and pulled the model once per
    timed step through the real protocol (exact bytes; the header-only loop sends headers alone);
    the weights are the model's again after."""
    world, reps = 3, 4
    out = run_ranks(_timed_loop, world, name, reps, timeout_s=180, join_timeout=600)
    assert len({o["period"] for o in out}) == 1 and out[0]["period"] > 0
    assert all(o["same"] for o in out)
    steps = reps + 1 + 1  # warm-up period and one more end than periods
    if name.endswith("/header"):
        for o in out[:world - 1]:
            assert "grad_push" not in o["comm"] and o["comm"]["ps_control"]["sent"] == (steps + 1) * 32  # + DONE
        return
    model_bytes = 4 * (20 * 30 + 30 + 30 * 5 + 5)
    for o in out[:world - 1]:
        assert o["comm"]["grad_push"]["sent"] == steps * model_bytes
        assert o["comm"]["param_pull"]["recv"] == steps * model_bytes
    assert out[-1]["comm"]["grad_push"]["recv"] == (world - 1) * steps * model_bytes


COMMON = ["optim.lr=0.05", "optim.momentum=0.9", "optim.weight_decay=0.001", "optim.warmup_steps=5",
          "data.batch_size=16", "seed=3"]


@pytest.mark.parametrize("trainer,servers,nproc", [
    (["trainer=ps", "trainer.mode=sync"], 2, 4),
    (["trainer=staleness", "trainer.protocol=hardsync"], 1, 3),
])
def test_sync_ps_equals_single_process_sgd(run_overrides, trainer, servers, nproc):
    steps, workers = 25, nproc - servers
    run = launch_run(run_overrides + trainer + COMMON + [f"cluster.nproc={nproc}", f"trainer.num_servers={servers}",
                                                         f"trainer.max_steps={steps}", "trainer.eval_every=10"])
    assert run.status == "completed"
    state = torch.load(run.path / "model.pt", weights_only=True)
    ref = single_process_sgd(run_overrides + COMMON, workers, steps)
    assert_same_params(state, ref)
    init = single_process_sgd(run_overrides + COMMON, workers, 0)
    assert any(not torch.allclose(init[k], ref[k]) for k in ref)

    # exact bytes: every worker pushes and pulls the whole model once per step, nothing else
    model_bytes = sum(v.numel() * 4 for v in state.values())
    for w in range(workers):
        recs = [json.loads(l) for l in (run.path / "ranks" / f"rank{w}.jsonl").read_text().splitlines()]
        assert [r["step"] for r in recs] == list(range(1, steps + 1))
        for r in recs:
            assert r["comm"]["grad_push"]["sent"] == model_bytes
            assert r["comm"]["param_pull"]["recv"] == model_bytes
            assert r["comm"]["ps_control"]["sent"] == 32 * servers  # one header per server
            assert "allreduce" not in r["comm"]
    s = run.summary
    assert s["workers"] == workers and s["ps"]["servers"] == servers
    assert s["ps"]["updates"] == steps and s["ps"]["update_sizes"] == {str(workers): steps}
    assert s["ps"]["staleness_max"] == 0
    assert s["ps"]["bytes_per_worker_step"]["push"] == model_bytes == s["ps"]["bytes_per_worker_step"]["pull"]
    evals = [r for r in run.records() if r["kind"] == "eval"]
    assert [e["step"] for e in evals] == [10, 20, 25] and s["final_test_accuracy"] == evals[-1]["test_accuracy"]


def _cfg(overrides):
    return workbench.compose(["trainer.progress=false"] + overrides)


@pytest.mark.parametrize("overrides,key", [
    (["trainer=ps", "cluster.nproc=4", "trainer.num_servers=4"], "cluster.nproc"),  # the core: no worker left
    (["trainer=ps", "cluster.nproc=2", "trainer.num_servers=0"], "trainer.num_servers"),
    (["trainer=ps", "trainer.mode=bsp"], "trainer.mode"),
    (["trainer=staleness", "cluster.nproc=4", "trainer.n=4"], "trainer.n"),
    (["trainer=staleness", "trainer.n=0"], "trainer.n"),
    (["trainer=staleness", "trainer.max_staleness=-1"], "trainer.max_staleness"),
    (["trainer=staleness", "trainer.lr_modulation=sqrt"], "trainer.lr_modulation"),
    (["trainer=staleness", "trainer.on_stale=wait"], "trainer.on_stale"),
    (["trainer=ps", "cluster.nproc=4", "data.global_batch_size=64"], "data.global_batch_size"),  # 3 workers, not 4
])
def test_invalid_configs_rejected_before_launch(overrides, key):
    with pytest.raises(ConfigError) as e:
        validate(_cfg(overrides))
    msg = str(e.value)
    assert key in msg and "\n" not in msg


def test_valid_configs_pass():
    validate(_cfg(["trainer=ps", "cluster.nproc=4", "trainer.num_servers=3"]))
    validate(_cfg(["trainer=staleness", "cluster.nproc=4", "trainer.n=3", "trainer.max_staleness=0"]))


@pytest.mark.parametrize("mode,kill_rank", [("async", 1), ("sync", 3)])
def test_dead_rank_fails_the_run_naming_it(run_overrides, mode, kill_rank):
    """A worker (rank 1) or the server (rank 3) dies mid-run: the run fails, naming the rank,
    instead of hanging (the pytest timeout would catch a hang)."""
    run = launch_run(run_overrides + ["trainer=ps", f"trainer.mode={mode}", "cluster.nproc=4", "trainer.max_steps=200",
                                      f"inject.kill_rank={kill_rank}", "inject.kill_at_step=3"], check=False)
    s = run.summary
    assert s["status"] == "failed"
    assert s["failed_rank"] == kill_rank and f"rank {kill_rank}" in s["error"]
