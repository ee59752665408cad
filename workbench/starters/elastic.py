"""The default starter: ``cluster.nproc`` local ranks under PyTorch's elastic agent (what torchrun
runs), c10d rendezvous, ``cluster.max_restarts`` restarts of a failed group.

Ranks are forked from a forkserver that has already imported torch (``workbench.worker.forked_rank``),
not started as new interpreters: a rank then starts in a fraction of a second instead of paying
torch's import (seconds of CPU each on a small machine), which is most of what a short run costs."""
from __future__ import annotations

import multiprocessing
import os
from pathlib import Path
from typing import Optional

from workbench.config import ConfigError
from workbench.starters import STARTERS, Starter


@STARTERS.register("elastic")
class ElasticStarter(Starter):
    def check(self, cfg) -> None:
        from workbench.launcher import port_free
        c = cfg.cluster
        if c.nnodes > 1:
            raise ConfigError(f"invalid value {c.nnodes} for cluster.nnodes: the launcher starts this machine's ranks; "
                              "for several machines run torchrun on each node with -m workbench.worker (see README)")
        if c.master_port and not port_free(c.master_addr, c.master_port):
            raise ConfigError(f"invalid value {c.master_port} for cluster.master_port: {c.master_addr}:{c.master_port} "
                              "is already in use; choose another port or 0 (pick a free one)")

    def start(self, cfg, run_dir: Path) -> Optional[dict]:
        from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs, Std
        from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
        from torch.distributed.launcher.api import LaunchConfig, elastic_launch

        from workbench import worker
        from workbench.launcher import describe_failure, free_port
        c = cfg.cluster
        multiprocessing.get_context("forkserver").set_forkserver_preload(worker.FORKSERVER_PRELOAD)
        endpoint = f"{c.master_addr}:{c.master_port or free_port(c.master_addr)}"
        lc = LaunchConfig(
            min_nodes=c.nnodes, max_nodes=c.nnodes, nproc_per_node=c.nproc, run_id=run_dir.name,
            rdzv_backend="c10d", rdzv_endpoint=endpoint,
            rdzv_configs={"join_timeout": int(c.timeout_s), "read_timeout": int(c.timeout_s)},
            max_restarts=c.max_restarts, monitor_interval=c.monitor_interval_s, start_method="forkserver",
            logs_specs=DefaultLogsSpecs(log_dir=str(run_dir / "logs"), redirects=Std.ALL),
        )
        try:
            elastic_launch(lc, worker.forked_rank)(str(Path(run_dir).resolve()), dict(os.environ), os.getcwd())
        except ChildFailedError as e:
            return describe_failure(run_dir, e.failures)
        return None
