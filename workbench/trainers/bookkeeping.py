"""What the training loop itself costs: :meth:`Trainer.run <workbench.trainers.base.Trainer.run>`
around a step that does nothing, timed on every rank of the planner's profile
(``Profile.loops["bookkeeping"]``, a loop fn of ``perfmodel.profile.measure``)."""
from __future__ import annotations

import torch
from omegaconf import DictConfig

from workbench.dist import DistInfo
from workbench.meter import Meter
from workbench.runs.store import RunLog
from workbench.trainers.base import Trainer, build_optimizer


class _Bookkeeping(Trainer):
    """:meth:`Trainer.run` with a step that does nothing: what the loop itself costs."""
    name = "bookkeeping"

    def setup(self) -> None:
        self.model = None
        self._w = torch.zeros(1, requires_grad=True)
        self.optimizer = build_optimizer([self._w], self.cfg.optim)
        self._loss = torch.zeros(())

    def train_step(self, x, y):
        return self._loss


def bookkeeping_loop_s(cfg: DictConfig, model, step, meter: Meter, comm_device, make_optimizer, reps: int,
                       **_) -> float:
    """Seconds per step of :meth:`Trainer.run` around an empty step (the next batch of ``cfg``'s
    data at its batch, the learning rate, the meter's window, the step's records into a scratch run
    directory with TensorBoard on rank 0), on every rank of the profile's group at once; the
    slowest rank's mean, since a synchronous step waits for it (``Profile.loops["bookkeeping"]``,
    a loop fn of ``perfmodel.profile.measure``). Why: on a few ranks sharing a few cores it is a
    part of a small model's step that no other part of the profile holds."""
    import tempfile

    import torch.distributed as dist
    from omegaconf import OmegaConf, open_dict
    c = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True))
    world, rank = dist.get_world_size(), dist.get_rank()
    with open_dict(c):
        c.cluster.nproc, c.cluster.nnodes, c.inject.straggler_ranks = world, 1, []
        c.inject.kill_rank = -1
        c.trainer.max_steps, c.trainer.eval_every, c.trainer.progress = max(2, reps), 10 ** 9, False
        c.checkpoint.every = 0
    info = DistInfo(rank=rank, world_size=world, local_rank=rank, local_world_size=world, backend="gloo",
                    device=torch.device("cpu"), threads=torch.get_num_threads())
    with tempfile.TemporaryDirectory(prefix="workbench-bookkeeping-") as d:
        log = RunLog(d, rank)
        try:
            summary = _Bookkeeping(c, info, meter, log).run()
        finally:
            log.close()
    meter.pop()
    t = torch.tensor([summary["train_time_s"] / max(1, summary["steps"])], dtype=torch.float64, device=comm_device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())
