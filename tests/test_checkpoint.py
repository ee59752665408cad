"""Checkpoints and restarts: a SIGKILLed rank with restarts enabled still completes, with the same
final parameters as an uninterrupted run; `workbench resume` continues a stopped run."""
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import workbench
from conftest import launch_run
from reference import assert_same_params

ROOT = Path(__file__).resolve().parent.parent
COMMON = ["cluster.nproc=2", "trainer.max_steps=40", "trainer.eval_every=15", "checkpoint.every=10",
          "optim.lr=0.05", "seed=3"]


def test_checkpoint_files_are_safe_to_load(run_overrides):
    run = launch_run(run_overrides + COMMON)
    files = sorted((run.path / "checkpoints").rglob("rank*.pt"))
    # keep=2 per rank: steps 20 and 30 (no checkpoint at the final step: model.pt has it)
    assert [f.parent.name for f in files] == ["step00000020", "step00000020", "step00000030", "step00000030"]
    state = torch.load(files[0], weights_only=True)  # no arbitrary unpickling needed
    assert state["step"] == 20 and "model" in state["trainer"] and "optimizer" in state["trainer"]
    assert "torch" in state["rng"]


@pytest.mark.slow
@pytest.mark.timeout(400)
@pytest.mark.parametrize("trainer", [["trainer=sync"], ["trainer=stanza", "trainer.fc_workers=1"]])
def test_killed_rank_restarts_and_matches_uninterrupted_run(run_overrides, trainer):
    ref = launch_run(run_overrides + COMMON + trainer + ["name=ref"])
    hit = launch_run(run_overrides + COMMON + trainer + ["name=killed", "cluster.max_restarts=1", "inject.kill_rank=1",
                                                         "inject.kill_at_step=25"])
    s = hit.summary
    assert s["status"] == "completed" and s["restarts"] == 1 and s["resumed_from_step"] == 20
    assert_same_params(torch.load(ref.path / "model.pt", weights_only=True),
                       torch.load(hit.path / "model.pt", weights_only=True), rtol=0, atol=0)
    steps = [r["step"] for r in hit.records() if r["kind"] == "train"]
    assert steps == list(range(1, 41))  # the steps after the checkpoint are not reported twice
    assert s["bytes_per_step"] == ref.summary["bytes_per_step"]


def test_resume_a_stopped_run(run_overrides):
    with pytest.raises(workbench.RunFailed):
        launch_run(run_overrides + COMMON + ["inject.kill_rank=0", "inject.kill_at_step=33"])
    failed = sorted((Path(run_overrides[0].split("=", 1)[1]) / "runs").rglob("summary.json"))[0].parent
    assert json.loads((failed / "summary.json").read_text())["status"] == "failed"
    # fault injection only fires on a first attempt, never in a resumed run
    p = subprocess.run([sys.executable, "-m", "workbench", "resume", str(failed)], cwd=ROOT, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    s = json.loads((failed / "summary.json").read_text())
    assert s["status"] == "completed" and s["resumed_from_step"] == 30 and s["steps"] == 40


def test_resume_without_checkpoint_is_a_clear_error(tmp_path):
    p = subprocess.run([sys.executable, "-m", "workbench", "resume", str(tmp_path)], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "config.yaml" in p.stderr


PS = ["cluster.nproc=3", "trainer.num_servers=1", "trainer.max_steps=30", "trainer.eval_every=15",
      "checkpoint.every=10", "optim.lr=0.05", "seed=5"]


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_parameter_server_restart_matches_uninterrupted_run(run_overrides):
    """Hardsync PS: a worker SIGKILLed after its checkpoint at step 10; the group restarts, the server
    reloads its shard, optimizer state and clock, and the final weights equal an uninterrupted run's."""
    ref = launch_run(run_overrides + PS + ["trainer=ps", "trainer.mode=sync", "name=ref"])
    hit = launch_run(run_overrides + PS + ["trainer=ps", "trainer.mode=sync", "name=killed", "cluster.max_restarts=1",
                                           "inject.kill_rank=1", "inject.kill_at_step=15"])
    s = hit.summary
    assert s["status"] == "completed" and s["restarts"] == 1 and s["resumed_from_step"] == 10
    assert_same_params(torch.load(ref.path / "model.pt", weights_only=True),
                       torch.load(hit.path / "model.pt", weights_only=True), rtol=0, atol=0)
    # the server's clock went on from its checkpoint: 30 updates in all, as in the reference
    assert s["ps"]["updates"] == ref.summary["ps"]["updates"] == 30
    server = torch.load(hit.path / "checkpoints" / "step00000020" / "rank2.pt", weights_only=True)
    assert server["rule"]["timestamp"] == 20 and server["rule"]["optimizer"]["state"]
    # saved after the barrier's release: both workers compute on the weights of clock 20 (an empty
    # map would let a restored bounded-staleness server advance past them)
    assert server["rule"]["computing"] == {0: 20, 1: 20}


@pytest.mark.timeout(400)
@pytest.mark.parametrize("trainer", [
    ["trainer=staleness", "trainer.n=2", "trainer.max_staleness=1"],   # bounded staleness: clocks and buffers
    ["trainer=easgd", "trainer.period=2"],                             # elastic averaging: the centre
])
@pytest.mark.slow
def test_asynchronous_servers_survive_a_killed_server(run_overrides, trainer):
    """The *server* dies mid-run; with a restart everything resumes from the newest complete
    checkpoint and the run completes with the bound still enforced."""
    hit = launch_run(run_overrides + PS + trainer + ["cluster.max_restarts=1", "inject.kill_rank=2",
                                                     "inject.kill_at_step=24"])  # server updates, after step 10
    s = hit.summary
    assert s["status"] == "completed" and s["restarts"] == 1 and s["resumed_from_step"] in (10, 20)  # not None: from a checkpoint
    assert s["steps"] == 30 and s["final_test_accuracy"] > 0.3  # chance is 0.1; 30 asynchronous steps reach 0.5-0.7
    if "trainer=staleness" in trainer:
        assert s["ps"]["staleness_max"] <= 1
