"""Compression on the averaging paradigms: local SGD's and BMUF's block average and EASGD's elastic
difference through a compressor (workbench/compress/delta.py). ``compressor=none`` is the plain
exchange, bit for bit (test_averaging.py holds it against its references); here: the averager and
the point-to-point wire across real ranks, the measured bytes against each trainer's analytic count,
learning, checkpointed compressor state, and what validation refuses before launch."""
import math

import pytest
import torch
from omegaconf import OmegaConf
from torch.nn.utils import parameters_to_vector

import workbench
from conftest import launch_run
from dist_utils import run_ranks
from reference import assert_same_params
from workbench.bench.bytes import param_shapes
from workbench.compress import COMPRESSORS, SCHEMAS, build_compressor, keep_count
from workbench.compress.base import BucketInfo
from workbench.compress.delta import DeltaAverager, bucket_numels, bucket_shapes, recv_payload, send_payload
from workbench.config import validate
from workbench.core import ConfigError
from workbench.meter import Meter, nbytes
from workbench.trainers import SPECS

SHAPES = [(6, 3, 3, 3), (6,), (10, 24), (10,)]  # a small model's parameters
N = sum(math.prod(s) for s in SHAPES)


def comp_cfg(name, **kw):
    return OmegaConf.merge(OmegaConf.structured(SCHEMAS[name]), kw)


def _delta(rank):
    return torch.randn(N, generator=torch.Generator().manual_seed(100 + rank))


# -- the averager and the wire, on real ranks -----------------------------------------------------

