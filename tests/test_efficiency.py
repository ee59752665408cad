"""The statistical-efficiency model (workbench.perfmodel.efficiency, workbench.plan.to_target): its laws against hand
computations, the reference read from a real run, each compressor's measured update against its
expectation, and the planner's --target-accuracy (bad input before anything is profiled; a plan
ranked by time to target in the slow tier)."""
import json
import math

import pytest
import torch

import workbench
from conftest import launch_run
from workbench.perfmodel import efficiency as ef
from workbench.plan.to_target import reference_from_run
from workbench.plan.update_stats import update_stats

REF = ef.Reference(batch=128, steps=675, noise_scale=187.0, target=0.9, workers=4)


def test_the_batch_law_passes_through_the_reference_and_tends_to_s_min():
    assert ef.steps_to_target(REF, 128)[0] == pytest.approx(675)
    assert REF.s_min == pytest.approx(675 / (1 + 187 / 128))
    s = [ef.steps_to_target(REF, b)[0] for b in (64, 128, 256, 1024, 10 ** 6)]
    assert s == sorted(s, reverse=True) and s[-1] == pytest.approx(REF.s_min, rel=1e-3)
    assert s[0] == pytest.approx(REF.s_min * (1 + 187 / 64))  # McCandlish's S = S_min (1 + B_noise / B)


def test_the_compression_law_by_hand():
    st = ef.UpdateStats(rho=0.5, omega=3.0)
    noise = (1 + 3.0) * 187 / 128 + 3.0 / 4
    assert ef.steps_to_target(REF, 128, st, 4)[0] == pytest.approx(REF.s_min * (1 + noise) / (0.5 * 1.5))
    # error feedback keeps SGD's rate whatever the message's noise, at the step's scale; none at rho <= 0 or >= 2
    assert ef.steps_to_target(REF, 128, ef.UpdateStats(1.0, 99, error_feedback=True), 4)[0] == pytest.approx(675)
    assert ef.steps_to_target(REF, 128, ef.UpdateStats(0.5, 99, error_feedback=True), 4)[0] == pytest.approx(675 / 0.75)
    for rho in (0.0, 2.0, 3.5):
        steps, why = ef.steps_to_target(REF, 128, ef.UpdateStats(rho, 0.0), 4)
        assert steps is None and "rho" in why


def _law(*overrides, ranks=4):
    from workbench.trainers import SPECS
    cfg = workbench.compose(["data=digits_hard", f"cluster.nproc={ranks}", *overrides])
    return SPECS[cfg.trainer.name].update_law(cfg, ranks)


def test_each_paradigm_declares_its_update_and_the_staleness_law_by_hand():
    # synchronous updates: the batch law itself
    for ov in (["trainer=sync"], ["trainer=compressed", "compressor=topk"], ["trainer=ps", "trainer.mode=sync"],
               ["trainer=staleness", "trainer.protocol=hardsync"], ["trainer=stanza"], ["trainer=local_sgd"]):
        assert (_law(*ov).rate, _law(*ov).staleness) == (1, 0), ov
    # model averaging: the samples law; none for a block rate above 1
    assert _law("trainer=bmuf").law.startswith("samples") and _law("trainer=easgd").law.startswith("samples")
    assert _law("trainer=bmuf", "trainer.block_lr=1.5") is None
    # 1-softsync on 3 workers with lr/tau: updates of 3 gradients, 2/3 stale, at rate 1
    up = _law("trainer=staleness", "trainer.n=1", "trainer.lr_modulation=per_gradient")
    assert (up.rate, up.staleness) == (1, pytest.approx(2 / 3))
    # 3-softsync (async) with lr/tau: single gradients, 2 stale, each at 1/3 of the rate; the batch law's steps
    up = _law("trainer=staleness", "trainer.n=3", "trainer.lr_modulation=per_gradient")
    assert (up.rate, up.staleness) == (pytest.approx(1 / 3), 2)
    assert ef.steps_to_target(REF, 96, update=up)[0] == pytest.approx(REF.s_min * (1 + 187 / 96))
    # compensated Downpour: the explicit momentum 0.9 - (1 - 1/3) leaves (1 - 0.9)/(1 - 0.2333) of the rate
    up = _law("trainer=ps", "trainer.mode=async", "trainer.compensate_momentum=true")
    assert up.staleness == 2 and up.rate == pytest.approx(0.1 / (1 - 0.2333), rel=1e-3)
    # none where delayed descent diverges: below 2 sin(pi / (2 (2 tau + 1))) of the curvature's rate (Levin & May)
    ref = ef.Reference(batch=128, steps=500, noise_scale=10.0, target=0.9)  # a rate 128/138 of the curvature's
    assert ef.Update(staleness=0.5).divergence(ref, 128) == ""  # edge 2 sin(pi/4) = 1.41: 0.93 is below it
    steps, why = ef.steps_to_target(ref, 128, update=ef.Update(staleness=8))
    assert steps is None and "Levin & May" in why and "0.18" in why
    assert ef.Update(staleness=8, rate=0.1).divergence(ref, 128) == ""


