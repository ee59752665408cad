"""The default starter: ``cluster.nproc`` local ranks under PyTorch's elastic agent (what torchrun
runs), c10d rendezvous, ``cluster.max_restarts`` restarts of a failed group.

Ranks are forked from a forkserver that has already imported torch (``workbench.worker.forked_rank``),
not started as new interpreters: a rank then starts in a fraction of a second instead of paying
torch's import (seconds of CPU each on a small machine), which is most of what a short run costs."""
from __future__ import annotations

import atexit
import functools
import multiprocessing
import multiprocessing.forkserver
import os
import signal
from pathlib import Path
from typing import Optional

from workbench.core import ConfigError
from workbench.starters import STARTERS, Starter


def _report_every_failed_rank() -> None:
    """torch's ``MultiprocessContext`` (the agent's handle on forked ranks) reports only the first
    failed rank that ``multiprocessing`` hands back, in rank order: when a killed rank 2 and rank 0,
    which lost it, have both exited by the agent's next look, only rank 0's communication error is
    seen. The subprocess context reports every failed rank, and :func:`describe_failure` needs them
    all to name the cause; so after a failure, add every other rank that did not exit cleanly (all
    have been joined by then)."""
    from torch.distributed.elastic.multiprocessing.api import MultiprocessContext
    from torch.distributed.elastic.multiprocessing.errors import ProcessFailure
    if getattr(MultiprocessContext._poll, "_workbench", False):
        return
    poll = MultiprocessContext._poll

    def _poll(self):
        result = poll(self)
        if result is not None and result.failures and self._pc is not None:
            for r, proc in enumerate(self._pc.processes):
                if r not in result.failures and proc.exitcode not in (0, None):
                    result.failures[r] = ProcessFailure(local_rank=r, pid=proc.pid, exitcode=proc.exitcode,
                                                        error_file=self.error_files[r])
        return result

    _poll._workbench = True
    MultiprocessContext._poll = _poll


@functools.lru_cache(maxsize=None)
def _stop_forkserver_at_exit() -> None:
    """At interpreter exit, kill the forkserver. Left alone it exits after this interpreter does and
    then finalises the torch it holds for about two seconds, with this process's stdout still open:
    whoever reads the CLI's output waits that long for its end. It keeps no state worth finalising."""
    def stop() -> None:
        pid = getattr(getattr(multiprocessing.forkserver, "_forkserver", None), "_forkserver_pid", None)
        if pid:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    atexit.register(stop)


@STARTERS.register("elastic")
class ElasticStarter(Starter):
    def check(self, cfg) -> None:
        from workbench.dist import check_gpus_for_nccl
        from workbench.starters.local import port_free
        c = cfg.cluster
        if c.nnodes > 1:
            raise ConfigError(f"invalid value {c.nnodes} for cluster.nnodes: the launcher starts this machine's ranks; "
                              "for several machines run torchrun on each node with -m workbench.worker (see README)")
        check_gpus_for_nccl(c)
        if c.master_port and not port_free(c.master_addr, c.master_port):
            raise ConfigError(f"invalid value {c.master_port} for cluster.master_port: {c.master_addr}:{c.master_port} "
                              "is already in use; choose another port or 0 (pick a free one)")

    def start(self, cfg, run_dir: Path) -> Optional[dict]:
        from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs, Std
        from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
        from torch.distributed.launcher.api import LaunchConfig, elastic_launch

        from workbench import worker
        from workbench.starters.local import describe_failure, free_port
        c = cfg.cluster
        multiprocessing.get_context("forkserver").set_forkserver_preload(worker.FORKSERVER_PRELOAD)
        _stop_forkserver_at_exit()
        _report_every_failed_rank()
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
