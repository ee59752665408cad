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
from dataclasses import dataclass, field
from typing import Dict, Optional, Tuple

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
from workbench.runs.store import RunLog


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
    """Base class. Subclasses set ``name`` and register with ``@TRAINERS.register(name)``; what the
    planner and the suites read about a trainer is its :class:`~workbench.spec.ParadigmSpec`,
    declared beside it in its module."""

    name = "base"

    # -- hooks for validation before launch -------------------------------------------------------
    @classmethod
    def num_workers(cls, cfg: DictConfig) -> int:
        """Ranks that compute gradients on data (all of them, unless a trainer has servers)."""
        return world_size(cfg)

    @classmethod
    def validate(cls, cfg: DictConfig) -> None:
        """Trainer-specific checks; raise workbench.core.ConfigError."""

    # every rank takes part in each evaluation and gets its result (trainer.stop_at_accuracy may stop them together)
    shared_evaluation = True

    @classmethod
    def compressed_messages(cls, cfg: DictConfig) -> list:
        """The messages this trainer sends through ``cfg.compressor`` (:class:`workbench.compress.messages.Message`
        each); validation refuses a compressor that cannot carry one, or any compressor where this is empty."""
        return []

    # -- construction ------------------------------------------------------------------------------
    def __init__(self, cfg: DictConfig, info: DistInfo, meter: Meter, log: RunLog) -> None:
        self.cfg, self.info, self.meter, self.log = cfg, info, meter, log
        self.device = info.device
        self.rank = info.rank
        self.workers = self.num_workers(cfg)
        self.worker_index = self.rank  # position among the worker ranks (data shard)
        self.is_worker = True
        self._stragglers = set(cfg.inject.straggler_ranks)

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
        """Make this rank a straggler if ``inject.straggler_ranks`` names it: sleep a fixed delay
        plus (factor - 1) times the step's own compute time."""
        c = self.cfg.inject
        if self.rank in self._stragglers:
            time.sleep(c.straggler_delay_s + (c.straggler_factor - 1.0) * compute_s)

    def _maybe_kill(self, step: int) -> None:
        """SIGKILL this rank at ``inject.kill_at_step`` if ``inject.kill_rank`` names it."""
        c = self.cfg.inject
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
        """Train to the step budget: each step timed, logged, evaluated and checkpointed as the
        config says; returns this rank's ``summary.json`` fields."""
        self.load_data()
        self.setup()
        loader, sampler = data_mod.train_loader(self.train_set, self.cfg, self.worker_index, self.workers, self.cfg.seed)
        L = self._begin(len(loader))
        offset = L.step % L.steps_per_epoch
        bar = self._progress_bar(L)
        self.meter.pop()  # set-up traffic (DDP's initial broadcast) is not a training step
        L.start = time.perf_counter() - L.start
        t_prev = time.perf_counter()
        while L.step < L.total:
            sampler.set_epoch(L.epoch)
            # after a resume, skip the batches of this epoch that were already trained on
            batches = itertools.islice(loader, offset, None) if offset else loader
            offset = 0
            for x, y in batches:
                if L.step >= L.total:
                    break
                self._step(L, x, y, t_prev, bar)
                t_prev = time.perf_counter()
            L.epoch += 1
        if bar is not None:
            bar.close()
        wall = time.perf_counter() - L.start
        self.save_final_model()
        return self._summary(L, wall)

    def _begin(self, steps_per_epoch: int) -> "LoopState":
        """The loop's state at its first step: fresh, or the newest checkpoint's; logs the
        ``start`` (or ``resume``) record."""
        if steps_per_epoch == 0:
            raise ValueError(f"data.batch_size: {self.global_batch} samples per step exceed the "
                             f"{len(self.train_set)} training samples")
        total = self.total_steps(steps_per_epoch)
        resumed = self._resume()
        self._resumed = resumed is not None
        L = LoopState(total, steps_per_epoch)
        if resumed:
            L.restore(resumed)
        self.log.log({"kind": "resume" if resumed else "start", "step": L.step, "total_steps": total,
                      "steps_per_epoch": steps_per_epoch, "global_batch": self.global_batch, "workers": self.workers,
                      "world_size": self.info.world_size, "restarts": restart_count()})
        return L

    def _progress_bar(self, L: "LoopState"):
        if self.rank == 0 and self.cfg.trainer.progress and in_progress_bar():
            from tqdm.auto import tqdm
            return tqdm(total=L.total, initial=L.step, desc=f"{self.name}", unit="step", dynamic_ncols=True)
        return None

    def _step(self, L: "LoopState", x, y, t_prev: float, bar) -> None:
        """One optimizer step and what follows it: the train record, evaluation, a checkpoint."""
        t = self.cfg.trainer
        lr = lr_at(self.cfg.optim, L.step, L.total, self.global_batch)
        self.set_lr(lr)
        x, y = x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)
        t_step = time.perf_counter()
        loss = self.train_step(x, y)
        if self._stragglers:
            self.straggle(time.perf_counter() - t_step)
        busy = time.perf_counter() - t_step
        L.step += 1
        self._maybe_kill(L.step)
        window = self.meter.pop()
        now = time.perf_counter()
        dt = now - t_prev
        L.train_time += dt
        L.samples += self.global_batch
        sent = sum(c["sent"] for c in window.values())
        L.sent_total += sent
        extra = self.step_metrics()
        if L.step % t.log_every == 0 or L.step == L.total:
            loss_v = float(loss.item()) if loss is not None else float("nan")
            if loss is not None and not math.isfinite(loss_v):
                raise Diverged(f"loss is {loss_v} at step {L.step} (lr {lr:g}); lower optim.lr or add warm-up")
            self.log.comm_step(L.step, window)
            self.log.log({"kind": "train", "step": L.step, "epoch": L.epoch + 1, "time": now - L.start,
                          "loss": loss_v, "lr": lr, "step_time": dt, "train_step_time": busy,
                          "samples_per_s": self.global_batch / dt, "bytes_sent": sent, **extra, "comm": window})
            if bar is not None:
                bar.set_postfix(loss=f"{loss_v:.3f}", **({"acc": f"{L.last_eval['test_accuracy']:.3f}"} if L.last_eval else {}),
                                refresh=False)
        if bar is not None:
            bar.update(1)
        if L.step % t.eval_every == 0 or L.step == L.total:
            self._eval(L)
            stop = t.get("stop_at_accuracy")
            if stop is not None and (L.last_eval.get("test_accuracy") or 0) >= stop and L.step < L.total:
                L.total = L.step  # every rank evaluated the same accuracy (shared_evaluation): all stop here
                self.log.log({"kind": "stop", "step": L.step, "reason": f"test accuracy reached {stop}"})
        every = self.cfg.checkpoint.every
        if every and L.step % every == 0 and L.step < L.total:
            self.log.flush()
            self._save_checkpoint(L.step, L.epoch if L.step % L.steps_per_epoch else L.epoch + 1, L.saved())

    def _eval(self, L: "LoopState") -> None:
        t0 = time.perf_counter()
        L.last_eval = self.evaluate()
        self.meter.pop()  # eval traffic is reported with the eval record, not the step
        L.eval_time += time.perf_counter() - t0
        self.log.log({"kind": "eval", "step": L.step, "epoch": L.epoch + 1, "time": time.perf_counter() - L.start,
                      "train_time": L.train_time, **L.last_eval})
        self.log.flush()

    def _summary(self, L: "LoopState", wall: float) -> dict:
        cfg = self.cfg
        return {
            "trainer": self.name, "model": cfg.model.name, "data": cfg.data.name,
            "world_size": self.info.world_size, "workers": self.workers, "backend": self.info.backend,
            "device": str(self.device), "threads_per_rank": self.info.threads,
            # the cores rank 0's threads run on, read back from the kernel (None: not pinned, testbed.pin)
            "cores": sorted(os.sched_getaffinity(0)) if self.info.cores is not None else None,
            # and its gloo device threads' scheduling policy, read back (["batch"] pinned:
            # workbench.dist.yield_gloo_loops)
            "gloo_loop_sched": gloo_loop_sched(),
            "global_batch": self.global_batch, "batch_per_worker": self.batch_size,
            "steps": L.step, "epochs": L.step / L.steps_per_epoch, "samples": L.samples,
            "final_test_accuracy": L.last_eval.get("test_accuracy"), "final_test_loss": L.last_eval.get("test_loss"),
            "train_time_s": L.train_time, "eval_time_s": L.eval_time, "wall_time_s": wall,
            "samples_per_s": L.samples / L.train_time if L.train_time > 0 else None,
            "bytes_per_step": L.sent_total / max(1, L.step),
            "bytes_by_category": self.meter.totals(),
            "restarts": restart_count(), "resumed_from_step": L.resumed_from,
        }


