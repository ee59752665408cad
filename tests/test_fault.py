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
        launch_run(run_overrides + ["cluster.nproc=4", "trainer.max_steps=400", "cluster.kill_rank=2",
                                    "cluster.kill_at_step=8", "trainer.eval_every=5"])
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
                        "trainer.max_steps=100", "cluster.kill_rank=1", "cluster.kill_at_step=3",
                        "trainer.progress=false"], cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert p.returncode == 1
    assert "rank 1 killed by SIGKILL" in p.stderr
