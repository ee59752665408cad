"""MLflow (``tracking=mlflow``, extra ``.[mlflow]``: the full ``mlflow`` package, whose SQL store
and ``mlflow ui`` this needs). User docs: docs/tracking.md.

    python -m workbench tracking=mlflow                    # SQLite store <output_root>/mlflow.db, experiment "workbench"
    mlflow ui --backend-store-uri sqlite:///experiments/mlflow.db          # browse it (from the project root)
    python -m workbench tracking=mlflow tracking.uri=http://mlflow.internal:5000 tracking.experiment=ps-sweep

    import mlflow
    mlflow.set_tracking_uri("sqlite:///experiments/mlflow.db")
    mlflow.search_runs(experiment_names=["workbench"])

The default store is SQLite: MLflow 3 keeps its file store in maintenance and reads it only with
``MLFLOW_ALLOW_FILE_STORE=true``; SQLite needs no server either, and ``mlflow ui`` and
``search_runs`` read it as they are. Experiments workbench creates in a SQLite store keep their
artifacts beside the database, in ``<its folder>/mlartifacts`` (MLflow's own default would be
``./mlruns`` under whatever directory the run started in). A file store named in ``tracking.uri``
(runs logged before, ``experiments/mlruns``) is still written and read: the switch is set for it.

The client, not the fluent ``mlflow.start_run`` API: it keeps no global "active run", so it is safe from
a thread, and the launcher can reopen the same run by id to log the final summary.
"""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Dict, List, Tuple

from workbench.tracking import Tracker, run_dir_files, split_summary

_STATUS = {"completed": "FINISHED", "interrupted": "KILLED"}  # failed, diverged: FAILED
_CHUNK = 100  # MLflow's log_batch limits: 100 params, 1000 metrics per call


def default_uri(cfg) -> str:
    """``sqlite:////abs/<output_root>/mlflow.db``."""
    return "sqlite:///" + str(Path(cfg.output_root).absolute() / "mlflow.db")


def artifact_root(uri: str):
    """Where new experiments of a SQLite store keep artifacts (``mlartifacts`` beside the database);
    None for other stores (a file store keeps them inside, a server decides)."""
    if not uri.startswith("sqlite:///"):
        return None
    db = Path(uri[len("sqlite:///"):])
    return (db.absolute().parent / "mlartifacts").as_uri()


class MlflowTracker(Tracker):
    def _client(self, uri: str):
        # A server that is down: a few quick retries, not MLflow's default minutes of backoff.
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1")
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")
        if "://" not in uri or uri.startswith("file:"):
            # MLflow 3 keeps the file store in "maintenance mode" behind this switch; it is still the
            # store that needs no server and no database, which is what a workbench run wants.
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        elif uri.startswith("sqlite:"):
            import importlib.util
            if importlib.util.find_spec("alembic") is None or importlib.util.find_spec("sqlalchemy") is None:
                raise RuntimeError(f"{uri} needs the full mlflow package, not mlflow-skinny (pip install 'workbench[mlflow]')")
            if uri.startswith("sqlite:///"):
                Path(uri[len("sqlite:///"):]).absolute().parent.mkdir(parents=True, exist_ok=True)
        from mlflow.tracking import MlflowClient
        self.uri = uri
        self.client = MlflowClient(tracking_uri=uri)

    def start(self, params: Dict[str, str]) -> dict:
        from mlflow.entities import Param
        t = self.cfg.tracking
        self._client(t.uri or default_uri(self.cfg))
        exp = self.client.get_experiment_by_name(t.experiment)
        if exp is None:
            try:
                exp_id = self.client.create_experiment(t.experiment, artifact_location=artifact_root(self.uri))
            except Exception:  # another run created it a moment ago
                exp_id = self.client.get_experiment_by_name(t.experiment).experiment_id
        else:
            exp_id = exp.experiment_id
        run = self.client.create_run(exp_id, run_name=self.run_dir.name, tags={
            "workbench.run_dir": str(self.run_dir.resolve()), "trainer": str(self.cfg.trainer.name),
            "model": str(self.cfg.model.name), "data": str(self.cfg.data.name)})
        self.run_id = run.info.run_id
        items = [Param(k, v[:6000]) for k, v in params.items()]
        for i in range(0, len(items), _CHUNK):
            self.client.log_batch(self.run_id, params=items[i:i + _CHUNK], synchronous=True)
        return {"uri": self.uri, "experiment": t.experiment, "experiment_id": exp_id, "run_id": self.run_id}

    def log_metrics(self, rows: List[Tuple[int, Dict[str, float]]]) -> None:
        from mlflow.entities import Metric
        now = int(time.time() * 1000)
        ms = [Metric(k, v, now, step) for step, vals in rows for k, v in vals.items()]
        for i in range(0, len(ms), 1000):
            self.client.log_batch(self.run_id, metrics=ms[i:i + 1000], synchronous=True)

    def log_summary(self, summary: dict) -> None:
        from mlflow.entities import Metric, RunTag
        metrics, tags = split_summary(summary)
        now = int(time.time() * 1000)
        step = int(summary.get("steps") or 0)
        self.client.log_batch(self.run_id, metrics=[Metric(k, v, now, step) for k, v in metrics.items()],
                              tags=[RunTag(k, v) for k, v in tags.items()], synchronous=True)

    def log_run_dir(self) -> None:
        for p in run_dir_files(self.run_dir):
            rel = p.relative_to(self.run_dir).parent
            self.client.log_artifact(self.run_id, str(p), artifact_path=str(Path("run") / rel) if str(rel) != "." else "run")

    def log_file(self, path: Path) -> None:
        self.client.log_artifact(self.run_id, str(path), artifact_path="run")

    def end(self, status: str) -> None:
        self.client.set_terminated(self.run_id, status=_STATUS.get(status, "FAILED"))

    @classmethod
    def reopen(cls, cfg, run_dir: Path, info: dict):
        t = cls(cfg, run_dir)
        t._client(info["uri"])
        t.run_id = info["run_id"]
        return t


TRACKER = MlflowTracker
