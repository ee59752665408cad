"""The loop parts every trainer shares: data, model and optimizer construction, the learning-rate
schedule, the step loop with timing, logging, periodic evaluation, divergence and fault injection.

A trainer subclasses :class:`Trainer` and implements ``setup()`` (build what it needs),
``train_step(x, y) -> loss`` (one optimizer step on this rank's batch) and, where not every rank
holds the whole model, ``eval_model()`` / ``is_worker``. Everything else lives here, once.
"""
from __future__ import annotations

import itertools
import math
import os
import signal
import time
from typing import Callable, Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F
from omegaconf import DictConfig
from torch.nn.parallel import DistributedDataParallel as DDP

from workbench import checkpoint as ckpt
from workbench import data as data_mod
from workbench.core import world_size
from workbench.dist import DistInfo, gloo_loop_sched
from workbench.meter import Meter
from workbench.models import SplitModel, build_model
from workbench.runstore import RunLog


class Diverged(RuntimeError):
    """The loss became NaN or infinite."""


def seed_everything(seed: int) -> None:
    import random

    import numpy as np
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def lr_at(optim: DictConfig, step: int, total_steps: int, global_batch: int) -> float:
    """Learning rate for optimizer step ``step`` (0-based): scaling with the global batch (linear:
    Goyal et al.; sqrt: the square-root rule, Krizhevsky 2014 / Hoffer et al. 2017), linear warm-up,
    then the schedule."""
    ratio = global_batch / optim.base_batch_size
    base = optim.lr * {"linear": ratio, "sqrt": math.sqrt(ratio)}.get(optim.scale_lr, 1.0)
    if step < optim.warmup_steps:
        return base * (step + 1) / optim.warmup_steps
    if optim.schedule == "cosine":
        span = max(1, total_steps - optim.warmup_steps)
        return base * 0.5 * (1 + math.cos(math.pi * min(1.0, (step - optim.warmup_steps) / span)))
    if optim.schedule == "step":
        return base * optim.step_gamma ** (step // optim.step_every)
    return base


def build_optimizer(params, optim: DictConfig) -> torch.optim.Optimizer:
    return torch.optim.SGD(params, lr=optim.lr, momentum=optim.momentum, weight_decay=optim.weight_decay,
                           nesterov=optim.nesterov)


def score(model: torch.nn.Module, loader, device: torch.device) -> Tuple[float, int, int]:
    """The one evaluation: summed cross-entropy, correct predictions and samples of ``model`` (in
    eval mode, no gradients) over ``loader``'s batches. Callers sum these over shards (one
    all-reduce) or score the whole test set on one rank (a parameter server's rank 0)."""
    was = model.training
    model.eval()
    loss, correct, n = 0.0, 0, 0
    with torch.no_grad():
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            out = model(x)
            loss += F.cross_entropy(out, y, reduction="sum").item()
            correct += (out.argmax(1) == y).sum().item()
            n += len(y)
    model.train(was)
    return loss, correct, n


def eval_metrics(loss: float, correct: float, n: float) -> Dict[str, float]:
    """``test_loss`` (mean cross-entropy) and ``test_accuracy`` from :func:`score`'s sums."""
    n = max(1.0, n)
    return {"test_loss": loss / n, "test_accuracy": correct / n}


def wrap_ddp(module: torch.nn.Module, device: torch.device, bucket_cap_mb: float, hook_state=None, hook=None,
             **kwargs) -> DDP:
    """The one DDP wiring: ``module`` under DistributedDataParallel (its GPU as the device id, none
    on CPU), with ``hook(hook_state, bucket)`` as its communication hook where given (the meter's
    all-reduce, a compressor's, Stanza's sum over the CONV group); ``kwargs`` go to DDP."""
    ids = [device.index] if device.type == "cuda" else None
    ddp = DDP(module, device_ids=ids, bucket_cap_mb=bucket_cap_mb, **kwargs)
    if hook is not None:
        ddp.register_comm_hook(hook_state, hook)
    return ddp


def restart_count() -> int:
    """How many times the elastic agent has restarted this group (0 on the first attempt)."""
    return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))


def in_progress_bar() -> bool:
    """Ranks started by our launcher leave the bar to the launcher (it reads metrics.jsonl)."""
    return os.environ.get("WORKBENCH_LAUNCHER") != "1"


