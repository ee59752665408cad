"""A dead rank stops the whole run fast, names the rank, and keeps the metrics written so far."""
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import launch_run

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.timeout(240)
def test_killed_rank_fails_fast_and_is_named(run_overrides):
    import workbench
    t0 = time.monotonic()
    with pytest.raises(workbench.RunFailed) as e:
        launch_run(run_overrides + ["cluster.nproc=4", "trainer.max_steps=400", "inject.kill_rank=2",
                                    "inject.kill_at_step=8", "trainer.eval_every=5"])
    elapsed = time.monotonic() - t0
    assert "rank 2" in str(e.value) and "SIGKILL" in str(e.value)
    run = e.value.run
    s = json.loads((run.path / "summary.json").read_text())
    assert s["status"] == "failed" and s["failed_rank"] == 2 and "rank 2" in s["error"]
    recs = run.records()
    steps = [r["step"] for r in recs if r["kind"] == "train"]
    assert steps and steps[-1] < 400  # stopped early ...
    assert any(r["kind"] == "eval" and r["step"] == 5 for r in recs)  # ... and kept what it had written
    assert elapsed < 200  # bounded: the agent stops the survivors instead of waiting on them


def test_cli_exit_code_names_rank(tmp_path):
    p = subprocess.run([sys.executable, "-m", "workbench", f"output_root={tmp_path}", "cluster.nproc=2",
                        "trainer.max_steps=100", "inject.kill_rank=1", "inject.kill_at_step=3",
                        "trainer.progress=false"], cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert p.returncode == 1
    assert "rank 1 killed by SIGKILL" in p.stderr


KILLED_WHILE_WRITING = """
import json, os, signal, sys
from torch.distributed.elastic.multiprocessing.errors import ErrorHandler, error_handler
from workbench.worker import AtomicErrorHandler

def dump_half(obj, fp, **kw):  # the agent's SIGTERM arrives in the middle of the write
    fp.write(json.dumps(obj)[:20]); fp.flush()
    os.kill(os.getpid(), signal.SIGKILL)

error_handler.json.dump = dump_half
handler = AtomicErrorHandler() if sys.argv[1] == "atomic" else ErrorHandler()
try:
    raise RuntimeError("Connection closed by peer")
except RuntimeError as e:
    handler.record_exception(e)
"""


@pytest.mark.parametrize("handler", ["torch", "atomic"])
def test_rank_killed_while_writing_its_error_file_leaves_none_half_written(tmp_path, handler):
    """The agent reads every stopped rank's error file; a half-written one made it raise
    JSONDecodeError and give up instead of restarting (seen in CI). The rank's handler writes
    aside and renames, so the agent finds a whole file or none."""
    from torch.distributed.elastic.multiprocessing.errors import ProcessFailure
    err = tmp_path / "error.json"
    p = subprocess.run([sys.executable, "-c", KILLED_WHILE_WRITING, handler], cwd=ROOT, timeout=60,
                       env={**__import__("os").environ, "TORCHELASTIC_ERROR_FILE": str(err)})
    assert p.returncode == -9
    if handler == "torch":  # the race itself, so this test notices if torch ever fixes it
        with pytest.raises(json.JSONDecodeError):
            ProcessFailure(local_rank=0, pid=1, exitcode=-9, error_file=str(err))
    else:
        assert not err.exists()
        assert "SIGKILL" in ProcessFailure(local_rank=0, pid=1, exitcode=-9, error_file=str(err)).message