def plain(x):
    """Tensors as NumPy arrays, recursively (a tensor sent back from a rank needs its process alive)."""
    if isinstance(x, torch.Tensor):
        return x.detach().numpy().copy()
    if isinstance(x, dict):
        return {k: plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(plain(v) for v in x)
    return x


def tensors(x):
    """:func:`plain` undone."""
    if hasattr(x, "dtype") and hasattr(x, "shape") and not isinstance(x, torch.Tensor):
        return torch.from_numpy(x)
    if isinstance(x, dict):
        return {k: tensors(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(tensors(v) for v in x)
    return x


def _average(rank, world, name, kw, rounds):
    meter = Meter()
    avg = DeltaAverager(build_compressor(comp_cfg(name, **kw), rank, world, 7), meter, SHAPES, seed=7)
    outs, stats = [], []
    for _ in range(rounds):
        outs.append(avg.average(_delta(rank)))
        stats.append(avg.pop_stats())
    return plain((outs, stats, meter.totals(), avg.state_dict()))


def test_averager_none_is_the_mean_and_fp16_its_half_precision_sum():
    world = 2
    mean = sum(_delta(r) for r in range(world)) / world
    none = tensors(run_ranks(_average, world, "none", {}, 1))
    for outs, stats, totals, _ in none:
        torch.testing.assert_close(outs[0], mean)
        assert stats[0]["payload_bytes"] == stats[0]["dense_bytes"] == 4 * N
        assert set(totals) == {"allreduce"}  # compressor=none's category, as trainer=sync's
    fp16 = tensors(run_ranks(_average, world, "fp16", {}, 2))
    half = sum(_delta(r).half() / world for r in range(world)).float()
    for outs, stats, totals, _ in fp16:
        assert torch.equal(outs[0], half)
        assert stats[1]["payload_bytes"] == 2 * N and stats[1]["compression_ratio"] == 2.0
        assert totals["compressed"]["sent"] == 2 * 2 * N  # 2 rounds, ring factor 1 on two ranks


def test_averager_keeps_a_residual_per_bucket_and_checkpoints_it():
    world = 3
    res = tensors(run_ranks(_average, world, "topk", {"k": 0.1, "error_feedback": True}, 2))
    for rank, (outs, stats, totals, state) in enumerate(res):
        assert all(torch.equal(outs[0], o[0]) for o, *_ in res)  # every rank decodes the same average
        assert set(state["compressor"]["errors"]) == {0} and state["step"] == 2  # one bucket: the small model
        # the residual is the one error feedback keeps when it encodes this rank's delta twice
        c = build_compressor(comp_cfg("topk", k=0.1, error_feedback=True), rank, world)
        for step in range(2):
            c.encode(_delta(rank), BucketInfo(0, step, rank, world, tuple(torch.Size(s) for s in SHAPES)))
        assert torch.equal(state["compressor"]["errors"][0], c.errors[0])
        assert stats[0]["payload_bytes"] == 8 * keep_count(0.1, N)


def test_buckets_cut_at_the_cap_between_whole_parameters():
    assert bucket_shapes(SHAPES) == [[torch.Size(s) for s in SHAPES]]
    assert bucket_shapes([(10,), (10,), (30,)], cap_bytes=80) == [[torch.Size([10]), torch.Size([10])], [torch.Size([30])]]
    assert bucket_numels([(10,), (10,), (30,)]) == [50]


def _p2p(rank, world, name, kw):
    meter = Meter()
    c = build_compressor(comp_cfg(name, **kw), rank, 1, 3)
    x = _delta(0)
    info = BucketInfo(0, 0, 0, 1)
    if rank == 0:
        payload = c.send(x, info)
        for w in send_payload(meter, payload, 1, "param_push", "ps_control", 16):
            w.wait()
        return nbytes(payload), meter.totals()
    got = recv_payload(meter, 0, "param_push", "ps_control", 16)
    return plain(c.receive(got, N, info)), meter.totals()


@pytest.mark.parametrize("name,kw", [("fp16", {}), ("topk", {"k": 0.05}), ("qsgd", {}), ("signsgd", {}),
                                     ("topk", {"k": 0.05, "error_feedback": True})])
def test_point_to_point_payload_arrives_whole_and_metered_exactly(name, kw):
    (sent, tot0), (decoded, tot1) = tensors(run_ranks(_p2p, 2, name, kw))
    c = build_compressor(comp_cfg(name, **kw), 0, 1, 3)
    assert torch.equal(decoded, c.receive(c.send(_delta(0), BucketInfo(0, 0, 0, 1)), N, BucketInfo(0, 0, 0, 1)))
    assert tot0["param_push"]["sent"] == tot1["param_push"]["recv"] == sent
    assert sent == COMPRESSORS[name].payload_bytes(comp_cfg(name, **kw), N)
    assert tot0["ps_control"]["sent"] == 16


# -- validation ---------------------------------------------------------------------------------

@pytest.mark.parametrize("overrides,key", [
    (["trainer=easgd", "compressor=randomk"], "compressor.name"),    # its positions need a shared seed: no p2p
    (["trainer=easgd", "compressor=powersgd"], "compressor.name"),   # two all-reduces: no p2p
])
def test_easgd_refuses_a_compressor_that_cannot_go_point_to_point(overrides, key):
    with pytest.raises(ConfigError, match=f"{key}: EASGD's elastic difference .point to point."):
        validate(workbench.compose(overrides))


@pytest.mark.parametrize("trainer", ["bmuf", "local_sgd"])
def test_block_averages_accept_every_compressor(trainer):
    for name in COMPRESSORS:
        validate(workbench.compose([f"trainer={trainer}", f"compressor={name}"]))


# -- runs ---------------------------------------------------------------------------------------

COMMON = ["optim.lr=0.1", "optim.momentum=0.5", "data.batch_size=16", "seed=5", "trainer.eval_every=1000"]


def losses(run):
    return [r["loss"] for r in run.records() if r["kind"] == "train"]


def sent_at(record) -> int:
    return sum(c["sent"] for cat, c in record["comm"].items() if cat != "ps_control")


@pytest.mark.parametrize("trainer,comp,nproc,plain", [
    (["trainer=bmuf", "trainer.block_momentum=0.5"], ["compressor=fp16"], 2, 0),
    (["trainer=local_sgd"], ["compressor=topk", "compressor.k=0.01", "compressor.error_feedback=true"], 3, 0),
    (["trainer=bmuf", "trainer.block_momentum=0.5"], ["compressor=powersgd", "compressor.start_iter=2"], 2, 2),
])
def test_block_average_bytes_equal_the_analytic_count_and_it_learns(run_overrides, trainer, comp, nproc, plain):
    """Every compressed round sends exactly block x the analytic bytes per step (PowerSGD's first
    ``plain`` rounds are its plain all-reduce); the loss falls; a checkpoint holds the residuals."""
    steps, block = 24, 2
    run = launch_run(run_overrides + COMMON + trainer + comp + [f"trainer.block={block}", f"cluster.nproc={nproc}",
                                                                f"trainer.max_steps={steps}", "checkpoint.every=10"])
    name = run.config.trainer.name
    analytic = SPECS[name].analytic_bytes(run.config, run.summary, param_shapes(run))
    train = [r for r in run.records() if r["kind"] == "train"]
    synced = [r for r in train if r["step"] % block == 0]
    assert [sent_at(r) for r in synced[plain:]] == [analytic * block] * (len(synced) - plain)
    assert all(set(r["comm"]) == {"compressed"} and "compression_ratio" in r for r in synced[plain:])
    assert not any("payload_bytes" in r for r in train if r["step"] % 2)
    assert run.summary["compression"]["buckets"][0]["numel"] == sum(math.prod(s) for s in param_shapes(run))
    loss = losses(run)
    assert sum(loss[-4:]) < 0.95 * sum(loss[:4]), loss  # it learns a little
    state = torch.load(run.path / "checkpoints" / "step00000020" / "rank0.pt", weights_only=True)["trainer"]
    assert state["compressor"]["step"] == 10  # averaging rounds so far
    if "compressor.error_feedback=true" in comp or "compressor=powersgd" in comp:
        assert set(state["compressor"]["compressor"]["errors"]) == {0}


def test_easgd_sends_the_compressed_elastic_difference(run_overrides):
    steps, period, k = 12, 2, 0.05
    run = launch_run(run_overrides + COMMON + ["trainer=easgd", "trainer.mode=sync", f"trainer.period={period}",
                                               "cluster.nproc=3", f"trainer.max_steps={steps}", "compressor=topk",
                                               f"compressor.k={k}", "compressor.error_feedback=true"])
    shapes = param_shapes(run)
    n = sum(math.prod(s) for s in shapes)
    per_worker = run.summary["ps"]["bytes_per_worker_step"]
    assert per_worker["push"] == 8 * keep_count(k, n) / period  # one shard: the codec's bytes, nothing else
    assert per_worker["pull"] == 4 * n / period  # the centre comes back dense
    assert run.summary["ps"]["updates"] == steps // period
    exchanged = [r for r in run.records() if r["kind"] == "train" and r["step"] % period == 0]
    assert all(r["payload_bytes"] == 8 * keep_count(k, n) and r["dense_bytes"] == 4 * n for r in exchanged)
    loss = losses(run)
    assert sum(loss[-3:]) < sum(loss[:3]), loss


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("overrides", [
    ["trainer=bmuf", "trainer.block=3", "trainer.block_momentum=0.5", "cluster.nproc=2", "compressor=powersgd",
     "compressor.start_iter=2"],
    ["trainer=easgd", "trainer.mode=sync", "trainer.period=2", "cluster.nproc=3", "compressor=topk",
     "compressor.k=0.05", "compressor.error_feedback=true"],
])
def test_killed_rank_resumes_the_compressor_state(run_overrides, overrides):
    """Residuals (and PowerSGD's Q, EASGD's per-worker centres) restored from the checkpoint: the
    final model equals the uninterrupted run's, bit for bit."""
    base = run_overrides + COMMON + overrides + ["trainer.max_steps=30", "checkpoint.every=10"]
    ref = launch_run(base + ["name=ref"])
    hit = launch_run(base + ["name=killed", "cluster.max_restarts=1", "inject.kill_rank=1", "inject.kill_at_step=15"])
    assert hit.summary["status"] == "completed" and hit.summary["resumed_from_step"] == 10
    assert_same_params(torch.load(ref.path / "model.pt", weights_only=True),
                       torch.load(hit.path / "model.pt", weights_only=True), rtol=0, atol=0)


def test_none_run_is_the_plain_all_reduce(run_overrides):
    """compressor=none: no averager, the model's all-reduce in category ``allreduce``, no compression fields."""
    run = launch_run(run_overrides + COMMON + ["trainer=local_sgd", "trainer.block=2", "cluster.nproc=2",
                                               "trainer.max_steps=4", "compressor=none"])
    train = [r for r in run.records() if r["kind"] == "train"]
    analytic = SPECS["local_sgd"].analytic_bytes(run.config, run.summary, param_shapes(run))
    assert [set(r["comm"]) for r in train] == [set(), {"allreduce"}] * 2
    assert [sent_at(r) for r in train] == [0, 2 * analytic] * 2 == [0, 4 * sum(math.prod(s) for s in param_shapes(run))] * 2
    assert "compression" not in run.summary and not any("payload_bytes" in r for r in train)
