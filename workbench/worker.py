"""The per-rank entry point: what every training process runs.

The launcher (``python -m workbench …`` / ``workbench.launch``) starts it through PyTorch's elastic
agent with ``--run-dir``; on a cluster, start it yourself with torchrun on every node:

    # on each of 2 nodes (node 0 at 10.0.0.1), 4 processes per node:
    torchrun --nnodes 2 --nproc-per-node 4 --rdzv-backend c10d --rdzv-endpoint 10.0.0.1:29400 \\
        --rdzv-id myrun -m workbench.worker trainer=sync data=cifar10 data.root=/data model=vgg16 \\
        cluster.nnodes=2 cluster.nproc=4

Without ``--run-dir``, every rank composes the config from the overrides, rank 0 creates the run
directory (on node 0) and shares its path through the rendezvous store.
"""
from __future__ import annotations

import argparse
import os
import sys
import traceback
from pathlib import Path

from torch.distributed.elastic.multiprocessing.errors import ErrorHandler, record

EXIT_DIVERGED = 3


class AtomicErrorHandler(ErrorHandler):
    """torch's handler writes ``error.json`` in place. A rank that the agent stops with SIGTERM
    while it is still writing (it lost a peer at the same moment) leaves the file truncated; the
    agent then dies parsing it (JSONDecodeError) instead of restarting the group. So: write aside,
    then rename."""

    _aside = None

    def _get_error_file_path(self):
        return self._aside or super()._get_error_file_path()

    def record_exception(self, e: BaseException) -> None:
        final = super()._get_error_file_path()
        if not final:
            return super().record_exception(e)
        self._aside = f"{final}.{os.getpid()}.tmp"
        try:
            super().record_exception(e)
            os.replace(self._aside, final)
        finally:
            self._aside = None


def _share_run_dir(cfg, rank: int) -> Path:
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    from workbench.runs import store as runstore
    store = c10d._get_default_store()
    if rank == 0:
        run_dir = runstore.prepare(runstore.new_run_dir(cfg), cfg)
        store.set("workbench/run_dir", str(run_dir.resolve()))
    dist.barrier()
    return Path(store.get("workbench/run_dir").decode())


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m workbench.worker", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run-dir", help="a run directory holding config.yaml (written by the launcher)")
    p.add_argument("overrides", nargs="*", help="Hydra overrides, when there is no --run-dir")
    args = p.parse_args(argv)

    from workbench import dist as wdist
    from workbench.runs import store as runstore
    from workbench.config import validate
    from workbench.meter import Meter
    from workbench.sysmon import SystemMonitor
    from workbench.trainers import TRAINERS, paradigm_of_config
    from workbench.trainers.base import Diverged

    if args.run_dir:
        run_dir = Path(args.run_dir)
        cfg = runstore.load_config(run_dir)
    else:
        from workbench.api import compose
        cfg = compose(args.overrides)
        validate(cfg)
        run_dir = None

    info = wdist.init(cfg.cluster, cfg.testbed)
    if run_dir is None:
        run_dir = _share_run_dir(cfg, info.rank)

    if os.environ.get("WORKBENCH_NODE") is not None:  # emulated network: which namespace this rank is in
        runstore.write_json(run_dir / "ranks" / f"rank{info.rank}_node.json",
                            {"rank": info.rank, "node": int(os.environ["WORKBENCH_NODE"])})
    meter = Meter(cfg.cluster.timeout_s)
    log = runstore.RunLog(run_dir, info.rank)
    mon = SystemMonitor(run_dir / "system" / f"rank{info.rank}.jsonl", info.rank,
                        info.device.index if info.device.type == "cuda" else None).start()
    trainer = TRAINERS[cfg.trainer.name](cfg, info, meter, log)
    from workbench import tracking
    tracker = tracking.start(cfg, run_dir) if info.rank == 0 else None  # a thread; off the step loop
    status, code, why = "completed", 0, None
    try:
        summary = trainer.run()
        summary["status"] = status
    except Diverged as e:
        status, code, why = "diverged", EXIT_DIVERGED, f"rank {info.rank}: {e}"
        summary = {"status": status, "error": str(e)}
        print(f"rank {info.rank}: diverged: {e}", file=sys.stderr)
    except BaseException as e:
        status = "failed"
        runstore.write_json(run_dir / "ranks" / f"rank{info.rank}_error.json",
                            {"rank": info.rank, "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()})
        if tracker is not None:  # briefly: the agent is waiting to stop the other ranks
            tracker.finish(status, None, timeout_s=5.0)
        raise
    finally:
        mon.stop()
        log.close()
        runstore.write_json(run_dir / "ranks" / f"rank{info.rank}_totals.json",
                            {"rank": info.rank, "status": status, "comm": meter.totals(),
                             **({"error": why} if why else {})})
    if info.rank == 0:
        from workbench import verdict
        summary.update(verdict.summarize(log.records(), cfg, status))  # metrics.jsonl is closed: complete
        runstore.write_json(run_dir / "summary.json", {**summary, "paradigm": paradigm_of_config(cfg), "run_dir": str(run_dir)})
    if code == 0:
        # Shut down only after a clean finish (after a failure the peers may already be gone), and
        # only when every rank has written its totals, so whoever finalises the summary sees them.
        import torch.distributed as dist
        dist.barrier()
        wdist.shutdown()
    if tracker is not None:  # after the barrier: the other ranks do not wait for the tracker
        tracker.finish(status, {**summary, "run_dir": str(run_dir)})
    return code


main = record(main, error_handler=AtomicErrorHandler())

# What a rank imports before it trains, imported once by the forkserver the elastic starter forks its
# ranks from (about 3 s of CPU per rank on this 2-core machine, spent once instead of once per rank).
# workbench itself is not preloaded: each rank imports it afresh, so edits between launches from one
# notebook kernel take effect.
FORKSERVER_PRELOAD = ["torch", "torch.distributed", "torch.nn.parallel", "torch._dynamo", "numpy", "omegaconf",
                      "psutil", "sklearn.datasets", "sklearn.model_selection"]

# Variables the elastic agent sets for each rank; every other variable comes from the launcher's
# environment at launch time (a forked rank would otherwise see the forkserver's, from its start).
_AGENT_VARS = {"LOCAL_RANK", "RANK", "GROUP_RANK", "ROLE_RANK", "ROLE_NAME", "LOCAL_WORLD_SIZE", "WORLD_SIZE",
               "GROUP_WORLD_SIZE", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCH_NCCL_ASYNC_ERROR_HANDLING",
               "CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS"}


def _agent_var(name: str) -> bool:
    return name in _AGENT_VARS or name.startswith("TORCHELASTIC_")


def forked_rank(run_dir: str, env: dict, cwd: str) -> None:
    """A rank forked by the elastic agent (``start_method="forkserver"``): take the launcher's
    environment and working directory, then run :func:`main`. Its exit status is main's (a
    ``SystemExit``), so an error is recorded once, atomically, by :class:`AtomicErrorHandler`."""
    agent = {k: v for k, v in os.environ.items() if _agent_var(k)}
    os.environ.clear()
    os.environ.update({k: v for k, v in env.items() if not _agent_var(k)})
    os.environ.update(agent)
    os.environ["PYTHONUNBUFFERED"] = "1"
    os.chdir(cwd)
    try:
        code = main(["--run-dir", run_dir])
    except BaseException as e:  # already recorded by main's handler; don't let torch's own record it again
        if isinstance(e, SystemExit):
            raise
        raise SystemExit(1) from None
    if code:
        raise SystemExit(code)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
