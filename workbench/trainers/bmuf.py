"""Block-momentum model update filtering (BMUF; Chen & Huo, ICASSP'16; docs/papers.md §3), and local SGD.

Every rank trains its own copy with local SGD (the run's optimizer and schedule). After every
``trainer.block`` local steps one metered all-reduce (category ``allreduce``) averages the models,
and the global model W is filtered with block momentum η and block learning rate ζ:

    W̄ = mean of the workers' models,   G = W̄ − S,   Δ ← ηΔ + ζG,   W ← W + Δ

where S is the point the block started from. Workers start the next block from S = W
(``nesterov=false``) or from S = W + ηΔ (``nesterov=true``, the paper's Nesterov variant). G is the
block's own progress, measured from S as in Chen & Huo and CNTK's BlockMomentumSGD: measured from W
instead, the look-ahead ηΔ would be counted again in every block (momentum 2η, > 1 for the default
η = 0.75 with 4 workers: NaN after ~70 steps on the digits). η = null picks the paper's 1 − 1/N. ``trainer=local_sgd`` is the same
trainer with η = 0, ζ = 1: plain periodic model averaging. Evaluation and ``model.pt`` use W; a
last, shorter block closes the run when the step count is not a multiple of the block.

With a compressor (``compressor=topk`` …) each worker's block progress x_i − S goes through the
compressor's collective instead of the model's all-reduce (its mean is G; :func:`block_sync`,
:mod:`workbench.compress.delta`); ``compressor=none`` is the all-reduce of the model, bit for bit.

    python -m workbench trainer=bmuf cluster.nproc=4 trainer.block=8
    python -m workbench trainer=bmuf trainer.block_momentum=0.5 trainer.nesterov=false
    python -m workbench trainer=local_sgd cluster.nproc=4 trainer.block=4
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Optional

import torch
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from workbench.compress import COMPRESSORS
from workbench.compress.delta import DeltaAverager, bucket_numels
from workbench.compress.messages import Message, build_codec
from workbench.core import ConfigError, TrainerConfig, store_schema
from workbench.perfmodel.efficiency import Update
from workbench.spec import ParadigmSpec, declare
from workbench.trainers import TRAINERS
from workbench.trainers.base import Trainer, build_optimizer


@dataclass
class BMUFConfig(TrainerConfig):
    name: str = "bmuf"
    block: int = 8  # local steps between model averages
    block_momentum: Optional[float] = None  # eta in [0, 1); null: 1 - 1/N (N workers)
    block_lr: float = 1.0  # zeta > 0
    nesterov: bool = True  # start each block from W + eta * Delta
    reset_local_momentum: bool = True  # zero the local optimizer's momentum at each block start (CNTK's default)


@dataclass
class LocalSGDConfig(BMUFConfig):
    name: str = "local_sgd"
    block_momentum: Optional[float] = 0.0
    block_lr: float = 1.0
    nesterov: bool = False
    reset_local_momentum: bool = False  # plain periodic averaging keeps each worker's momentum


store_schema("trainer", "bmuf", BMUFConfig)
store_schema("trainer", "local_sgd", LocalSGDConfig)


def bmuf_update(global_w: torch.Tensor, delta: torch.Tensor, mean_w: torch.Tensor, start: torch.Tensor, eta: float,
                zeta: float, nesterov: bool) -> torch.Tensor:
    """One block update in place on ``global_w`` and ``delta``, for a block that started at
    ``start``; returns where workers start the next block."""
    return bmuf_step(global_w, delta, mean_w - start, eta, zeta, nesterov)


def bmuf_step(global_w: torch.Tensor, delta: torch.Tensor, progress: torch.Tensor, eta: float, zeta: float,
              nesterov: bool) -> torch.Tensor:
    """:func:`bmuf_update` given the block's averaged progress G = W̄ − S itself (what a
    compressed average decodes)."""
    delta.mul_(eta).add_(progress, alpha=zeta)
    global_w.add_(delta)
    return global_w + eta * delta if nesterov else global_w.clone()


def block_sync(model, global_model, delta: torch.Tensor, start: torch.Tensor, meter, workers: int, eta: float,
               zeta: float, nesterov: bool, optimizer=None, averager=None) -> torch.Tensor:
    """A block's end on every rank: the local models averaged (one all-reduce of the flat model),
    the block filter on the global model, and the local model moved to where the next block starts
    (returned); the local optimizer's momentum dropped (``optimizer``, where it is reset). The
    trainer's ``sync_block`` and the profile's timing of it (:func:`block_loop`) run this one.

    With ``averager`` (a :class:`~workbench.compress.delta.DeltaAverager`: ``compressor`` other
    than none) the compressor averages the block's progress x_i − S instead, whose mean is G (S is
    the same on every rank); without, the model itself is all-reduced, as plain local SGD does."""
    w = parameters_to_vector(global_model.parameters()).detach()
    local = parameters_to_vector(model.parameters()).detach()
    if averager is not None:
        nxt = bmuf_step(w, delta, averager.average(local - start), eta, zeta, nesterov)
    else:
        avg = local.clone()
        meter.all_reduce(avg, "allreduce")
        avg.div_(workers)
        nxt = bmuf_update(w, delta, avg, start, eta, zeta, nesterov)
    with torch.no_grad():
        vector_to_parameters(w, global_model.parameters())
        vector_to_parameters(nxt, model.parameters())
    if optimizer is not None:
        # the block filter carries the momentum across blocks; a local buffer kept across the
        # jump to the new start would apply it twice
        for state in optimizer.state.values():
            state.pop("momentum_buffer", None)
    return nxt.clone()


def _block_loop(model, step, meter, comm_device, make_optimizer, reps, block: int = 8, nesterov: bool = True,
                reset: bool = True, **_) -> float:
    """Seconds per step of BMUF's loop on every rank, the ranks' mean: ``block`` local steps, each
    with its optimizer step, then :func:`block_sync` (``Profile.loops["block/<block>"]``), at the
    profile's weights: the optimizer's learning rate is 0, so every update does its arithmetic
    and moves nothing. A loop that trains on the profile's one batch over and over drives the loss
    to 0 and the gradients into denormal floats, whose arithmetic is slow on a CPU, and would time
    a slower loop than the trainer runs (docs/notes/2026-12-06-trainers-history.md)."""
    import copy

    import torch.distributed as dist

    from workbench.perfmodel.profile import block_loop_s
    saved = copy.deepcopy(model.state_dict())
    opt = make_optimizer(list(model.parameters()))
    for group in opt.param_groups:
        group["lr"] = 0.0
    global_model = copy.deepcopy(model)
    start = parameters_to_vector(model.parameters()).detach().clone()
    state = {"start": start, "delta": torch.zeros_like(start)}

    def local():
        step()
        opt.step()

    def sync():
        state["start"] = block_sync(model, global_model, state["delta"], state["start"], meter, dist.get_world_size(),
                                    0.5, 1.0, nesterov, opt if reset else None)
    try:
        return block_loop_s(meter, comm_device, local, reps, block, sync)
    finally:
        model.load_state_dict(saved)


def block_loop(block: int, nesterov: bool = True, reset: bool = True):
    """The profile's loop function (``measure(loop_fns=…)``) of :func:`_block_loop`; a partial of a
    module function, as the ranks are spawned and take it pickled."""
    from functools import partial
    return partial(_block_loop, block=block, nesterov=nesterov, reset=reset)


@TRAINERS.register("bmuf")
class BMUFTrainer(Trainer):
    name = "bmuf"

    @classmethod
    def compressed_messages(cls, cfg) -> list:
        return [Message("delta", "collective", what=f"{cls.name}'s block average (the model delta)")]

    @classmethod
    def validate(cls, cfg) -> None:
        t = cfg.trainer
        if t.block < 1:
            raise ConfigError(f"invalid value {t.block!r} for trainer.block: must be >= 1")
        if t.block_momentum is not None and not 0 <= t.block_momentum < 1:
            raise ConfigError(f"invalid value {t.block_momentum!r} for trainer.block_momentum: must be in [0, 1), or null for 1 - 1/N")
        if t.block_lr <= 0:
            raise ConfigError(f"invalid value {t.block_lr!r} for trainer.block_lr: must be > 0")

    def setup(self) -> None:
        t = self.cfg.trainer
        self.model = self.build_model()
        self.optimizer = build_optimizer(self.model.parameters(), self.cfg.optim)
        self.eta = 1.0 - 1.0 / self.workers if t.block_momentum is None else float(t.block_momentum)
        self.global_model = copy.deepcopy(self.model)  # W: what is evaluated and saved
        w = parameters_to_vector(self.model.parameters()).detach()
        self.delta = torch.zeros_like(w)
        self.start = w.clone()  # S: where this block's local training started
        self.local_steps = 0
        codec = build_codec(self.cfg.compressor, self.compressed_messages(self.cfg)[0], self.rank, self.workers,
                            self.cfg.seed)
        # compressor=none: no averager, the plain all-reduce of the model (bit for bit the uncompressed run)
        self.averager = None if codec is None else DeltaAverager(
            codec, self.meter, [p.shape for p in self.model.parameters()], seed=self.cfg.seed)

    def eval_model(self):
        return self.global_model

    def state_dict(self) -> dict:
        # base: the global model W and the local optimizer; a block in progress needs the rest
        # and a compressor's residuals (PowerSGD: P, Q) and round counter
        out = {**super().state_dict(), "local": self.model.state_dict(), "delta": self.delta.clone(),
               "start": self.start.clone(), "local_steps": self.local_steps}
        return out if self.averager is None else {**out, "compressor": self.averager.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.model.load_state_dict(state["local"])
        self.delta.copy_(state["delta"])
        self.start.copy_(state.get("start", parameters_to_vector(self.global_model.parameters()).detach()))
        self.local_steps = int(state["local_steps"])
        if self.averager is not None and "compressor" in state:
            self.averager.load_state_dict(state["compressor"])

    def sync_block(self) -> None:
        t = self.cfg.trainer
        self.start = block_sync(self.model, self.global_model, self.delta, self.start, self.meter, self.workers,
                                self.eta, t.block_lr, t.nesterov, self.optimizer if t.reset_local_momentum else None,
                                self.averager)

    def step_metrics(self) -> dict:
        """A compressed block average's fields (as trainer=compressed's) in the record of its step."""
        return {} if self.averager is None else self.averager.pop_stats()

    def run(self) -> dict:
        summary = super().run()
        if self.averager is not None:
            summary["compression"] = {"compressor": dict(self.cfg.compressor), "world": self.workers,
                                      "collective": self.averager.compressor.collective,
                                      "buckets": self.averager.bucket_profile()}
        return summary

    def train_step(self, x, y):
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.loss_fn(self.model(x), y)
        loss.backward()
        self.optimizer.step()
        self.local_steps += 1
        if self.local_steps % self.cfg.trainer.block == 0:
            self.sync_block()
        return loss.detach()

    def save_final_model(self) -> None:
        if self.local_steps % self.cfg.trainer.block:
            self.sync_block()
        super().save_final_model()


@TRAINERS.register("local_sgd")
class LocalSGDTrainer(BMUFTrainer):
    """Periodic model averaging: BMUF with eta = 0, zeta = 1 (the defaults of conf/trainer/local_sgd.yaml)."""

    name = "local_sgd"


def _bmuf_model(cfg):
    from workbench.compress.codec_timing import codec_for
    from workbench.perfmodel import paradigms
    delta = codec_for(cfg.get("compressor"))
    if delta is not None:  # bmuf+<c> / local_sgd+<c>: the block's delta through the compressor
        return paradigms.compressed_messages.bmuf, {"block": int(cfg.trainer.block), "delta": delta}
    return paradigms.bmuf, {"block": int(cfg.trainer.block)}


def _block_variants(name: str, ranks: int) -> list:
    """The trainer, and with each planned compressor that averages a delta by its collective (with
    the start its bench settings give it: PowerSGD's start counts averaging rounds, which a short
    verification never reaches at its default)."""
    from workbench.compress.codec_timing import planned
    return [[f"trainer={name}"]] + [[f"trainer={name}", f"compressor={c}",
                                     *[o for o in COMPRESSORS[c].bench_overrides if o.startswith("compressor.start_iter=")]]
                                    for c in planned(("delta", "collective"))]


def _block_bytes(cfg, summary, shapes) -> float:
    """Bytes a worker sends per step: one average per ``trainer.block`` steps, a ring all-reduce of
    the float32 model (2(N-1)/N M), or with a compressor its payload over the averager's buckets
    times its collective's factor (:meth:`workbench.compress.Compressor.sent_bytes`). A run's
    last, shorter block (steps not a multiple of the block) averages at save time, in no step."""
    n, block = BMUFTrainer.num_workers(cfg), int(cfg.trainer.block)
    comp = cfg.get("compressor")
    if comp is None or comp.name == "none":
        return 2 * (n - 1) / n * 4 * sum(math.prod(s) for s in shapes) / block
    cls, buckets = COMPRESSORS[comp.name], bucket_numels(shapes)
    return cls.sent_bytes(cls.payload_bytes_of_shapes(comp, shapes, buckets), len(buckets), n) / block


def _block_steady(cfg) -> int:
    """A compressor's ``start_iter`` counts averaging rounds here: its first compressed round is
    over after (start_iter + 1) blocks (the first one may set up its state)."""
    comp = cfg.get("compressor")
    start = int(comp.get("start_iter", 0) or 0) if comp is not None and comp.name != "none" else 0
    return (start + 1) * int(cfg.trainer.block) if start else 0


def _block_loops(cfg) -> dict:
    # the ranks re-align once a block, not every step, and the block's sync is work of its own
    # (paradigms.bmuf): the loop with it, as this trainer runs it
    t = cfg.trainer
    return {f"block/{int(t.block)}": block_loop(int(t.block), bool(t.nesterov), bool(t.reset_local_momentum))}


def _averaging_law(cfg, ranks) -> Optional[Update]:
    """Model averaging makes the progress synchronous SGD makes from the same samples: on the
    quadratic model the gradient is linear in the weights, so the average of the workers' local
    steps is synchronous SGD's step at their whole batch (Stich 2019; Lin et al. 2020 measure it
    close while the rate is small). Block momentum η (Nesterov) with block rate ζ is stable there
    while the block's own progress ζ(1 − (1 − a)^H) stays below 2(1 + η)/(1 + 2η), which ζ ≤ 1
    guarantees; a larger ζ has no law here."""
    if float(cfg.trainer.block_lr) > 1.0:
        return None
    plain = cfg.trainer.block_momentum is not None and float(cfg.trainer.block_momentum) == 0.0
    return Update(law="samples (model averaging" + (")" if plain else ", block momentum)"))


for _name in ("bmuf", "local_sgd"):  # local SGD is BMUF with eta = 0, zeta = 1: the same model and loop
    declare(ParadigmSpec(_name, perf_model=_bmuf_model, update_law=_averaging_law, profile_loops=_block_loops, analytic_bytes=_block_bytes,
                         steady_after=_block_steady, plan_variants=lambda ranks, n=_name: _block_variants(n, ranks)))