@dataclass
class LoopState:
    """What :meth:`Trainer.run` carries from step to step; a checkpoint keeps it (:meth:`saved`)."""

    total: int  # the step budget
    steps_per_epoch: int
    step: int = 0  # optimizer steps done
    epoch: int = 0  # 0-based epoch of the next batch
    train_time: float = 0.0
    eval_time: float = 0.0
    samples: int = 0
    sent_total: int = 0
    last_eval: dict = field(default_factory=dict)
    start: float = 0.0  # perf_counter() of the run's start (before the loop: the elapsed time resumed)
    resumed_from: Optional[int] = None  # the checkpoint's step, where the run resumed

    def restore(self, state: dict) -> None:
        """Continue from a checkpoint's ``state`` (:meth:`Trainer._resume`)."""
        loop = state["loop"]
        self.step = self.resumed_from = state["step"]
        self.epoch = self.step // self.steps_per_epoch
        self.train_time, self.eval_time, self.samples = loop["train_time"], loop["eval_time"], loop["samples"]
        self.sent_total, self.last_eval, self.start = loop["sent_total"], dict(loop["last_eval"]), loop["elapsed"]

    def saved(self) -> dict:
        """The ``loop`` entry of a checkpoint."""
        return {"train_time": self.train_time, "eval_time": self.eval_time, "samples": self.samples,
                "sent_total": self.sent_total, "elapsed": time.perf_counter() - self.start,
                "last_eval": self.last_eval}
