"""Synchronous data parallelism: PyTorch DistributedDataParallel, the optimised baseline every other
paradigm is measured against (bucketed all-reduce overlapped with the backward pass).

Every rank holds the whole model, computes gradients on its shard of the global batch, and DDP
averages them bucket by bucket while backward is still running; the buckets go through a
communication hook that does exactly DDP's default all-reduce, counted by the meter (category
``allreduce``). With W workers and per-worker batch b this is single-process SGD on batch W*b.
With W > 1 the hook also measures the gradient noise scale from the local and averaged gradients
(:mod:`workbench.gns`), logged with each evaluation as ``gradient_noise_scale``.

    python -m workbench trainer=sync cluster.nproc=4
"""
import math
from dataclasses import dataclass

from workbench.core import ConfigError, TrainerConfig, store_schema
from workbench.gns import GnsState, gns_hook
from workbench.meter import AllreduceHookState, metered_allreduce_hook
from workbench.perfmodel.efficiency import SYNC
from workbench.spec import ParadigmSpec, declare
from workbench.trainers import TRAINERS
from workbench.trainers.base import Trainer, build_optimizer, wrap_ddp


@dataclass
class SyncConfig(TrainerConfig):
    name: str = "sync"
    bucket_cap_mb: float = 25.0  # DDP bucket size: smaller buckets start communicating earlier
    metered: bool = True  # count bytes through the meter's hook (false: DDP's built-in C++ all-reduce)
    noise_scale: bool = True  # log the gradient noise scale per evaluation (metered, > 1 worker)
    noise_scale_decay: float = 0.95  # its moving averages' decay per step


store_schema("trainer", "sync", SyncConfig)


@TRAINERS.register("sync")
class SyncTrainer(Trainer):
    name = "sync"
    gns = None  # the noise-scale estimator, where comm_hook() installs it

    @classmethod
    def validate(cls, cfg) -> None:
        if cfg.trainer.bucket_cap_mb <= 0:
            raise ConfigError(f"invalid value {cfg.trainer.bucket_cap_mb!r} for trainer.bucket_cap_mb: must be > 0")
        decay = cfg.trainer.get("noise_scale_decay", 0.0)  # a subclass's config may carry no estimator
        if not 0 <= decay < 1:
            raise ConfigError(f"invalid value {decay!r} for trainer.noise_scale_decay: must be in [0, 1)")

    def setup(self) -> None:
        self.model = self.build_model()
        self.ddp = wrap_ddp(self.model, self.device, self.cfg.trainer.bucket_cap_mb, *self.comm_hook())
        self.optimizer = build_optimizer(self.ddp.parameters(), self.cfg.optim)

    def comm_hook(self) -> tuple:
        """``(state, hook)`` of DDP's gradient exchange: the meter's plain all-reduce (none: DDP's
        built-in one, unmetered). A subclass exchanges gradients its own way by returning its own."""
        if not self.cfg.trainer.metered:
            return ()
        hook = (AllreduceHookState(self.meter), metered_allreduce_hook)
        if self.cfg.trainer.noise_scale and self.workers > 1:  # the averaged gradient differs from the local one
            self.gns = GnsState(*hook, self.meter, self.batch_size, self.global_batch,
                                self.cfg.trainer.noise_scale_decay)
            hook = (self.gns, gns_hook)
        return hook

    def evaluate(self):
        out = super().evaluate()
        return {**out, **self.gns.metrics(self.info.comm_device)} if self.gns is not None else out

    def train_step(self, x, y):
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.loss_fn(self.ddp(x), y)
        loss.backward()
        if self.gns is not None:
            self.gns.end_step()
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
    update_law=lambda cfg, ranks: SYNC,
    bench_variants=lambda workers: [("sync (ring all-reduce)", ["trainer=sync", f"cluster.nproc={workers}"])]))
