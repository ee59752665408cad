"""Synchronous data parallelism: PyTorch DistributedDataParallel, the optimised baseline every other
paradigm is measured against (bucketed all-reduce overlapped with the backward pass).

Every rank holds the whole model, computes gradients on its shard of the global batch, and DDP
averages them bucket by bucket while backward is still running; the buckets go through a
communication hook that does exactly DDP's default all-reduce, counted by the meter (category
``allreduce``). With W workers and per-worker batch b this is single-process SGD on batch W*b.

    python -m workbench trainer=sync cluster.nproc=4
"""
import math
from dataclasses import dataclass

from workbench.core import ConfigError, TrainerConfig, store_schema
from workbench.meter import AllreduceHookState, metered_allreduce_hook
from workbench.spec import ParadigmSpec, declare
from workbench.trainers import TRAINERS
from workbench.trainers.base import Trainer, build_optimizer, wrap_ddp


@dataclass
class SyncConfig(TrainerConfig):
    name: str = "sync"
    bucket_cap_mb: float = 25.0  # DDP bucket size: smaller buckets start communicating earlier
    metered: bool = True  # count bytes through the meter's hook (false: DDP's built-in C++ all-reduce)


store_schema("trainer", "sync", SyncConfig)


@TRAINERS.register("sync")
class SyncTrainer(Trainer):
    name = "sync"

    @classmethod
    def validate(cls, cfg) -> None:
        if cfg.trainer.bucket_cap_mb <= 0:
            raise ConfigError(f"invalid value {cfg.trainer.bucket_cap_mb!r} for trainer.bucket_cap_mb: must be > 0")

    def setup(self) -> None:
        self.model = self.build_model()
        self.ddp = wrap_ddp(self.model, self.device, self.cfg.trainer.bucket_cap_mb, *self.comm_hook())
        self.optimizer = build_optimizer(self.ddp.parameters(), self.cfg.optim)

    def comm_hook(self) -> tuple:
        """``(state, hook)`` of DDP's gradient exchange: the meter's plain all-reduce (none: DDP's
        built-in one, unmetered). A subclass exchanges gradients its own way by returning its own."""
        return (AllreduceHookState(self.meter), metered_allreduce_hook) if self.cfg.trainer.metered else ()

    def train_step(self, x, y):
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.loss_fn(self.ddp(x), y)
        loss.backward()
        self.optimizer.step()
        return loss.detach()


def _ring_bytes(cfg, summary, shapes) -> float:
    """Ring all-reduce of the parameters' float32 bytes M: 2(N-1)/N * M each way."""
    n = SyncTrainer.num_workers(cfg)
    return 2 * (n - 1) / n * 4 * sum(math.prod(s) for s in shapes)


def _sync_model(cfg):
    from workbench.perfmodel import paradigms
    return paradigms.sync, {}


declare(ParadigmSpec(
    "sync", plan_variants=lambda ranks: [["trainer=sync"]], perf_model=_sync_model, analytic_bytes=_ring_bytes,
    bench_variants=lambda workers: [("sync (ring all-reduce)", ["trainer=sync", f"cluster.nproc={workers}"])]))
