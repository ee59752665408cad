"""Compression in Stanza (workbench/trainers/stanza_messages.py): the boundary activations and their
gradients through ``compressor.activations``'s send/receive, the CONV group's all-reduce through
``compressor.name``; bytes on the meter equal to the analytic count, the same training as
single-process SGD up to the codecs' rounding, checkpointed compressor state, bad input before launch.

    .venv/bin/pytest tests/test_stanza_compress.py -x -q
"""
import json

import pytest
import torch
from omegaconf import OmegaConf

import workbench
from conftest import launch_run
from reference import single_process_sgd
from workbench.compress import COMPRESSORS
from workbench.config import ConfigError
from workbench.perfmodel import stanza as pm
from workbench.trainers.stanza import _conv_worker_bytes
from workbench.trainers.stanza_messages import conv_worker_bytes
from workbench.trainers.stanza_messages import BACKWARD, FORWARD, Link

STEPS = 3
pytestmark = pytest.mark.timeout(1200)  # a loaded 2-core box: three-process runs take minutes

BASE = ["trainer=stanza", "cluster.nproc=3", "trainer.fc_workers=1", f"trainer.max_steps={STEPS}",
        "trainer.eval_every=1000"]
# (overrides): fp16 both ways with error feedback on the all-reduce (its residuals checkpointed at
# step 2); qsgd both ways (an all-gather, stochastic rounding of the activations).
CASES = {
    "fp16": ["compressor=fp16", "compressor.error_feedback=true", "checkpoint.every=2"],
    "qsgd": ["compressor=qsgd", "compressor.levels=127"],
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = {}
    for key, extra in CASES.items():
        root = tmp_path_factory.mktemp(key)
        out[key] = launch_run([f"output_root={root}", "trainer.progress=false", "cluster.timeout_s=120", *BASE, *extra])
    return out


def _records(run, rank):
    lines = (run.path / "ranks" / f"rank{rank}.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if "comm" in r]


@pytest.mark.parametrize("case", list(CASES))
def test_metered_bytes_equal_the_analytic_count(runs, case):
    run = runs[case]
    s, cfg = run.summary, run.config
    st = s["stanza"]
    n_c, a, b = st["conv_workers"], st["boundary_floats"], s["batch_per_worker"]
    comp = COMPRESSORS[cfg.compressor.name]
    act = comp.payload_bytes(cfg.compressor, a * b)
    assert act < 4 * a * b  # the activations travel compressed
    assert st["conv_buckets"] and sum(st["conv_buckets"]) == st["params"]["features"]
    conv = conv_worker_bytes(cfg, s)
    fc = pm.stanza_fc_worker_bytes(st["params"]["classifier"], a, b, n_c, 1, act_bytes=act)
    for rank in range(n_c + 1):
        recs = _records(run, rank)
        assert [r["step"] for r in recs] == list(range(1, STEPS + 1))
        want = conv if rank < n_c else fc
        want = {k: v for k, v in want.items() if v["sent"] or v["recv"]}
        for r in recs:
            got = {k: v for k, v in r["comm"].items() if v["sent"] or v["recv"]}
            assert got.keys() == want.keys(), (rank, got.keys(), want.keys())
            for cat in want:
                tol = got[cat]["calls"] if cat.startswith("allreduce") else 0  # the meter floors each ring's share
                assert abs(got[cat]["sent"] - want[cat]["sent"]) <= tol, (rank, cat, got[cat], want[cat])
                assert abs(got[cat]["recv"] - want[cat]["recv"]) <= tol, (rank, cat, got[cat], want[cat])
            if rank == 0:  # the spec's analytic count (the bytes suite's) is the CONV worker's total
                assert abs(sum(c["sent"] for c in r["comm"].values()) - _conv_worker_bytes(cfg, s, [])) <= 1


def rounded_sgd(overrides, workers: int, steps: int, codec):
    """Single-process SGD on the global batch with the boundary activations and their gradients
    passed through ``codec`` (element by element, so the split into the CONV workers' pieces does
    not matter): Stanza with that codec on its activations and a dense CONV all-reduce."""
    return single_process_sgd(overrides, workers, steps, boundary=codec)


def _relative(got, want, init):
    return {k: float((got[k] - want[k]).norm() / (want[k] - init[k]).norm()) for k in want}


def test_fp16_trains_as_stanza_with_rounded_activations(runs):
    """fp16 on both: the run is the global batch's SGD with its boundary tensors rounded to float16
    (a rounding that alone moves the parameters over 1 % off plain SGD in 3 steps), up to the fp16
    all-reduce's rounding, which error feedback keeps small: Stanza's sum over the CONV group and
    the FC side's share of the global-batch loss survive compression."""
    run = runs["fp16"]
    overrides, workers = [*BASE, *CASES["fp16"]], run.summary["workers"]
    got = torch.load(run.path / "model.pt")
    want = rounded_sgd(overrides, workers, STEPS, lambda t: t.half().float())
    plain, init = single_process_sgd(overrides, workers, STEPS), single_process_sgd(overrides, workers, 0)
    assert max(_relative(got, want, init).values()) < 2e-3, _relative(got, want, init)
    assert max(_relative(got, plain, init).values()) > 1e-2  # the activations did travel rounded


def test_qsgd_moves_the_parameters_as_sgd_does(runs):
    """qsgd on both (stochastic rounding): after 3 steps each parameter has moved along plain SGD's
    update, by about its length (the CONV gradients summed, not averaged, over the CONV group: half
    of it would be a factor 0.5 on the conv part)."""
    run = runs["qsgd"]
    overrides, workers = [*BASE, *CASES["qsgd"]], run.summary["workers"]
    got = torch.load(run.path / "model.pt")
    want, init = single_process_sgd(overrides, workers, STEPS), single_process_sgd(overrides, workers, 0)
    for k in want:
        d = want[k] - init[k]
        along = float(((got[k] - init[k]) * d).sum() / d.norm() ** 2)
        assert 0.7 < along < 1.3, (k, along)
    assert any(not torch.equal(got[k], want[k]) for k in want)


def test_compressor_state_is_checkpointed(runs):
    """A CONV worker's checkpoint holds the all-reduce's error-feedback residuals and the step count
    the codecs' draws depend on; an FC worker's holds the step count."""
    files = sorted((runs["fp16"].path / "checkpoints").rglob("rank*.pt"))
    by_rank = {int(f.stem.removeprefix("rank")): torch.load(f, weights_only=True)["trainer"] for f in files}
    assert set(by_rank) == {0, 1, 2}
    for rank, state in by_rank.items():
        assert state["stanza_steps"] == 2
        if rank < 2:
            errors = state["compressor"]["compressor"]["errors"]
            assert state["compressor"]["step"] == 2 and errors and all(e.abs().sum() > 0 for e in errors.values())
        else:
            assert "compressor" not in state


# ---------------------------------------------------------------------------------------------
# The codec of one boundary message, in this process

def _comp(*overrides):
    return workbench.compose(["trainer=stanza", *overrides]).compressor


def test_link_sends_fp16_and_never_keeps_a_residual():
    comp = _comp("compressor=fp16", "compressor.error_feedback=true")
    link = Link(comp, 12, torch.device("cpu"), seed=0, direction=FORWARD)
    x = torch.randn(3, 4)
    wire = link.encode(x, 0, 0)
    assert wire.dtype == torch.float16 and wire.numel() == 12 and link.buffer((3, 4)).shape == (12,)
    assert torch.equal(link.decode(wire, 0, 0), x.reshape(-1).half().float())
    assert torch.equal(link.encode(x, 0, 1), wire)  # no error feedback: the same tensor, the same payload


def test_link_without_codec_sends_the_tensor_itself():
    link = Link(_comp("compressor=topk", "compressor.activations=none"), 12, torch.device("cpu"), 0, BACKWARD)
    x = torch.randn(3, 4)
    assert link.codec is None and link.buffer((3, 4)).shape == (3, 4)
    wire = link.encode(x, 0, 0)
    assert wire.data_ptr() == x.data_ptr() and link.decode(wire, 0, 0) is wire


def test_link_qsgd_is_reproducible_per_message():
    comp = _comp("compressor=qsgd", "compressor.levels=4")
    fwd, bwd = (Link(comp, 1000, torch.device("cpu"), 7, d) for d in (FORWARD, BACKWARD))
    x = torch.randn(1000)
    wire = fwd.encode(x, 1, 5)
    assert wire.dtype == torch.uint8 and wire.numel() == COMPRESSORS["qsgd"].payload_bytes(comp, 1000)
    assert torch.equal(fwd.encode(x, 1, 5), wire)  # the same message: the same draws
    others = [fwd.encode(x, 1, 6), fwd.encode(x, 0, 5), bwd.encode(x, 1, 5)]  # step, CONV worker, direction
    assert all(not torch.equal(o, wire) for o in others)
    assert (fwd.decode(wire, 1, 5) - x).abs().max() <= x.norm() / 4 + 1e-6  # within one level


# ---------------------------------------------------------------------------------------------
# Bad input: one line, before any process starts

def test_sparsifier_is_refused_for_the_activations_with_the_hint(tmp_path):
    cfg = workbench.compose([f"output_root={tmp_path}", "trainer=stanza", "compressor=topk"])
    with pytest.raises(ConfigError) as e:
        workbench.launch(cfg, progress=False)
    msg = str(e.value)
    assert "\n" not in msg and "compressor.activations" in msg and "fp16" in msg and "=none" in msg
    assert not (tmp_path / "runs").exists()
    from workbench.config import validate
    for ok in (["compressor=topk", "compressor.activations=fp16"], ["compressor=powersgd", "compressor.activations=fp16"],
               ["compressor=none", "compressor.activations=bf16"]):
        validate(workbench.compose(["trainer=stanza", *ok]))


def test_labels_name_the_compressor():
    from workbench.spec import SPECS
    cfg = workbench.compose(["trainer=stanza", "compressor=fp16"])
    get = lambda k: OmegaConf.select(cfg, k)  # noqa: E731
    assert SPECS["stanza"].paradigm(get) == "stanza/n_f=1+fp16"


# ---------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_killed_rank_restarts_and_matches_uninterrupted_compressed_run(tmp_path):
    """fp16 all-reduce with error feedback, qsgd activations: a CONV worker SIGKILLed after the
    checkpoint at step 4 restarts with its residuals and step count, and the final weights equal an
    uninterrupted run's bit for bit (the same residuals, the same random draws)."""
    from reference import assert_same_params
    common = [f"output_root={tmp_path}", "trainer.progress=false", "cluster.timeout_s=120", "trainer=stanza",
              "cluster.nproc=3", "trainer.fc_workers=1", "trainer.max_steps=8", "trainer.eval_every=1000",
              "checkpoint.every=4", "compressor=fp16", "compressor.error_feedback=true", "compressor.activations=qsgd"]
    ref = launch_run(common + ["name=ref"])
    hit = launch_run(common + ["name=killed", "cluster.max_restarts=1", "inject.kill_rank=1", "inject.kill_at_step=6"])
    s = hit.summary
    assert s["status"] == "completed" and s["restarts"] == 1 and s["resumed_from_step"] == 4
    assert_same_params(torch.load(ref.path / "model.pt", weights_only=True),
                       torch.load(hit.path / "model.pt", weights_only=True), rtol=0, atol=0)