class Trainer:
    """Base class. Subclasses set ``name`` and register with ``@TRAINERS.register(name)``."""

    name = "base"

    # -- hooks for validation before launch -------------------------------------------------------
    @classmethod
    def num_workers(cls, cfg: DictConfig) -> int:
        """Ranks that compute gradients on data (all of them, unless a trainer has servers)."""
        return world_size(cfg)

    @classmethod
    def validate(cls, cfg: DictConfig) -> None:
        """Trainer-specific checks; raise workbench.core.ConfigError."""

    @classmethod
    def smoke_overrides(cls, nproc: int) -> list:
        """Overrides that make a few-step run of this trainer valid with ``nproc`` ranks (used by
        ``make gpu-check``); e.g. a parameter server needs a server rank besides the workers."""
        return []

    # -- the paradigm's label and performance model (workbench.plan, workbench.analysis) -------------------
    PARADIGM_KEYS = ("trainer.mode", "trainer.protocol", "compressor.name")  # qualifiers, where set

    @classmethod
    def paradigm(cls, get: Callable[[str], object]) -> str:
        """The label of a run of this trainer: its name qualified by its mode/protocol and compressor
        where it has them (``ps/async``, ``compressed/powersgd``; ``sync``). ``get(key)`` reads a
        dotted config key (``trainer.mode``) of the run, None where it has none. workbench.analysis, the
        planner and its JSON use this one function."""
        name = cls.name
        for key in cls.PARADIGM_KEYS:
            v = get(key)
            if isinstance(v, str) and v and v != "none":
                name += f"/{v}"
        return name

    @classmethod
    def plan_variants(cls, ranks: int) -> List[List[str]]:
        """The overrides of each variant of this paradigm the planner ranks on ``ranks`` processes
        (``[["trainer=ps", "trainer.mode=sync"], ...]``); none: the planner leaves it out."""
        return []

    @classmethod
    def perf_model(cls, cfg: DictConfig) -> Tuple[Callable, dict]:
        """This trainer's step-time function in :mod:`workbench.perfmodel.paradigms` and its
        options for ``cfg`` (a trainer that plans variants must say which model predicts them)."""
        raise NotImplementedError(f"trainer {cls.name!r} declares no performance model")

    @classmethod
    def profile_loops(cls, cfg: DictConfig) -> Dict[str, Callable]:
        """Loops of this paradigm the planner's profile times on every rank, by the name its
        performance model looks up in ``Profile.loops`` (``perfmodel.profile.measure(loop_fns=…)``);
        none by default."""
        return {}

    # -- what the bytes suite counts (workbench.bench.bytes) -------------------------------------------
    @classmethod
    def bench_variants(cls, workers: int) -> List[Tuple[str, List[str]]]:
        """(label, overrides) of each run of this paradigm the bytes suite measures with ``workers``
        worker ranks; none: the suite leaves it out."""
        return []

    @classmethod
    def analytic_bytes(cls, cfg: DictConfig, summary: dict, shapes: List[tuple]) -> Optional[float]:
        """Bytes one worker rank sends per training step by this paradigm's algorithm, for a run of
        ``cfg`` whose ``summary.json`` is ``summary`` and whose parameters have ``shapes``; None
        where the paradigm has no closed form."""
        return None

    # -- construction ------------------------------------------------------------------------------
    def __init__(self, cfg: DictConfig, info: DistInfo, meter: Meter, log: RunLog) -> None:
        self.cfg, self.info, self.meter, self.log = cfg, info, meter, log
        self.device = info.device
        self.rank = info.rank
        self.workers = self.num_workers(cfg)
        self.worker_index = self.rank  # position among the worker ranks (data shard)
        self.is_worker = True
        self._stragglers = set(cfg.cluster.straggler_ranks)

    def load_data(self) -> None:
        self.train_set, self.test_set, self.spec = data_mod.load(self.cfg)
        self.batch_size = data_mod.batch_size_per_worker(self.cfg, self.workers)
        self.global_batch = self.batch_size * self.workers

    def build_model(self) -> SplitModel:
        seed_everything(self.cfg.seed)  # the same initial weights on every rank
        return build_model(self.cfg, self.spec).to(self.device)

    def setup(self) -> None:
        raise NotImplementedError  # pragma: no cover - abstract

    def train_step(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError  # pragma: no cover - abstract

    def eval_model(self) -> Optional[torch.nn.Module]:
        return self.model

    def step_metrics(self) -> Dict[str, float]:
        """Extra fields of this step's train record (called once per step, after it); e.g. a
        compressor's encode/decode time and compressed bytes."""
        return {}

    def set_lr(self, lr: float) -> None:
        for g in self.optimizer.param_groups:
            g["lr"] = lr

    @staticmethod
    def loss_fn(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(out, y)

    # -- evaluation --------------------------------------------------------------------------------
    def evaluate(self) -> Dict[str, float]:
        """Test loss and accuracy over the whole held-out set: every worker scores its shard, one
        metered all-reduce (category ``eval``) sums them."""
        model = self.eval_model()
        stats = torch.zeros(3, dtype=torch.float64)
        if self.is_worker and model is not None:
            loader = data_mod.test_loader(self.test_set, self.cfg, self.worker_index, self.workers)
            stats = torch.tensor(score(model, loader, self.device), dtype=torch.float64)
        stats = stats.to(self.info.comm_device)
        self.meter.all_reduce(stats, "eval")
        return eval_metrics(*stats.cpu().tolist())

    def save_final_model(self) -> None:
        """Rank 0 writes the final weights to ``model.pt`` (a plain state dict)."""
        model = self.eval_model()
        if self.rank == 0 and model is not None:
            state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
            torch.save(state, self.log.run_dir / "model.pt")

    # -- the loop ----------------------------------------------------------------------------------
    def total_steps(self, steps_per_epoch: int) -> int:
        t = self.cfg.trainer
        return t.max_steps if t.max_steps > 0 else max(1, math.ceil(t.epochs * steps_per_epoch))

    def straggle(self, compute_s: float) -> None:
        """Make this rank a straggler if ``cluster.straggler_ranks`` names it: sleep a fixed delay
        plus (factor - 1) times the step's own compute time."""
        c = self.cfg.cluster
        if self.rank in self._stragglers:
            time.sleep(c.straggler_delay_s + (c.straggler_factor - 1.0) * compute_s)

    def _maybe_kill(self, step: int) -> None:
        c = self.cfg.cluster
        # Only the first attempt: after a restart or resume the run must be able to finish.
        if self.rank == c.kill_rank and step == c.kill_at_step and restart_count() == 0 and not self._resumed:
            self.log.flush()
            os.kill(os.getpid(), signal.SIGKILL)

    # -- checkpoints -------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """This rank's training state (model, optimizer). Trainers with more state (servers'
        shards, compressor buffers, clocks) extend it: ``{**super().state_dict(), "mine": ...}``."""
        out = {}
        model = self.eval_model()
        if model is not None:
            out["model"] = model.state_dict()
        opt = getattr(self, "optimizer", None)
        if opt is not None:
            out["optimizer"] = opt.state_dict()
        return out

    def load_state_dict(self, state: dict) -> None:
        model = self.eval_model()
        if model is not None and "model" in state:
            model.load_state_dict(state["model"])
        opt = getattr(self, "optimizer", None)
        if opt is not None and "optimizer" in state:
            opt.load_state_dict(state["optimizer"])

    def _save_checkpoint(self, step: int, epoch: int, loop: dict) -> None:
        state = {"trainer": self.state_dict(), "step": step, "epoch": epoch, "loop": loop,
                 "rng": ckpt.rng_state(), "meter": self.meter.totals()}
        ckpt.save(self.log.run_dir, self.rank, step, state, keep=self.cfg.checkpoint.keep)

    def _resume(self) -> Optional[dict]:
        """Load the newest complete checkpoint, if any (after a restart or `workbench resume`)."""
        state = ckpt.resume(self.log.run_dir, self.rank, self.info.world_size, self.meter,
                            lambda s: self.load_state_dict(s["trainer"]))
        if state is not None:
            self.log.truncate_after(state["step"])
        return state

    # -- the loop ----------------------------------------------------------------------------------
    def run(self) -> dict:
        cfg, t = self.cfg, self.cfg.trainer
        self.load_data()
        self.setup()
        loader, sampler = data_mod.train_loader(self.train_set, cfg, self.worker_index, self.workers, cfg.seed)
        steps_per_epoch = len(loader)
        if steps_per_epoch == 0:
            raise ValueError(f"data.batch_size: {self.global_batch} samples per step exceed the "
                             f"{len(self.train_set)} training samples")
        total = self.total_steps(steps_per_epoch)
        resumed = self._resume()
        self._resumed = resumed is not None
        loop = resumed["loop"] if resumed else {"train_time": 0.0, "eval_time": 0.0, "samples": 0, "sent_total": 0,
                                                 "elapsed": 0.0, "last_eval": {}}
        step = resumed["step"] if resumed else 0
        epoch, offset = divmod(step, steps_per_epoch)
        self.log.log({"kind": "resume" if resumed else "start", "step": step, "total_steps": total,
                      "steps_per_epoch": steps_per_epoch, "global_batch": self.global_batch, "workers": self.workers,
                      "world_size": self.info.world_size, "restarts": restart_count()})
        bar = None
        if self.rank == 0 and t.progress and in_progress_bar():
            from tqdm.auto import tqdm
            bar = tqdm(total=total, initial=step, desc=f"{self.name}", unit="step", dynamic_ncols=True)

        self.meter.pop()  # set-up traffic (DDP's initial broadcast) is not a training step
        start = time.perf_counter() - loop["elapsed"]
        train_time, eval_time, samples = loop["train_time"], loop["eval_time"], loop["samples"]
        sent_total, last_eval = loop["sent_total"], dict(loop["last_eval"])
        every = cfg.checkpoint.every
        t_prev = time.perf_counter()
        while step < total:
            sampler.set_epoch(epoch)
            # after a resume, skip the batches of this epoch that were already trained on
            batches = itertools.islice(loader, offset, None) if offset else loader
            offset = 0
            for x, y in batches:
                if step >= total:
                    break
                lr = lr_at(cfg.optim, step, total, self.global_batch)
                self.set_lr(lr)
                x, y = x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)
                t_step = time.perf_counter()
                loss = self.train_step(x, y)
                if self._stragglers:
                    self.straggle(time.perf_counter() - t_step)
                busy = time.perf_counter() - t_step
                step += 1
                self._maybe_kill(step)
                window = self.meter.pop()
                now = time.perf_counter()
                dt = now - t_prev
                train_time += dt
                samples += self.global_batch
                sent = sum(c["sent"] for c in window.values())
                sent_total += sent
                extra = self.step_metrics()
                if step % t.log_every == 0 or step == total:
                    loss_v = float(loss.item()) if loss is not None else float("nan")
                    if loss is not None and not math.isfinite(loss_v):
                        raise Diverged(f"loss is {loss_v} at step {step} (lr {lr:g}); lower optim.lr or add warm-up")
                    self.log.comm_step(step, window)
                    self.log.log({"kind": "train", "step": step, "epoch": epoch + 1, "time": now - start,
                                  "loss": loss_v, "lr": lr, "step_time": dt, "train_step_time": busy,
                                  "samples_per_s": self.global_batch / dt,
                                  "bytes_sent": sent, **extra, "comm": window})
                    if bar is not None:
                        bar.set_postfix(loss=f"{loss_v:.3f}", **({"acc": f"{last_eval['test_accuracy']:.3f}"} if last_eval else {}),
                                        refresh=False)
                if bar is not None:
                    bar.update(1)
                if step % t.eval_every == 0 or step == total:
                    t0 = time.perf_counter()
                    last_eval = self.evaluate()
                    self.meter.pop()  # eval traffic is reported with the eval record, not the step
                    eval_time += time.perf_counter() - t0
                    self.log.log({"kind": "eval", "step": step, "epoch": epoch + 1, "time": time.perf_counter() - start,
                                  "train_time": train_time, **last_eval})
                    self.log.flush()
                if every and step % every == 0 and step < total:
                    self.log.flush()
                    self._save_checkpoint(step, epoch if step % steps_per_epoch else epoch + 1, {
                        "train_time": train_time, "eval_time": eval_time, "samples": samples, "sent_total": sent_total,
                        "elapsed": time.perf_counter() - start, "last_eval": last_eval})
                t_prev = time.perf_counter()
            epoch += 1
        if bar is not None:
            bar.close()
        wall = time.perf_counter() - start
        self.save_final_model()
        return {
            "trainer": self.name, "model": cfg.model.name, "data": cfg.data.name,
            "world_size": self.info.world_size, "workers": self.workers, "backend": self.info.backend,
            "device": str(self.device), "threads_per_rank": self.info.threads,
            # the cores rank 0's threads run on, read back from the kernel (None: not pinned, cluster.pin)
            "cores": sorted(os.sched_getaffinity(0)) if self.info.cores is not None else None,
            # and its gloo device threads' scheduling policy, read back (["batch"] pinned:
            # workbench.dist.yield_gloo_loops)
            "gloo_loop_sched": gloo_loop_sched(),
            "global_batch": self.global_batch, "batch_per_worker": self.batch_size,
            "steps": step, "epochs": step / steps_per_epoch, "samples": samples,
            "final_test_accuracy": last_eval.get("test_accuracy"), "final_test_loss": last_eval.get("test_loss"),
            "train_time_s": train_time, "eval_time_s": eval_time, "wall_time_s": wall,
            "samples_per_s": samples / train_time if train_time > 0 else None,
            "bytes_per_step": sent_total / max(1, step),
            "bytes_by_category": self.meter.totals(),
            "restarts": restart_count(), "resumed_from_step": resumed["step"] if resumed else None,
        }


# -- what the loop itself costs (the performance model's profile) -------------------------------------
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
    a loop fn of ``perfmodel.profile.measure``). Why: on 3 ranks and 2 cores it was 0.3–0.65 ms of
    the small CNN's 5–28 ms steps, which no other part of the profile holds."""
    import tempfile

    import torch.distributed as dist
    from omegaconf import OmegaConf, open_dict
    c = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True))
    world, rank = dist.get_world_size(), dist.get_rank()
    with open_dict(c):
        c.cluster.nproc, c.cluster.nnodes, c.cluster.straggler_ranks = world, 1, []
        c.cluster.kill_rank = -1
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
