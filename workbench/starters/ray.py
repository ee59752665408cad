"""Ray: the same worker through Ray Train's TorchTrainer on an existing Ray cluster (and so on
Kubernetes through KubeRay).

    pip install -e '.[ray]'
    ray start --head                     # or an existing cluster: RAY_ADDRESS=ray://head:10001
    python -m workbench cluster=ray cluster.nproc=4

Ray Train starts ``cluster.nproc * cluster.nnodes`` actors and joins them in a torch.distributed
process group (gloo, or NCCL with ``cluster.device=cuda``); each actor then runs the workbench worker
on the shared run directory. Connects to $RAY_ADDRESS or the running local instance
(``ray.init(address="auto")``); starts a local one if there is none.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

from workbench.core import ConfigError, world_size
from workbench.starters import STARTERS, Starter


def _train_loop(config: dict) -> None:
    import ray.train
    ctx = ray.train.get_context()
    os.environ.update(RANK=str(ctx.get_world_rank()), WORLD_SIZE=str(ctx.get_world_size()),
                      LOCAL_RANK=str(ctx.get_local_rank()), LOCAL_WORLD_SIZE=str(ctx.get_local_world_size()))
    from workbench import worker
    code = worker.main(["--run-dir", config["run_dir"]])
    if code:
        raise RuntimeError(f"rank {ctx.get_world_rank()} exited with code {code}")


@STARTERS.register("ray")
class RayStarter(Starter):
    def check(self, cfg) -> None:
        try:
            import ray  # noqa: F401
            import ray.train.torch  # noqa: F401
        except ImportError:
            raise ConfigError("invalid value 'ray' for cluster.starter: Ray Train is not installed "
                              "(pip install -e '.[ray]')") from None

    def start(self, cfg, run_dir: Path) -> Optional[dict]:
        import ray
        from ray.train import RunConfig, ScalingConfig
        from ray.train.torch import TorchConfig, TorchTrainer

        from workbench.dist import choose_backend
        if not ray.is_initialized():
            try:
                ray.init(address=os.environ.get("RAY_ADDRESS", "auto"), log_to_driver=False)
            except ConnectionError:
                ray.init(log_to_driver=False)
        c = cfg.cluster
        use_gpu = c.device == "cuda"
        trainer = TorchTrainer(
            _train_loop, train_loop_config={"run_dir": str(Path(run_dir).resolve())},
            torch_config=TorchConfig(backend=choose_backend(c), timeout_s=int(c.timeout_s)),
            scaling_config=ScalingConfig(num_workers=world_size(cfg), use_gpu=use_gpu,
                                         resources_per_worker={"CPU": max(1, c.threads)} if not use_gpu else None),
            run_config=RunConfig(name=Path(run_dir).name, storage_path=str(Path(run_dir).resolve() / "ray")),
        )
        try:
            trainer.fit()
        except Exception as e:
            return {"error": f"ray run failed: {type(e).__name__}: {' '.join(str(e).split())[:500]}", "failed_rank": None}
        return None
