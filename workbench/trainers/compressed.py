"""Compressed synchronous SGD: DDP whose gradient exchange goes through a compressor, bucket by
bucket, overlapped with the backward pass (workbench/compress/, Agarwal et al. in docs/papers.md §4).

    python -m workbench trainer=compressed compressor=powersgd compressor.rank=4 cluster.nproc=4
    python -m workbench trainer=compressed compressor=topk compressor.k=0.01 compressor.error_feedback=true
    python -m workbench trainer=compressed compressor=none      # exactly trainer=sync's parameters

Every train record in metrics.jsonl carries, for rank 0: ``encode_ms``, ``decode_ms``,
``compress_comm_ms`` (time inside the collectives), ``payload_bytes`` (what this rank put into them),
``dense_bytes`` (the buckets as float32) and ``compression_ratio``; plus ``forward_ms``,
``backward_ms`` (wall time of backward, which includes waiting for the last buckets) and
``optimizer_ms``. ``summary.json`` gets a ``compression`` section: the per-bucket profile averaged
over the steps after ``trainer.profile_skip``. Its performance model is the planner's
(:func:`workbench.perfmodel.paradigms.compressed`, from the one profile of
:mod:`workbench.perfmodel.profile`; ``python -m workbench.plan --only sync,compressed``).
"""
from __future__ import annotations

import copy
import time
from dataclasses import dataclass

import torch

from workbench.compress import COMPRESSORS, build_compressor
from workbench.compress.messages import Message
from workbench.compress.hook import CompressionHookState, compression_hook
from workbench.core import ConfigError, TrainerConfig, store_schema
from workbench.perfmodel.efficiency import SYNC
from workbench.spec import ParadigmSpec, declare
from workbench.trainers import TRAINERS
from workbench.trainers.sync import SyncTrainer


@dataclass
class CompressedConfig(TrainerConfig):
    name: str = "compressed"
    bucket_cap_mb: float = 25.0  # DDP bucket size: the unit a compressor works on
    profile_skip: int = 2  # steps left out of the per-bucket profile (DDP's bucket rebuild, warm-up)


store_schema("trainer", "compressed", CompressedConfig)


@TRAINERS.register("compressed")
class CompressedTrainer(SyncTrainer):
    name = "compressed"

    @classmethod
    def compressed_messages(cls, cfg) -> list:
        return [Message("gradient", "collective", what="the gradient all-reduce")]

    @classmethod
    def validate(cls, cfg) -> None:
        super().validate(cfg)
        t = cfg.trainer
        if t.profile_skip < 0:
            raise ConfigError(f"invalid value {t.profile_skip!r} for trainer.profile_skip: must be >= 0")

    def setup(self) -> None:
        super().setup()  # DDP with comm_hook()'s compressor, and the optimizer (it holds no state yet)
        self.settle_buckets()
        self._steps_done = 0
        self._times = {}

    def train_step(self, x, y):
        t0 = time.perf_counter()
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.loss_fn(self.ddp(x), y)
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        self.optimizer.step()
        t3 = time.perf_counter()
        self._times = {"forward_ms": 1e3 * (t1 - t0), "backward_ms": 1e3 * (t2 - t1), "optimizer_ms": 1e3 * (t3 - t2)}
        return loss.detach()

    def comm_hook(self) -> tuple:
        self.compressor = build_compressor(self.cfg.compressor, self.rank, self.info.world_size, self.cfg.seed)
        self.hook_state = CompressionHookState(self.compressor, self.meter, seed=self.cfg.seed)
        return self.hook_state, compression_hook

    def step_metrics(self):
        self._steps_done += 1
        if self._steps_done == self.cfg.trainer.profile_skip:
            self.hook_state.reset_profile()
        return {**self.hook_state.pop_stats(), **self._times}

    def settle_buckets(self) -> None:
        """One backward pass on a zero batch, all-reduced plainly, then everything restored.

        DDP lays its buckets out in parameter order, then rebuilds them in the order gradients
        became ready during the first backward. Compressor state (residuals, PowerSGD's Q) is laid
        out like its bucket, so a run resumed from a checkpoint must see the same layout as the
        run that wrote it: doing the first backward here makes every training step, fresh or
        resumed, use the rebuilt layout."""
        saved = copy.deepcopy(self.model.state_dict())
        rng = torch.get_rng_state()
        x = torch.zeros(2, self.spec.channels, self.spec.image_size, self.spec.image_size, device=self.device)
        self.hook_state.passthrough = True
        try:
            self.ddp(x).sum().backward()  # DDP rebuilds at the start of the next forward, before step 0
        finally:
            self.hook_state.passthrough = False
        self.model.zero_grad(set_to_none=True)
        self.model.load_state_dict(saved)
        torch.set_rng_state(rng)

    def run(self) -> dict:
        try:
            summary = super().run()
        finally:
            if hasattr(self, "hook_state"):
                self.hook_state.close()
        summary["compression"] = {
            "compressor": dict(self.cfg.compressor), "world": self.info.world_size,
            "collective": self.compressor.collective, "buckets": self.hook_state.bucket_profile(),
            "profile_skip": self.cfg.trainer.profile_skip,
        }
        return summary

    def state_dict(self) -> dict:
        """Model and optimizer, plus the compressor's state: residuals, PowerSGD's P/Q and RNG, the
        hook's step counter (so a resumed run compresses exactly as the uninterrupted one)."""
        return {**super().state_dict(), "compressor": self.hook_state.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        if "compressor" in state:
            self.hook_state.load_state_dict(state["compressor"])


def _payload_bytes(cfg, summary, shapes) -> float:
    """The payload the compressor's wire format implies for each of DDP's buckets, times its
    collective's factor (:meth:`workbench.compress.Compressor.sent_bytes`)."""
    comp = COMPRESSORS[cfg.compressor.name]
    buckets = [b["numel"] for b in summary["compression"]["buckets"]]
    return comp.sent_bytes(comp.payload_bytes_of_shapes(cfg.compressor, shapes, buckets), len(buckets),
                           CompressedTrainer.num_workers(cfg))


def _compressed_model(cfg):
    from workbench.perfmodel import paradigms
    return paradigms.compressed, {"compressor": str(cfg.compressor.name)}


def _bench_variants(workers):
    return [(f"compressed: {c}", ["trainer=compressed", f"compressor={c}", f"cluster.nproc={workers}",
                                  *COMPRESSORS[c].bench_overrides]) for c in COMPRESSORS]


declare(ParadigmSpec(
    "compressed", update_law=lambda cfg, ranks: SYNC, perf_model=_compressed_model, analytic_bytes=_payload_bytes, bench_variants=_bench_variants,
    plan_variants=lambda ranks: [["trainer=compressed", f"compressor={c}"] for c in COMPRESSORS if c != "none"]))
