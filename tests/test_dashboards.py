"""The dashboard figure builders on small fixed tables (right traces, values, axes and units), the
analytic what-if models on hand-computed cases, the widgets, and one real launch through
``launch_variants`` to show the figures are built from what a run writes."""
import json
import math

import pandas as pd
import pytest

from workbench import analysis as an, variants

MiB = 2**20


def _runs() -> pd.DataFrame:
    rows = []
    for i, (trainer, comp, w, sps, acc) in enumerate([
        ("sync", "none", 1, 100.0, 0.80), ("sync", "none", 2, 180.0, 0.82), ("sync", "none", 2, 220.0, 0.83),
        ("ps", "none", 2, 90.0, 0.70), ("compressed", "powersgd", 2, 250.0, 0.75),
    ]):
        rows.append({"run_dir": f"/r/{i}", "run": f"10-00-0{i}_{trainer}", "status": "completed", "trainer": trainer,
                     "workers": w, "samples_per_s": sps, "final_test_accuracy": acc, "bytes_per_step": 1000.0 * (i + 1),
                     "steps": 20, "wall_time_s": 2.0, "cfg.trainer.name": trainer, "cfg.compressor.name": comp})
    return an.label_runs(pd.DataFrame(rows))


def _metrics(runs: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for i, d in enumerate(runs["run_dir"]):
        for step in (10, 20):
            rows.append({"run_dir": d, "kind": "train", "step": step, "time": step * 0.1,
                         "bytes.allreduce": 1000.0 * (i + 1) * step, "bytes.grad_push": 10.0 * step, "bytes.eval": 5.0})
            rows.append({"run_dir": d, "kind": "eval", "step": step, "time": step * 0.1 * (i + 1),
                         "test_accuracy": 0.5 + 0.02 * i + 0.01 * step})
    return an.attach(pd.DataFrame(rows), runs)


def test_labels_name_paradigm_and_are_unique():
    r = _runs()
    assert list(r["paradigm"]) == ["sync", "sync", "sync", "ps", "compressed/powersgd"]
    assert an.paradigm_of({"cfg.trainer.name": "ps", "cfg.trainer.mode": "async", "cfg.compressor.name": "none"}) == "ps/async"
    assert an.paradigm_of({"cfg.trainer.name": "staleness", "cfg.trainer.protocol": "softsync"}) == "staleness/softsync"
    assert r["label"].is_unique
    assert r.loc[0, "label"] == "sync W=1"
    # the two sync W=2 runs collide and get their run names appended
    assert r.loc[1, "label"] == "sync W=2 (10-00-01_sync)"


def test_accuracy_vs_time_one_line_per_run_with_eval_points():
    runs = _runs()
    m = _metrics(runs)
    fig = an.accuracy_vs_time(m)
    assert [t.name for t in fig.data] == sorted(runs["label"])
    tr = next(t for t in fig.data if t.name == "ps W=2")  # run index 3
    assert list(tr.x) == pytest.approx([1.0 * 4, 2.0 * 4])
    assert list(tr.y) == pytest.approx([0.5 + 0.06 + 0.1, 0.5 + 0.06 + 0.2])
    assert fig.layout.xaxis.title.text == "wall-clock time (s)"
    assert fig.layout.yaxis.tickformat == ".0%"
    # one colour per paradigm
    sync_colors = {t.line.color for t in fig.data if t.legendgroup == "sync"}
    assert len(sync_colors) == 1
    by_step = an.accuracy_vs_time(m, x="step")
    assert list(by_step.data[0].x) == [10, 20] and by_step.layout.xaxis.title.text == "optimizer steps"


def test_throughput_vs_workers_means_repeats():
    fig = an.throughput_vs_workers(_runs())
    lines = {t.name: t for t in fig.data if t.showlegend is not False}
    assert set(lines) == {"sync", "ps", "compressed/powersgd"}
    assert list(lines["sync"].x) == [1, 2]
    assert list(lines["sync"].y) == pytest.approx([100.0, 200.0])  # mean of 180 and 220
    spread = [t for t in fig.data if t.name == "sync (runs)"]
    assert len(spread) == 1 and sorted(spread[0].y) == [100.0, 180.0, 220.0]
    assert fig.layout.yaxis.title.text == "samples/s"


def test_time_to_accuracy_first_eval_reaching_target():
    runs = _runs()
    m = _metrics(runs)
    # run i scores 0.6+0.02i at step 10 (time i+1) and 0.7+0.02i at step 20 (time 2(i+1)); target 0.705:
    t = an.time_to_accuracy_table(m, 0.705).set_index("label")
    assert not t.loc["sync W=1", "reached"] and math.isnan(t.loc["sync W=1", "time_to_target_s"])
    assert t.loc["sync W=1", "best_accuracy"] == pytest.approx(0.70)
    assert t.loc["ps W=2", "time_to_target_s"] == pytest.approx(2.0 * 4) and t.loc["ps W=2", "steps_to_target"] == 20
    assert t.loc["sync W=2 (10-00-01_sync)", "time_to_target_s"] == pytest.approx(4.0)
    fig = an.time_to_accuracy(m, 0.705)
    assert fig.layout.title.text == "Time to 70% test accuracy"
    bar = fig.data[0]
    assert bar.x[0] == "sync W=2 (10-00-01_sync)"  # fastest first
    assert bar.x[-1] == "sync W=1" and bar.y[-1] == 0.0
    assert any(s.startswith("not reached") for s in bar.text)


def test_bytes_per_step_stacks_categories_in_mib_without_eval():
    runs = _runs()
    fig = an.bytes_per_step(_metrics(runs))
    assert fig.layout.barmode == "stack"
    assert [t.name for t in fig.data] == ["allreduce", "grad_push"]
    ar = dict(zip(fig.data[0].x, fig.data[0].y))
    assert ar["sync W=1"] == pytest.approx(1000.0 * 15 / MiB)  # mean of steps 10 and 20
    assert fig.layout.yaxis.title.text == "MiB per step"


def test_pareto_front_marks_non_dominated_runs():
    df = pd.DataFrame({"x": [1, 2, 3, 2, 0.5], "y": [0.9, 0.8, 0.5, 0.7, 0.95]})
    assert list(an.pareto_mask(df, "x", "y")) == [True, True, True, False, True]
    fig = an.pareto_front(_runs())
    front = next(t for t in fig.data if t.name == "Pareto front")
    # (250, .75) compressed, (220, .83) sync, (100, .80) is dominated by (180,.82) and (220,.83)
    assert list(front.x) == [220.0, 250.0]
    assert list(front.y) == [0.83, 0.75]
    assert fig.layout.xaxis.title.text == "throughput (samples/s)"


def test_empty_inputs_give_annotated_figures():
    empty = pd.DataFrame()
    for fig in (an.accuracy_vs_time(empty), an.bytes_per_step(empty), an.time_to_accuracy(empty),
                an.throughput_vs_workers(an.label_runs(empty)), an.pareto_front(an.label_runs(empty)),
                an.metric_histogram(empty)):
        assert len(fig.data) == 0 and len(fig.layout.annotations) == 1


def test_histogram_sums_recorded_histograms():
    m = pd.DataFrame({"run_dir": ["a"] * 3, "label": ["r"] * 3, "paradigm": ["s"] * 3, "kind": ["eval"] * 3,
                      "staleness_hist": [{"0": 2, "1": 1}, {"1": 3, "2": 1}, None]})
    fig = an.metric_histogram(m, "staleness")
    assert list(fig.data[0].x) == [0.0, 1.0, 2.0] and list(fig.data[0].y) == [2.0, 4.0, 1.0]
    m2 = pd.DataFrame({"label": ["r"] * 3, "paradigm": ["s"] * 3, "staleness_hist": [[1, 2], [0, 1, 5], None]})
    assert list(an.metric_histogram(m2).data[0].y) == [1.0, 3.0, 5.0]


def test_compression_table_means_and_speed_relative_to_none():
    runs = an.label_runs(pd.DataFrame([
        {"run_dir": "a", "run": "a", "workers": 2, "samples_per_s": 100.0, "final_test_accuracy": 0.9,
         "bytes_per_step": 4.0 * MiB, "cfg.trainer.name": "compressed", "cfg.compressor.name": "none"},
        {"run_dir": "b", "run": "b", "workers": 2, "samples_per_s": 50.0, "final_test_accuracy": 0.8,
         "bytes_per_step": 1.0 * MiB, "cfg.trainer.name": "compressed", "cfg.compressor.name": "fp16"}]))
    runs["label"] = ["none", "fp16"]
    m = pd.DataFrame({"run_dir": ["a", "b", "b"], "kind": ["train"] * 3, "encode_ms": [0.0, 1.0, 3.0]})
    t = an.compression_table(runs, m).set_index("label")
    assert t.loc["fp16", "encode_ms"] == 2.0
    assert t.loc["fp16", "speed_vs_none"] == 0.5
    assert t.loc["fp16", "compression_ratio"] == 4.0  # from bytes, no recorded ratio
    assert t.loc["none", "MiB_per_step"] == 4.0


# -- what-if: the planner's model ---------------------------------------------------------------------

from perfmodel_fixtures import synthetic_profile  # noqa: E402

PROF = synthetic_profile()


def test_the_stand_in_models_are_gone():
    """One performance model: analysis calls workbench.perfmodel, it carries none of its own."""
    from workbench.runs import table
    for name in ("ModelProfile", "profile_model", "step_time_sync", "step_time_ps", "step_time_stanza",
                 "step_time_compressed", "ring_allreduce_s", "predicted_throughput"):
        for mod in (an, table, an.figures, an.whatif):
            assert not hasattr(mod, name), name


def test_crossover_is_where_compression_stops_paying():
    from workbench.perfmodel import paradigms as P
    g = an.crossover_gbps(PROF, 8, "powersgd")
    assert g == g and g > 0

    def gain(x):
        cl = P.Cluster(8, x * 1e9 / 8, 50e-6)
        return P.sync(PROF, cl).step_s - P.compressed(PROF, cl, "powersgd").step_s
    assert gain(g * 0.9) > 0 > gain(g * 1.1)


def test_whatif_curves_panels_from_the_planner():
    frame = an.whatif_frame(PROF, [1.0, 10.0], [4], overrides=["trainer=ps"])
    assert set(frame["paradigm"]) == {"ps/sync", "ps/async"}
    fig = an.whatif_curves(PROF, workers=4, gbps=10.0, overrides=["trainer=bmuf"], points=3)
    assert len(fig.data) == 2  # one paradigm x 2 panels
    assert fig.layout.xaxis.type == "log" and fig.layout.xaxis.title.text == "bandwidth (Gbit/s)"
    assert fig.layout.xaxis2.title.text == "ranks" and "perfmodel" in fig.layout.title.text


def test_whatif_frames_are_kept_per_profile_and_arguments():
    """A slider moves one panel's axis: the other panel's frame is the kept one, equal to a fresh
    plan, and a caller's change to it reaches no later caller; another profile object plans anew."""
    import copy

    from workbench.analysis import whatif
    whatif._FRAMES.clear()
    args = ([1.0, 10.0], [4], ["trainer=ps"])
    first = an.whatif_frame(PROF, *args)
    first["samples_per_s"] = 0.0
    again = an.whatif_frame(PROF, *args)
    assert len(whatif._FRAMES) == 1 and (again["samples_per_s"] > 0).all()
    pd.testing.assert_frame_equal(again, whatif._whatif_frame(PROF, *args, 1.0, "50us"))
    an.whatif_frame(copy.deepcopy(PROF), *args)
    an.whatif_frame(PROF, [1.0], [4], ["trainer=ps"])
    assert len(whatif._FRAMES) == 3


def test_analysis_loads_without_the_running_side():
    """Analysis apart from running: importing it (and building a table and a figure) loads no trainer,
    launcher or variant launcher, so a notebook reading old runs needs none of them."""
    import subprocess
    import sys
    code = ("import sys, pandas as pd; from workbench import analysis as an; "
            "an.accuracy_vs_time(pd.DataFrame()); an.summary_table(an.label_runs(pd.DataFrame())); "
            "print(sorted(m for m in sys.modules if m.startswith(('workbench.trainers', 'workbench.launcher', "
            "'workbench.variants', 'workbench.ps', 'workbench.worker'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


# -- per-rank bytes from run summaries ----------------------------------------------------------------

def test_rank_bytes_reads_summaries(tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    (d / "summary.json").write_text(json.dumps({"steps": 4, "bytes_by_rank": {
        "0": {"grad_push": 0, "param_pull": 8 * MiB, "eval": 24}, "1": {"grad_push": 4 * MiB, "eval": 24}}}))
    runs = pd.DataFrame([{"run_dir": str(d), "run": "run", "label": "ps"}])
    f = an.rank_bytes(runs)
    assert set(f["category"]) == {"grad_push", "param_pull"}
    assert f[(f["rank"] == 0) & (f["category"] == "param_pull")]["MiB_per_step"].item() == 2.0
    fig = an.bytes_per_rank(f)
    assert fig.layout.barmode == "stack" and {t.name for t in fig.data} == {"grad_push", "param_pull"}


# -- widgets ----------------------------------------------------------------------------------------

def test_run_explorer_switches_panels_and_filters():
    from workbench.widgets import RunExplorer
    runs = _runs()
    ex = RunExplorer(runs, _metrics(runs), target=0.68)
    assert ex.figure.layout.title.text == "Test accuracy vs wall-clock time" and len(ex.figure.data) == 5
    ex.paradigms.value = ("ps",)
    assert [t.name for t in ex.figure.data] == ["ps W=2"]
    ex.panel.value = "Pareto front"
    assert ex.figure.layout.title.text == "Accuracy / throughput trade-off"
    ex.panel.value = "time to accuracy"
    ex.target.value = 0.5
    assert ex.figure.layout.title.text == "Time to 50% test accuracy"


def test_whatif_explorer_follows_its_sliders():
    from workbench.widgets import WhatIfExplorer
    ex = WhatIfExplorer(PROF, workers=4, gbps=10.0, overrides=["trainer=sync"])
    assert "4 ranks" in ex.figure.layout.annotations[0].text
    ex.workers.value = 6
    assert "6 ranks" in ex.figure.layout.annotations[0].text
    ex.compressor.value = "topk"
    assert ex.crossover == pytest.approx(an.crossover_gbps(PROF, 6, "topk"), nan_ok=True)
    assert "Gbit/s" in ex.note.value


def test_variant_overrides_win_and_groups_come_first():
    base = variants.base_overrides(cluster="local", nproc=2, output_root="/tmp/x")
    out = variants._order(base, ["trainer.mode=async", "trainer=ps", "cluster=local_gpu", "cluster.nproc=5"])
    groups = [o for o in out if variants._is_group(o)]
    assert out[:len(groups)] == groups  # every group choice before every key
    assert groups.index("cluster=local_gpu") > groups.index("cluster=local")  # the variant's choice wins
    assert out.index("cluster.nproc=5") > out.index("cluster.nproc=2") and out[-1] == "cluster.nproc=5"


# -- real runs ----------------------------------------------------------------------------------------

def test_launch_variants_runs_skips_and_plots_real_runs(tmp_path):
    base = variants.base_overrides(nproc=2, max_steps=6, eval_every=3, output_root=str(tmp_path),
                             extra=["trainer.progress=false", "cluster.timeout_s=60"])
    runs, table = variants.launch_variants({"all-reduce": [], "not-a-trainer": ["trainer=no_such_trainer"],
                                      "bad lr": ["optim.lr=-1"]}, base, progress=False)
    st = dict(zip(table["variant"], table["status"]))
    assert st == {"all-reduce": "completed", "not-a-trainer": "skipped", "bad lr": "skipped"}
    reasons = dict(zip(table["variant"], table["reason"]))
    assert "not registered" in reasons["not-a-trainer"] and "optim.lr" in reasons["bad lr"]
    assert len(runs) == 1
    R, M = an.load(runs, variants=table)
    assert list(R["label"]) == ["all-reduce"] and R.loc[0, "workers"] == 2 and R.loc[0, "steps"] == 6
    fig = an.accuracy_vs_time(M, x="step")
    assert list(fig.data[0].x) == [3, 6]  # the evaluations the run made
    acc = [r["test_accuracy"] for r in runs[0].records() if r.get("kind") == "eval"]
    assert list(fig.data[0].y) == pytest.approx(acc)
    b = an.bytes_per_step(M)
    assert [t.name for t in b.data] == ["allreduce"]
    assert b.data[0].y[0] * MiB == pytest.approx(runs[0].summary["bytes_per_step"])
