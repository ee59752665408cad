"""Experiment tracking (workbench/tracking/): real runs (2 ranks, small CNN, digits) logged to a real
MLflow SQLite store (the default) and read back with MLflow's own client; a tracker that cannot reach its store warns
and the run completes; W&B in offline mode writes its run files."""
import importlib.util
import json
from pathlib import Path

import pytest

from conftest import launch_run

needs_mlflow = pytest.mark.skipif(importlib.util.find_spec("mlflow") is None,
                                  reason="mlflow not installed (pip install 'workbench[mlflow]')")
STEPS = ["cluster.nproc=2", "trainer.max_steps=12", "trainer.log_every=1", "trainer.eval_every=6"]


@needs_mlflow
def test_mlflow_run_is_found_with_params_metrics_and_status(run_overrides, tmp_path, monkeypatch):
    import mlflow
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)  # SQLite needs no switch
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")  # MLflow's own default would put artifacts in ./mlruns here
    run = launch_run(run_overrides + STEPS + ["tracking=mlflow", "tracking.experiment=wb-test"])
    assert run.summary["status"] == "completed"
    info = json.loads((run.path / "tracking.json").read_text())
    assert info["state"] == "ended" and "warning" not in info, info
    assert info["uri"] == f"sqlite:///{tmp_path.absolute()}/mlflow.db"  # default: <output_root>/mlflow.db
    assert not (tmp_path / "mlruns").exists() and not Path("mlruns").exists()  # artifacts beside the db instead

    mlflow.set_tracking_uri(info["uri"])
    found = mlflow.search_runs(experiment_names=["wb-test"], output_format="list")
    assert [r.info.run_id for r in found] == [info["run_id"]]
    r = found[0]
    assert r.info.status == "FINISHED"
    assert r.data.params["trainer.name"] == "sync" and r.data.params["cluster.nproc"] == "2"
    assert r.data.params["model.name"] == "small_cnn" and r.data.params["tracking.name"] == "mlflow"
    assert r.data.tags["status"] == "completed"
    assert r.data.metrics["summary/final_test_accuracy"] == pytest.approx(run.summary["final_test_accuracy"])
    client = mlflow.MlflowClient()
    loss = client.get_metric_history(r.info.run_id, "train/loss")
    assert sorted(m.step for m in loss) == list(range(1, 13))  # every step, from metrics.jsonl
    acc = client.get_metric_history(r.info.run_id, "eval/test_accuracy")
    assert sorted(m.step for m in acc) == [6, 12]
    arts = {a.path for a in client.list_artifacts(r.info.run_id, "run")}
    assert {"run/config.yaml", "run/metrics.jsonl", "run/summary.json"} <= arts
    logged = json.loads(Path(mlflow.artifacts.download_artifacts(run_id=r.info.run_id, artifact_path="run/summary.json",
                                                                  dst_path=str(tmp_path / "dl"))).read_text())
    assert "bytes_by_rank" in logged  # the launcher's final summary, not only rank 0's
    assert r.info.artifact_uri.startswith((tmp_path / "mlartifacts").absolute().as_uri())


@needs_mlflow
def test_wrong_tracking_uri_warns_and_the_run_completes(run_overrides, tmp_path, capfd):
    import socket
    with socket.socket() as s:  # a port nobody listens on: the "server" is down
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    run = launch_run(run_overrides + STEPS + ["tracking=mlflow", f"tracking.uri=http://127.0.0.1:{port}"])
    assert run.summary["status"] == "completed" and run.summary["steps"] == 12
    info = json.loads((run.path / "tracking.json").read_text())
    assert info["state"] == "disabled" and info["warning"].startswith("workbench: tracking (mlflow) disabled:")
    err = [l for l in capfd.readouterr().err.splitlines() if "tracking (mlflow)" in l]
    assert err == [info["warning"]]  # one line, repeated by the launcher where the user sees it


def test_unknown_tracker_is_a_config_error(run_overrides):
    import workbench
    with pytest.raises(workbench.ConfigError, match="tracking"):
        workbench.compose(run_overrides + ["tracking=nope"])
    cfg = workbench.compose(run_overrides + ["tracking.name=nope"])
    with pytest.raises(workbench.ConfigError, match="tracking.name"):
        workbench.launch(cfg)


@pytest.mark.skipif(importlib.util.find_spec("wandb") is None, reason="wandb not installed (pip install 'workbench[wandb]')")
def test_wandb_offline_writes_its_run(run_overrides, tmp_path):
    run = launch_run(run_overrides + STEPS + ["tracking=wandb"])
    assert run.summary["status"] == "completed"
    info = json.loads((run.path / "tracking.json").read_text())
    assert info["state"] == "ended" and "warning" not in info, info
    offline = list((tmp_path / "wandb").glob("offline-run-*"))
    assert len(offline) == 1 and list(offline[0].glob("*.wandb")), offline


def test_missing_package_is_one_warning_and_no_tracker(tmp_path, monkeypatch, capfd):
    """Without the tracker's package: one line at launch (preflight), rank 0 records it quietly."""
    import workbench
    from workbench import tracking
    monkeypatch.setitem(tracking.TRACKERS, "mlflow", ("mlflow", "no_such_package_for_workbench", "mlflow"))
    monkeypatch.setenv("WORKBENCH_LAUNCHER", "1")
    cfg = workbench.compose([f"output_root={tmp_path}", "tracking=mlflow"])
    line = tracking.preflight(cfg)
    assert line.startswith("workbench: tracking (mlflow) disabled:") and "pip install 'workbench[mlflow]'" in line
    s = tracking.start(cfg, tmp_path)
    s.finish("completed", {"status": "completed"})
    info = json.loads((tmp_path / "tracking.json").read_text())
    assert info["state"] == "disabled" and info["warned_at_launch"]
    tracking.finalise(cfg, tmp_path, {"status": "completed"})
    assert [l for l in capfd.readouterr().err.splitlines() if "tracking" in l] == [line]