def test_the_reference_is_the_first_evaluation_at_target_and_the_median_noise_scale_up_to_it():
    evals = [[10, 1.0, 0.5, 40.0], [20, 2.0, 0.8, float("nan")], [30, 3.0, 0.91, 60.0], [40, 4.0, 0.95, 900.0]]
    ref = ef.reference_from_evals(evals, 64, 0.9, workers=2)
    assert (ref.steps, ref.noise_scale, ref.batch) == (30, 50.0, 64)
    # what the measurement leaves open: the crossing after step 20, the noise scale between its quartiles
    assert ref.steps_after == 20 and ref.noise_range == (45.0, 55.0)
    lo, hi = ef.interval(ref, 128)
    law = lambda s, b: s / (1 + b / 64) * (1 + b / 128)  # noqa: E731
    assert (lo, hi) == (pytest.approx(law(21, 55.0)), pytest.approx(law(30, 45.0)))
    assert lo <= ef.steps_to_target(ref, 128)[0] <= hi
    with pytest.raises(ValueError, match="never reached 99.0%"):
        ef.reference_from_evals(evals, 64, 0.99)
    with pytest.raises(ValueError, match="no gradient noise scale"):
        ef.reference_from_evals([[e[0], e[1], e[2], None] for e in evals], 64, 0.9)


def _ccfg(name, *overrides):
    return workbench.compose([f"compressor={name}", *overrides]).compressor


def test_each_compressors_update_against_its_expectation():
    g = torch.Generator().manual_seed(0)
    shapes = [(64, 32, 3, 3), (64,), (10, 4096)]
    n = sum(math.prod(s) for s in shapes)
    grads = [torch.randn(n, generator=g) for _ in range(6)]
    fp16 = update_stats(_ccfg("fp16"), grads, shapes)
    assert fp16.rho == pytest.approx(1, abs=1e-5) and fp16.omega < 1e-6 and not fp16.error_feedback
    # Random-K without rescaling keeps k of the coordinates: rho = k, omega = (1 - k) / k in expectation
    rk = update_stats(_ccfg("randomk", "compressor.k=0.05"), grads, shapes)
    assert rk.rho == pytest.approx(0.05, rel=0.05) and rk.omega == pytest.approx(0.95 / 0.05, rel=0.05)
    # QSGD is unbiased: rho = 1, its variance positive
    q = update_stats(_ccfg("qsgd"), grads, shapes)
    assert q.rho == pytest.approx(1, abs=0.02) and q.omega > 0
    # with error feedback: the step's scale on what was sent (EF-signSGD's step_scale), no noise term, and
    # delta, the share of the energy a message keeps: Top-5 % of a Gaussian keeps 2(t phi(t) + 1 - Phi(t)) at
    # t = 1.96, 0.279; Random-K keeps k
    top = update_stats(_ccfg("topk", "compressor.k=0.05"), grads, shapes)
    assert top.error_feedback and top.rho == pytest.approx(1.0) and top.omega == 0
    assert top.delta == pytest.approx(0.279, rel=0.03) and top.ef_excess == pytest.approx((1 - top.delta) / top.delta ** 2)
    rke = update_stats(_ccfg("randomk", "compressor.k=0.05", "compressor.error_feedback=true"), grads, shapes)
    assert rke.delta == pytest.approx(0.05, rel=0.05) and rke.ef_excess > 300
    sign = update_stats(_ccfg("efsignsgd", "compressor.step_scale=0.5"), grads, shapes)
    assert sign.error_feedback and sign.rho == pytest.approx(0.5) and sign.omega == 0
    assert update_stats(_ccfg("powersgd"), grads, shapes) == ef.UpdateStats(error_feedback=True)  # no one-rank message
    assert update_stats(_ccfg("powersgd", "compressor.error_feedback=false"), grads, shapes) is None


