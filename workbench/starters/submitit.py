"""SLURM through Hydra's submitit launcher: every SLURM task is one rank.

    pip install -e '.[slurm]'
    python -m workbench --multirun hydra/launcher=submitit_slurm cluster=slurm \\
        hydra.launcher.nodes=2 hydra.launcher.tasks_per_node=4 hydra.launcher.gpus_per_node=4 \\
        hydra.launcher.partition=gpu model=vgg16 data=cifar10 data.root=/shared/data

    # the same on this machine, without SLURM (submitit's local executor):
    python -m workbench --multirun hydra/launcher=submitit_local cluster=slurm hydra.launcher.tasks_per_node=2

``cluster=slurm`` reads the world from submitit's job environment (tasks, nodes, this task's rank),
sets the torch.distributed environment (rank 0's host as master, a port derived from the job id) and
runs the worker in the task's own process. The run directory (Hydra's job directory) must be on a
file system every node sees, as usual on SLURM clusters.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

from workbench.core import ConfigError, world_size
from workbench.starters import STARTERS, Starter


def _env():
    try:
        import submitit
    except ImportError:
        raise ConfigError("invalid value 'submitit' for cluster.starter: submitit is not installed "
                          "(pip install -e '.[slurm]')") from None
    try:
        return submitit.JobEnvironment()
    except RuntimeError:
        raise ConfigError("invalid value 'submitit' for cluster.starter: not inside a submitit job; run with "
                          "--multirun hydra/launcher=submitit_slurm (or submitit_local) cluster=slurm") from None


@STARTERS.register("submitit")
class SubmititStarter(Starter):
    def check(self, cfg) -> None:
        env = _env()
        if env.num_tasks != world_size(cfg):
            raise ConfigError(f"invalid value {cfg.cluster.nproc} for cluster.nproc: the job has {env.num_tasks} tasks "
                              f"over {env.num_nodes} nodes; cluster=slurm takes them from hydra.launcher")

    def start(self, cfg, run_dir: Path) -> Optional[dict]:
        from workbench import worker
        env = _env()
        master = env.hostnames[0] if env.num_nodes > 1 else "127.0.0.1"
        port = 20000 + int("".join(ch for ch in str(env.job_id) if ch.isdigit()) or "0") % 40000
        os.environ.update(RANK=str(env.global_rank), WORLD_SIZE=str(env.num_tasks), LOCAL_RANK=str(env.local_rank),
                          LOCAL_WORLD_SIZE=str(env.num_tasks // env.num_nodes), MASTER_ADDR=master,
                          MASTER_PORT=str(cfg.cluster.master_port or port))
        try:
            code = worker.main(["--run-dir", str(run_dir)])
        except Exception as e:
            return {"error": f"rank {env.global_rank} failed: {type(e).__name__}: {e}", "failed_rank": env.global_rank}
        if code:
            return {"error": f"rank {env.global_rank} exited with code {code}", "failed_rank": env.global_rank}
        return None

    def finalises(self) -> bool:
        return _env().global_rank == 0
