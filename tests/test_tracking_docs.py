"""docs/tracking.md's MLflow commands work as written: taken from the page itself and run in a
project folder whose ``experiments/`` holds a real run logged with ``tracking=mlflow``.

``mlflow ui`` starts and serves the run on a local port (then it is stopped); the ``search_runs``
snippet prints it; a file store as an older workbench wrote it is read in place and through
``mlflow migrate-filestore``.
"""
import importlib.util
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from conftest import ROOT, launch_run

pytestmark = pytest.mark.skipif(importlib.util.find_spec("mlflow") is None,
                                reason="mlflow not installed (pip install 'workbench[mlflow]')")
DOC = ROOT / "docs" / "tracking.md"
MLFLOW = str(Path(sys.executable).parent / "mlflow")


def blocks(lang: str):
    return re.findall(rf"```{lang}\n(.*?)```", DOC.read_text(), re.S)


def bash_line(prefix: str) -> str:
    """The first command line of the page's bash blocks that starts with ``prefix``."""
    for b in blocks("bash"):
        for line in b.splitlines():
            if line.startswith(prefix):
                return line.split("  #")[0].strip()
    raise AssertionError(f"docs/tracking.md has no command starting with {prefix!r}")


def python_block(word: str) -> str:
    found = [b for b in blocks("python") if word in b]
    assert found, f"docs/tracking.md has no python block with {word!r}"
    return found[0]


def run_here(cwd: Path, argv, env=None, timeout=240):
    p = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                       env={**os.environ, **(env or {})})
    assert p.returncode == 0, (argv, p.stdout[-2000:], p.stderr[-3000:])
    return p.stdout


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """A folder with experiments/mlflow.db holding one real run; (folder, run id)."""
    proj = tmp_path_factory.mktemp("project")
    run = launch_run([f"output_root={proj / 'experiments'}", "trainer.progress=false", "cluster.timeout_s=60",
                      "cluster.nproc=1", "trainer.max_steps=4", "trainer.eval_every=4", "tracking=mlflow"])
    info = json.loads((run.path / "tracking.json").read_text())
    assert info["state"] == "ended", info
    return proj, info["run_id"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, data=None):
    req = urllib.request.Request(url, data=json.dumps(data).encode() if data else None,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return r.status, r.read().decode()


def test_mlflow_ui_as_written_serves_the_run(project):
    proj, run_id = project
    line = bash_line("mlflow ui --backend-store-uri sqlite:")
    assert line == "mlflow ui --backend-store-uri sqlite:///experiments/mlflow.db"
    port = _free_port()
    argv = [MLFLOW] + shlex.split(line)[1:] + ["--host", "127.0.0.1", "--port", str(port)]
    ui = subprocess.Popen(argv, cwd=proj, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          start_new_session=True)
    try:
        base, deadline = f"http://127.0.0.1:{port}", time.time() + 180
        while True:
            try:
                status, page = _get(base + "/")
                break
            except OSError:
                assert ui.poll() is None, ui.stderr.read()[-3000:]
                assert time.time() < deadline, "mlflow ui did not answer in 180 s"
                time.sleep(1)
        assert status == 200 and "<html" in page.lower()
        _, exp = _get(base + "/api/2.0/mlflow/experiments/get-by-name?experiment_name=workbench")
        exp_id = json.loads(exp)["experiment"]["experiment_id"]
        _, found = _get(base + "/api/2.0/mlflow/runs/search", {"experiment_ids": [exp_id]})
        assert [r["info"]["run_id"] for r in json.loads(found)["runs"]] == [run_id]
    finally:
        os.killpg(ui.pid, signal.SIGTERM)  # the server and the workers it started, nothing else
        try:
            ui.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(ui.pid, signal.SIGKILL)
            ui.wait()


def test_search_runs_snippet_as_written_prints_the_run(project):
    proj, run_id = project
    code = python_block('set_tracking_uri("sqlite:///experiments/mlflow.db")')
    out = run_here(proj, [sys.executable, "-c", code], env={"MLFLOW_ALLOW_FILE_STORE": ""})
    assert run_id in out and "FINISHED" in out and "sync" in out, out


@pytest.mark.slow
def test_an_old_file_store_is_read_in_place_and_after_migration(tmp_path):
    """A file store as workbench wrote it before (experiments/mlruns): the page's in-place snippet and
    its migration command both find the run."""
    make = ("from mlflow import MlflowClient\n"
            "c = MlflowClient(tracking_uri='experiments/mlruns')\n"
            "r = c.create_run(c.create_experiment('workbench'), run_name='old')\n"
            "c.log_param(r.info.run_id, 'trainer.name', 'sync'); c.set_terminated(r.info.run_id)\n"
            "print(r.info.run_id)\n")
    run_id = run_here(tmp_path, [sys.executable, "-c", make], env={"MLFLOW_ALLOW_FILE_STORE": "true"}).split()[-1]

    in_place = python_block('os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"')
    assert run_id in run_here(tmp_path, [sys.executable, "-c", in_place])

    migrate = bash_line("mlflow migrate-filestore")
    run_here(tmp_path, [MLFLOW] + shlex.split(migrate)[1:])
    target = shlex.split(migrate)[shlex.split(migrate).index("--target") + 1]
    assert bash_line("mlflow ui --backend-store-uri sqlite:///experiments/mlruns.db").endswith(target)
    read = ("import mlflow\n"
            f"mlflow.set_tracking_uri({target!r})\n"
            "print(mlflow.search_runs(experiment_names=['workbench'])[['run_id', 'params.trainer.name']].to_string())\n")
    out = run_here(tmp_path, [sys.executable, "-c", read], env={"MLFLOW_ALLOW_FILE_STORE": ""})
    assert run_id in out and "sync" in out, out