@pytest.fixture(scope="module")
def reference_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("ref")
    run = launch_run(["cluster.nproc=2", "trainer.max_steps=40", "trainer.eval_every=5", "data.global_batch_size=32",
                      "trainer.progress=false", f"output_root={out}"])
    return run.path


def test_a_real_sync_run_gives_a_reference(reference_run):
    ref = reference_from_run(reference_run, 0.5)
    assert ref.batch == 32 and ref.workers == 2 and 0 < ref.steps <= 40 and ref.noise_scale > 0


def test_a_run_beside_its_predicted_accuracy_curve(reference_run):
    """The law's curve for the reference's own configuration passes through the reference's
    evaluations; another paradigm's is drawn beside a run's measured curve, and one without a law
    says why (the live widget draws the same figure)."""
    from workbench.analysis import accuracy_against_prediction
    from workbench.analysis.accuracy import record
    from workbench.plan.curve import predicted_curve
    from workbench.runs.handle import Run
    from workbench.widgets import LiveAccuracy
    cfg = Run(reference_run).config
    own = predicted_curve(str(reference_run), cfg)
    evals = {e[2]: e[0] for e in record(reference_run)["evals"]}
    assert len(own) >= 3 and all(step == pytest.approx(evals[acc]) for step, acc in zip(own["step"], own["test_accuracy"]))
    assert list(own["test_accuracy"]) == sorted(own["test_accuracy"])
    # half the batch: more steps to every accuracy (the batch law)
    half = predicted_curve(str(reference_run), workbench.compose(["cluster.nproc=2", "data.global_batch_size=16"]))
    assert (half["step"].to_numpy() > own["step"].to_numpy()).all()
    with pytest.raises(ValueError, match="no law"):
        predicted_curve(str(reference_run), workbench.compose(["cluster.nproc=2", "trainer=bmuf", "trainer.block_lr=1.5"]))
    fig = accuracy_against_prediction(str(reference_run), str(reference_run))
    assert [t.name.split(" ")[-1] for t in fig.data] == ["(measured)", "(docs/time_to_target.md)", "(sync)"]
    live = LiveAccuracy(str(reference_run), str(reference_run))  # an ended run: drawn once, no watcher
    assert live.ended() and len(live.figure.data) == 3



