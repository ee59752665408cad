"""Parameter server: workers push gradients, CPU servers run the optimizer and send weights back.

The last ``trainer.num_servers`` ranks are servers, each holding whole parameter tensors balanced
by size (:mod:`workbench.ps.sharding`); the others are workers that compute gradients on their shard
of the data. Every byte goes through the meter: ``grad_push`` (gradients up), ``param_pull``
(weights down), ``ps_control`` (32-byte headers carrying the servers' clocks), so a worker moves
exactly 2 x model bytes per step, against 2(N-1)/N x model bytes for a ring all-reduce.

- ``trainer.mode=sync`` (BSP): each server averages one gradient from every worker, then updates;
  the same parameters as ``trainer=sync`` and single-process SGD on the global batch.
- ``trainer.mode=async`` (Downpour): each gradient is applied as it arrives; the worker gets the
  weights back at once and goes on.

For bounded staleness, n-softsync and learning-rate modulation see ``trainer=staleness``.

Compression (:mod:`workbench.ps.compression`): ``compressor=<name>`` compresses every push (a codec
per worker and server shard, error feedback per shard where ``compressor.error_feedback``);
``compressor.pull=<name>|same`` also compresses the weights sent back, as deltas against the
replica the server keeps of each worker's copy. rank 0's train records carry ``payload_bytes``,
``dense_bytes``, ``compression_ratio``, ``encode_ms``, ``decode_ms`` (and ``pull_payload_bytes``).

    python -m workbench trainer=ps cluster.nproc=4                       # 3 workers, 1 server
    python -m workbench trainer=ps trainer.mode=async trainer.num_servers=2 cluster.nproc=4
    python -m workbench trainer=ps trainer.mode=async inject.straggler_ranks=[1] inject.straggler_delay_s=0.05
    # GPU workers, CPU servers (servers ignore the device; the protocol uses a gloo group):
    python -m workbench trainer=ps cluster=local_gpu cluster.nproc=5 trainer.num_servers=1
    # Top-K pushes (1 %, error feedback), and 16-bit pulls:
    python -m workbench trainer=ps compressor=topk compressor.k=0.01 compressor.pull=fp16
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from workbench.core import ConfigError, TrainerConfig, store_schema
from workbench.ps import compression
from workbench.ps.rules import GradientRule
from workbench.ps.sharding import ShardLayout
from workbench.ps.trainer import PSTrainer, smoke_overrides
from workbench.perfmodel.efficiency import SYNC, Update
from workbench.spec import ParadigmSpec, declare
from workbench.stability import rate_factor
from workbench.trainers import TRAINERS
from workbench.trainers.base import build_optimizer, lr_at


@dataclass
class PSConfig(TrainerConfig):
    name: str = "ps"
    num_servers: int = 1  # server ranks (the last ones); the rest are workers
    mode: str = "sync"  # sync: average one gradient per worker, then update | async: apply each on arrival
    # async: the servers run optim.momentum - (1 - 1/lambda) (>= 0), because asynchrony adds an
    # implied momentum of 1 - 1/lambda (Mitliagkas et al. 2016); false: plain Downpour
    compensate_momentum: bool = True


store_schema("trainer", "ps", PSConfig)


class GradientPSTrainer(PSTrainer):
    """Workers push gradients, servers apply them with a :class:`GradientRule`; both directions
    may be compressed (:mod:`workbench.ps.compression`)."""

    push_message = compression.PUSH
    pull_message = compression.PULL

    @classmethod
    def compressed_messages(cls, cfg) -> list:
        return compression.messages(cfg.get("compressor"))

    def rule_options(self) -> dict:
        raise NotImplementedError  # pragma: no cover - abstract

    def make_rule(self, params: torch.Tensor, total_steps: int) -> GradientRule:
        from omegaconf import OmegaConf

        from workbench.stability import explicit_momentum
        mu = explicit_momentum(self.cfg)
        optim = OmegaConf.merge(self.cfg.optim, {"momentum": mu, "nesterov": bool(self.cfg.optim.nesterov and mu > 0)})
        return GradientRule(params, self.worker_ranks, **self.rule_options(),
                            make_optimizer=lambda ps: build_optimizer(ps, optim),
                            lr_fn=lambda step: lr_at(optim, step, total_steps, self.global_batch))

    def set_lr(self, lr: float) -> None:
        self.lr = lr  # the servers run the schedule; workers have no optimizer

    def worker_step(self, x, y):
        for p in self.params:
            p.grad = None
        loss = self.loss_fn(self.model(x), y)
        loss.backward()
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in self.params]
        self.client.push_pull(grads, self.params, step=self.steps_done - 1)
        return loss.detach()


@TRAINERS.register("ps")
class ParameterServerTrainer(GradientPSTrainer):
    name = "ps"

    @classmethod
    def validate(cls, cfg) -> None:
        super().validate(cfg)
        if cfg.trainer.mode not in ("sync", "async"):
            raise ConfigError(f"invalid value {cfg.trainer.mode!r} for trainer.mode: choose from sync, async")

    def rule_options(self) -> dict:
        if self.cfg.trainer.mode == "sync":
            return {"hardsync": True}
        return {"hardsync": False, "c": 1}


def push_pull_bytes(cfg, summary, shapes) -> float:
    """A worker pushes its gradients and pulls the weights: M = the parameters' float32 bytes
    each way (the 32-byte headers per server are counted apart, as control). A compressed push
    sends its codec's payload for each server's shard instead (``Compressor.payload_bytes``; its
    length rides in the header)."""
    comp = cfg.get("compressor")
    if compression.codec_name(comp, compression.PUSH) is None:
        return 4 * sum(math.prod(s) for s in shapes)
    layout = ShardLayout([tuple(s) for s in shapes], int(cfg.trainer.num_servers))
    return compression.payload_bytes(comp, compression.PUSH, [layout.numel(s) for s in range(layout.num_servers)])


def _ps_model(cfg):
    from workbench.compress.codec_timing import codec_for
    from workbench.perfmodel import paradigms
    t = cfg.trainer
    push, pull = codec_for(cfg.get("compressor")), codec_for(cfg.get("compressor"), "compressor.pull")
    if push is not None or pull is not None:  # ps/<mode>+<c>: the push (and pull) compressed
        cm = paradigms.compressed_messages
        return (cm.ps_sync if t.mode == "sync" else cm.ps_async), {"servers": int(t.num_servers), "push": push, "pull": pull}
    return (paradigms.ps_sync if t.mode == "sync" else paradigms.ps_async), {"servers": int(t.num_servers)}


def _ps_variants(ranks: int) -> list:
    """ps/sync, ps/async, and each with the planned compressors that push gradients point to point."""
    from workbench.compress.codec_timing import planned
    modes = [["trainer=ps", f"trainer.mode={m}"] for m in ("sync", "async")] if ranks >= 2 else []
    return modes + [[*m, f"compressor={c}"] for m in modes for c in planned(("gradient", "p2p"))]


def _ps_law(cfg, ranks) -> Update:
    """Hardsync is synchronous SGD; Downpour (async) applies each of the λ workers' gradients as it
    comes, λ − 1 updates stale, at the rate the servers' momentum gives
    (:func:`workbench.stability.rate_factor`)."""
    lam = ranks - int(cfg.trainer.num_servers)
    if cfg.trainer.mode == "sync":
        return SYNC
    return Update(rate=rate_factor(cfg), staleness=lam - 1, law=f"stale updates ({lam - 1} old)")


declare(ParadigmSpec(
    "ps", perf_model=_ps_model, update_law=_ps_law, analytic_bytes=push_pull_bytes, smoke_overrides=smoke_overrides,
    plan_variants=_ps_variants,
    bench_variants=lambda workers: [("ps sync (1 server)", ["trainer=ps", "trainer.mode=sync",
                                                            f"cluster.nproc={workers + 1}"])]))
