"""trainer=sync end to end: equivalence with single-process SGD, and everything the run directory
must hold."""
import json

import pytest
import torch

import workbench
from conftest import launch_run
from reference import assert_same_params, single_process_sgd


@pytest.mark.parametrize("workers", [2, 3])
def test_sync_equals_single_process_sgd(run_overrides, workers):
    steps = 30  # > 1 epoch at batch 3*16 (1437 samples), so epoch reshuffles are covered too
    common = ["optim.lr=0.05", "optim.momentum=0.9", "optim.weight_decay=0.001", "optim.warmup_steps=5",
              "data.batch_size=16", "seed=7"]
    run = launch_run(run_overrides + common + [f"cluster.nproc={workers}", f"trainer.max_steps={steps}",
                                               "trainer.eval_every=1000", "trainer.bucket_cap_mb=0.01"])
    assert run.status == "completed"
    dist_state = torch.load(run.path / "model.pt", weights_only=True)
    ref = single_process_sgd(run_overrides + common, workers, steps)
    # Two ranks' mean is one exact float sum (8.9e-8 from the reference after 30 steps); three ranks'
    # ring sums in another order than one process, and 30 steps with momentum grow that rounding to
    # 1e-4–7.5e-4 on a CPU without AVX2 (measured 2026-12-03), where one step fewer is 2.4e-2 away
    # and another sample order 0.75: a tolerance of 2e-3 still tells a step or a batch apart.
    assert_same_params(dist_state, ref, atol=1e-5 if workers == 2 else 2e-3)
    # sanity: the reference really moved away from the initial weights
    init = single_process_sgd(run_overrides + common, workers, 0)
    assert any(not torch.allclose(init[k], ref[k]) for k in ref)


def test_run_directory_holds_everything(run_overrides, tmp_path):
    run = launch_run(run_overrides + ["cluster.nproc=2", "trainer.max_steps=12", "trainer.eval_every=5", "name=store"])
    d = run.path
    assert d.parent.parent == tmp_path / "runs" and d.name.endswith("_store")
    for f in ("config.yaml", "env.json", "metrics.jsonl", "summary.json", "model.pt",
              "ranks/rank0.jsonl", "ranks/rank1.jsonl", "system/rank0.jsonl", "system/rank1.jsonl"):
        assert (d / f).exists(), f
    assert list(d.glob("events.out.tfevents.*")), "no TensorBoard event file"
    env = json.loads((d / "env.json").read_text())
    assert env["packages"]["torch"] and env["cpu_count"] and "commit" in env["git"]
    assert workbench.Run(d).config.cluster.nproc == 2

    recs = workbench.Run(d).records()
    train = [r for r in recs if r["kind"] == "train"]
    evals = [r for r in recs if r["kind"] == "eval"]
    assert [r["step"] for r in train] == list(range(1, 13))
    assert [r["step"] for r in evals] == [5, 10, 12]
    n_params = sum(v.numel() for v in torch.load(d / "model.pt", weights_only=True).values())
    for r in train:
        for k in ("time", "loss", "lr", "samples_per_s", "step_time", "bytes_sent"):
            assert k in r
        # 2 ranks: ring all-reduce sends 2(p-1)/p * N = N bytes per step (every bucket once)
        assert r["comm"]["allreduce"]["sent"] == n_params * 4
    assert all(0 <= e["test_accuracy"] <= 1 for e in evals)

    s = run.summary
    assert s["status"] == "completed" and s["steps"] == 12 and s["workers"] == 2
    assert s["final_test_accuracy"] == evals[-1]["test_accuracy"]
    assert s["bytes_per_step"] == n_params * 4
    assert s["samples_per_s"] > 0 and s["global_batch"] == 32
    assert set(s["bytes_by_rank"]) == {"0", "1"}

    rank1 = [json.loads(l) for l in (d / "ranks/rank1.jsonl").read_text().splitlines()]
    assert rank1[-1]["step"] == 12 and rank1[-1]["comm"]["allreduce"]["sent"] == n_params * 4

    df = workbench.load_runs(tmp_path)
    assert len(df) == 1 and df.loc[0, "status"] == "completed" and df.loc[0, "cfg.cluster.nproc"] == 2
    m = workbench.load_metrics(tmp_path)
    assert "bytes.allreduce" in m.columns and (m["kind"] == "eval").sum() == 3


def test_divergence_is_reported(run_overrides):
    run = launch_run(run_overrides + ["cluster.nproc=2", "optim.lr=1e12", "trainer.max_steps=50"], check=False)
    assert run.status == "diverged"
    assert "loss is" in run.summary["error"]
