"""Beyond one machine through existing engines: SLURM (Hydra's submitit launcher, run with
submitit's local executor) and Ray Train (against a local Ray instance started here)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_slurm_through_submitit_local(tmp_path):
    p = subprocess.run([sys.executable, "-m", "workbench", "--multirun", "hydra/launcher=submitit_local", "cluster=slurm",
                        "hydra.launcher.tasks_per_node=2", "hydra.launcher.nodes=1", "hydra.launcher.timeout_min=5",
                        "trainer.max_steps=6", "trainer.progress=false", f"output_root={tmp_path}"],
                       cwd=ROOT, capture_output=True, text=True, timeout=380)
    assert p.returncode == 0, p.stderr[-3000:]
    summaries = list((tmp_path / "multiruns").rglob("summary.json"))
    assert len(summaries) == 1
    s = json.loads(summaries[0].read_text())
    assert s["status"] == "completed" and s["world_size"] == 2 and s["steps"] == 6
    assert set(s["bytes_by_rank"]) == {"0", "1"}


def _prepare_many(root: str) -> int:
    from omegaconf import OmegaConf

    from workbench.runs import store as runstore
    cfg = OmegaConf.create({"a": list(range(2000))})
    failures = 0
    for i in range(12):
        try:
            runstore.prepare(Path(root) / f"run{i}", cfg)
        except OSError:
            failures += 1
    return failures


@pytest.mark.timeout(180)
def test_tasks_preparing_one_run_directory_at_once_do_not_collide(tmp_path):
    """Every SLURM task calls launch(), so all of a job's tasks prepare the same run directory at
    the same moment; a shared temporary file name made one of them fail with FileNotFoundError
    (seen in CI as a SLURM run whose rank 0 died and whose rank 1 timed out)."""
    import multiprocessing as mp
    # spawned, not forked: a child forked from this test process (threads of earlier tests, a
    # Python SIGTERM handler) once hung in a lock and ignored the pool's terminate, for 600 s
    with mp.get_context("spawn").Pool(4) as pool:
        assert sum(pool.map_async(_prepare_many, [str(tmp_path)] * 4).get(timeout=120)) == 0
    assert all((tmp_path / f"run{i}" / "config.yaml").exists() for i in range(12))
    assert not list(tmp_path.rglob("*.tmp"))


def test_slurm_outside_a_job_is_a_clear_error(tmp_path):
    import workbench
    cfg = workbench.compose(["cluster.starter=submitit", f"output_root={tmp_path}"])
    with pytest.raises(workbench.ConfigError, match="submitit"):
        workbench.launch(cfg)
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
@pytest.mark.timeout(500)
def test_ray_train_on_a_local_ray(tmp_path):
    ray = pytest.importorskip("ray")  # part of the dev extras; absent only in a minimal install
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    # a loaded 2-core machine can take longer than the default 15 s to start the dashboard agent
    os.environ.setdefault("RAY_agent_register_timeout_ms", "180000")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        import workbench
        cfg = workbench.compose(["cluster=ray", "cluster.nproc=2", "trainer.max_steps=6", f"output_root={tmp_path}",
                                 "trainer.progress=false"])
        run = workbench.launch(cfg, progress=False)
    finally:
        ray.shutdown()
    s = run.summary
    assert s["status"] == "completed" and s["world_size"] == 2 and s["steps"] == 6
    assert set(s["bytes_by_rank"]) == {"0", "1"}