def test_the_live_figure_follows_a_run_until_it_ends(reference_run, tmp_path):
    """A run whose summary is not written yet is redrawn as its metrics grow, and once more at its end."""
    import shutil
    import time
    from workbench.widgets import LiveAccuracy
    run = tmp_path / "run"
    shutil.copytree(reference_run, run)
    (run / "summary.json").rename(tmp_path / "summary.json")
    lines = (run / "metrics.jsonl").read_text().splitlines(keepends=True)
    (run / "metrics.jsonl").write_text("".join(lines[: len(lines) // 2]))
    live = LiveAccuracy(str(run), str(reference_run), every_s=0.2)
    before = len(live.figure.data[0].x)
    (run / "metrics.jsonl").write_text("".join(lines))
    (tmp_path / "summary.json").rename(run / "summary.json")
    deadline = time.monotonic() + 30
    while len(live.figure.data[0].x) == before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(live.figure.data[0].x) > before and live.ended()


@pytest.mark.parametrize("args,says", [
    (["--reference", "RUN"], "--reference needs --target-accuracy"),
    (["--reference-steps", "50"], "--reference-steps"),
    (["--target-accuracy", "0.5", "--reference", "RUN", "--reference-steps", "50"], "--reference-steps"),
    (["--target-accuracy", "1.5", "--reference", "RUN"], "--target-accuracy"),
    (["--target-accuracy", "0.9", "--reference", "/nonexistent"], "not a run directory"),
    (["--target-accuracy", "0.999", "--reference", "RUN"], "never reached"),
    (["model=vgg16", "--target-accuracy", "0.5", "--reference", "RUN"], "its model.name is small_cnn"),
])
def test_target_accuracy_bad_input_is_one_line_before_profiling(reference_run, tmp_path, capsys, args, says):
    from workbench.plan import main
    args = [str(reference_run) if a == "RUN" else a for a in args]
    assert main([f"output_root={tmp_path}", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and says in err, err
    assert not (tmp_path / "profiles").exists()


@pytest.mark.slow
@pytest.mark.xdist_group("efficiency")  # with the next test, in one process: one profile, measured once
def test_the_plan_ranks_by_time_to_target(reference_run, tmp_path, capsys):
    from workbench.plan import main, plan
    out = tmp_path / "plan.json"
    tmp_path = reference_run.parent.parent.parent  # the reference's output_root: the profile is kept there
    assert main(["cluster.nproc=2", "data.global_batch_size=32", f"output_root={tmp_path}", "--bandwidth", "1gbit",
                 "--only", "sync,compressed/randomk,compressed/topk,ps/async", "--target-accuracy", "0.5",
                 "--reference", str(reference_run), "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "steps→T" in text and "no statistical-efficiency law" not in text
    rows = {r["paradigm"]: r for r in json.loads(out.read_text())["rows"]}
    ref = reference_from_run(reference_run, 0.5)
    assert rows["sync"]["predicted_steps_to_target"] == ref.steps  # the reference's own configuration
    assert rows["compressed/topk"]["predicted_steps_to_target"] == ref.steps  # error feedback: SGD's rate
    lo, hi = rows["sync"]["predicted_steps_interval"]
    assert lo == ref.steps_after + 1 and hi == ref.steps and "steps→T (interval)" in text
    # Random-K at its defaults (no error feedback, no rescaling) needs many more steps: ranked after both
    assert rows["compressed/randomk"]["predicted_steps_to_target"] > 20 * ref.steps
    assert rows["compressed/randomk"]["rank"] > max(rows["sync"]["rank"], rows["compressed/topk"]["rank"])
    assert rows["sync"]["to_target_law"] == "synchronous SGD" and rows["ps/async"]["to_target_law"].startswith("stale")
    # ps/async on 2 ranks: one worker beside the server, the batch law at its 16 samples a step
    assert rows["ps/async"]["predicted_steps_to_target"] == round(ref.s_min * (1 + ref.noise_scale / 16))
    # a configuration without a law (BMUF's block rate above 1): no time, ranked last, said in a footnote
    assert main(["cluster.nproc=2", "data.global_batch_size=32", f"output_root={tmp_path}", "trainer=bmuf",
                 "trainer.block_lr=1.5", "--bandwidth", "1gbit", "--target-accuracy", "0.5", "--reference",
                 str(reference_run), "--json", str(out)]) == 0
    assert "no statistical-efficiency law yet for bmuf" in capsys.readouterr().out
    assert all(r["predicted_time_to_target_s"] is None for r in json.loads(out.read_text())["rows"])
    for r in rows.values():
        if r["predicted_steps_to_target"] is not None:
            assert abs(r["predicted_time_to_target_s"] / r["predicted_step_s"] - r["predicted_steps_to_target"]) <= 0.5
    # the notebooks' API: the same rows
    df = plan(["cluster.nproc=2", "data.global_batch_size=32", f"output_root={tmp_path}"], bandwidths=["1gbit"],
              only=["sync", "compressed/randomk"], target_accuracy=0.5, reference=str(reference_run))
    assert list(df["paradigm"]) == ["sync", "compressed/randomk"]
    assert df["predicted_steps_to_target"].iloc[0] == ref.steps
    # the dashboards' what-if: time to target per paradigm, NaN where there is no law
    from workbench.analysis import whatif_frame
    from workbench.perfmodel.profile import Profile
    prof = Profile.load(next((tmp_path / "profiles").glob("*.json")))
    w = whatif_frame(prof, [1.0, 10.0], [2], ["cluster.nproc=2", "data.global_batch_size=32"], target=(0.5, str(reference_run)))
    assert {"time_to_target_s", "samples_per_s"} <= set(w.columns)
    sync = w[w["paradigm"] == "sync"]
    assert len(sync) == 2 and (sync["time_to_target_s"] > 0).all()
    assert w["time_to_target_s"].notna().any()
    # the what-if explorer's toggle: the same curves in time to the target
    from workbench.widgets import WhatIfExplorer
    ex = WhatIfExplorer(prof, workers=2, gbps=1.0, overrides=["cluster.nproc=2", "data.global_batch_size=32"],
                        target=(0.5, str(reference_run)))
    assert "time to" not in ex.figure.layout.title.text
    ex.measure.value = "time to 50%"
    assert ex.figure.layout.title.text.startswith("What-if, time to 50%")


@pytest.mark.slow
@pytest.mark.xdist_group("efficiency")
def test_verify_runs_each_paradigm_to_the_target(reference_run, tmp_path, capsys):
    """--verify with --target-accuracy: each row here run to the target (or its cap) once per seed,
    measured steps and time beside the prediction, the step time measured on the same run."""
    from workbench.plan import main
    from workbench.plan.verify_target import CAP_FACTOR
    out = tmp_path / "v.json"
    root = reference_run.parent.parent.parent  # the profile the previous test measured, where it ran first
    assert main(["cluster.nproc=2", "data.global_batch_size=32", f"output_root={root}", "cluster.timeout_s=120",
                 "--only", "sync,compressed/randomk", "--target-accuracy", "0.5", "--reference", str(reference_run),
                 "--verify", "--seeds", "2", "--json", str(out)]) == 0
    assert "reached" in capsys.readouterr().out
    rows = {r["paradigm"]: r for r in json.loads(out.read_text())["rows"]}
    ref = reference_from_run(reference_run, 0.5)
    sync, rk = rows["sync"], rows["compressed/randomk"]
    assert sync["measured_cap"] == CAP_FACTOR * ref.steps and len(sync["to_target_runs"]) == 2
    # seed 0 is the reference's own configuration and seed, evaluated every step: the same training,
    # so it first reaches the target at or just before the reference's evaluation that did
    from workbench.plan.verify_target import first_hit
    from workbench.runs.handle import Run
    run0, ref_run = Run(sync["to_target_runs"][0]), Run(reference_run)
    losses = [{r["step"]: r["loss"] for r in run.records() if r.get("kind") == "train" and r["step"] <= ref.steps}
              for run in (run0, ref_run)]
    assert losses[0] == {k: v for k, v in losses[1].items() if k in losses[0]} and len(losses[0]) >= 2
    assert first_hit(run0, 0.5)[0] <= ref.steps
    assert run0.summary["steps"] == first_hit(run0, 0.5)[0]  # it ended at the target (trainer.stop_at_accuracy)
    assert sync["measured_reached"] == "2/2" and sync["measured_steps_to_target"] > 0
    assert sync["measured_time_to_target_s"] > 0 and sync["measured_step_s"] > 0 and sync["bytes_error"] == 0
    # Random-K without error feedback: predicted far beyond the cap, and not reached within it
    assert rk["predicted_steps_to_target"] > rk["measured_cap"] and rk["measured_reached"] == "0/2"
    assert rk["measured_steps_to_target"] is None and rk["steps_error"] is None


def test_without_a_reference_the_planner_runs_one_and_keeps_it(tmp_path):
    """--target-accuracy alone: a trainer=sync run of the plan's model and data until the target,
    kept by its config and found again; one that cannot reach it in its cap is one line, exit 2."""
    from workbench.plan.reference import auto_reference
    shared = ["cluster.nproc=2", "data.global_batch_size=32"]
    first = auto_reference(shared, 2, 0.5, tmp_path, steps=200, log=lambda s: None)
    ref = reference_from_run(first, 0.5)
    assert ref.batch == 32 and ref.workers == 2 and ref.steps < 200  # it ended at the target
    runs = sorted((tmp_path / "references" / "runs").glob("*/*"))
    assert auto_reference(shared, 2, 0.5, tmp_path, steps=200, log=lambda s: None) == first
    assert sorted((tmp_path / "references" / "runs").glob("*/*")) == runs  # found again, not run again
    from workbench.core import ConfigError
    with pytest.raises(ConfigError, match=r"never reached 99\.9% .* in 5 steps .*raise --reference-steps"):
        auto_reference(shared, 2, 0.999, tmp_path, steps=5, log=lambda s: None)
