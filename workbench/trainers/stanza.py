"""Stanza layer separation (Wu, Xu et al., arXiv 1812.10624; docs/papers.md §2): of N ranks, n_c CONV
workers train only the model's ``features`` on their data shards and n_f FC workers train only its
``classifier``; FC parameters and gradients never cross the cluster, only boundary activations and
their gradients do.

    python -m workbench trainer=stanza cluster.nproc=4                          # 3 CONV + 1 FC, small CNN, digits
    python -m workbench trainer=stanza trainer.fc_workers=2 cluster.nproc=4     # 2 CONV + 2 FC
    python -m workbench trainer=stanza trainer.fc_workers=auto model=vgg16 data=synthetic \\
        trainer.max_steps=20 cluster.nproc=4                                    # profile, then pick n_f

Every trainer's options live under ``trainer.``: the number of FC workers is ``trainer.fc_workers``.

Roles: ranks 0..n_c-1 are CONV workers (rank 0 logs and saves ``model.pt``), ranks n_c..N-1 FC
workers; CONV worker c sends to FC worker n_c + (c mod n_f). One BSP step:

1. CONV worker: forward of ``features`` on its batch; activations (category ``activations``) and
   labels (``labels``) to its FC worker.
2. FC worker, for each of its CONV workers in turn: forward and backward of ``classifier`` on that
   piece, and the piece's activation gradients straight back (``activation_grads``, plus the piece's
   loss for the log, ``loss``). Overlap: all receives are posted at once, so piece i+1 arrives while
   piece i is computed, and piece i's gradients travel while piece i+1 is computed.
3. FC worker, after the last piece has gone back: FC gradients summed over the FC workers
   (``allreduce_fc``, a ring all-reduce of the FC group), update. Overlap: this runs while the CONV
   workers do their backward pass.
4. CONV worker: backward of ``features`` from the received gradients; DDP on the CONV group sums the
   conv gradients bucket by bucket while the backward is still running (``allreduce_conv``); update.

The loss is scaled by the global batch on the FC side and gradients are *summed* on both sides, so
after k steps the parameters equal single-process SGD on the global batch (tests/test_stanza.py).

``trainer.fc_workers=auto`` profiles every rank for ``trainer.profile_steps`` iterations, and at
least 0.2 s of back-to-back compute per concurrency level (conv and FC compute per sample, optimizer
time, point-to-point latency and bandwidth, all-reduce bandwidth),
feeds :mod:`workbench.perfmodel.stanza`, picks the n_f with the highest predicted throughput, logs
the prediction (metrics.jsonl record ``kind: stanza_allocation``, and the rank logs) and reports
predicted next to measured throughput in ``summary.json`` under ``stanza``.
``trainer.profile=true`` does the same for a fixed n_f (the allocation sweep in BENCHMARKS.md).

For evaluation and ``model.pt`` the FC part is broadcast once from the first FC worker
(category ``eval_sync``): evaluation traffic, not training traffic.

Compression (``compressor=fp16``; ``compressor=powersgd compressor.activations=fp16``): the
activations and their gradients go through the codec ``compressor.activations`` names, the CONV
group's all-reduce through ``compressor.name``'s, under the same meter categories
(:mod:`workbench.trainers.stanza_messages`; docs/stanza.md, "Compression in Stanza").
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any, Dict, List, Optional

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.utils.data import Dataset

from workbench import data as data_mod
from workbench.core import ConfigError, TrainerConfig, store_schema, world_size
from workbench.dist import new_group
from workbench.meter import AllreduceHookState, flat_collective, metered_sum_hook, size_buckets
from workbench.models import MODELS, SplitModel
from workbench.perfmodel import stanza as pm
from workbench.perfmodel.profile import boundary_floats, stanza_inputs
from workbench.perfmodel.efficiency import Update
from workbench.spec import ParadigmSpec, declare, qualified
from workbench.trainers import TRAINERS
from workbench.trainers import stanza_messages as sm
from workbench.trainers.base import Trainer, build_optimizer, wrap_ddp


@dataclass
class StanzaConfig(TrainerConfig):
    name: str = "stanza"
    fc_workers: Any = 1  # FC workers n_f: an integer in [1, N-1] (N = cluster.nproc * cluster.nnodes), or auto
    profile: bool = False  # profile and log the model's prediction for a fixed fc_workers too (auto always does)
    profile_steps: int = 3  # timed iterations of each profiled quantity (after one warm-up)
    bucket_cap_mb: float = 25.0  # bucket size of the CONV group's DDP all-reduce and of the FC all-reduce


store_schema("trainer", "stanza", StanzaConfig)

TAG_ACT, TAG_LABELS, TAG_GRAD, TAG_LOSS = 11, 12, 13, 14


def nodes(cfg) -> int:
    return world_size(cfg)


def _auto(value) -> bool:
    return isinstance(value, str) and value.strip().lower() == "auto"


def fixed_fc_workers(cfg) -> Optional[int]:
    """``trainer.fc_workers`` as an int, None for auto; ConfigError (one line) for anything else."""
    n, v = nodes(cfg), cfg.trainer.fc_workers
    if _auto(v):
        return None
    if isinstance(v, str) and v.strip().lstrip("-").isdigit():
        v = int(v)
    if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= n - 1:
        valid = f"an integer in [1, {n - 1}] (fewer than the {n} ranks of cluster.nproc * cluster.nnodes) or auto" \
            if n >= 2 else f"Stanza needs at least 2 ranks (one CONV, one FC), cluster.nproc * cluster.nnodes is {n}"
        raise ConfigError(f"invalid value {v!r} for trainer.fc_workers: {valid}")
    return v


def conv_candidates(cfg) -> List[int]:
    """The n_c an auto run may choose: those that divide data.global_batch_size, when it is set."""
    n, g = nodes(cfg), cfg.data.global_batch_size
    return [c for c in range(1, n) if g is None or g % c == 0]


class _IndexOnly(Dataset):
    """What an FC worker iterates: the training set's length, so that it runs exactly as many steps
    per epoch as the CONV workers, and no data (its inputs come from the CONV workers)."""

    _empty = torch.empty(0)

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i):
        return self._empty, 0


@TRAINERS.register("stanza")
class StanzaTrainer(Trainer):
    name = "stanza"

    # -- validation before launch -----------------------------------------------------------------
    @classmethod
    def num_workers(cls, cfg) -> int:
        n_f = fixed_fc_workers(cfg)
        if n_f is not None:
            return nodes(cfg) - n_f
        cands = conv_candidates(cfg)
        return max(cands) if cands else 1  # provisional for auto: setup() decides after profiling

    @classmethod
    def compressed_messages(cls, cfg) -> list:
        """The CONV group's gradient all-reduce (``compressor.name``) and the boundary activations and
        their gradients (``compressor.activations``): :mod:`workbench.trainers.stanza_messages`."""
        return list(sm.MESSAGES)

    @classmethod
    def validate(cls, cfg) -> None:
        t = cfg.trainer
        if t.bucket_cap_mb <= 0:
            raise ConfigError(f"invalid value {t.bucket_cap_mb!r} for trainer.bucket_cap_mb: must be > 0")
        if t.profile_steps < 1:
            raise ConfigError(f"invalid value {t.profile_steps!r} for trainer.profile_steps: must be >= 1")
        n_f = fixed_fc_workers(cfg)
        _check_split(cfg)
        n_train = len(data_mod.DATASETS[cfg.data.name].load(cfg.data)[0])
        g = cfg.data.global_batch_size
        if n_f is not None:
            n_c = nodes(cfg) - n_f
            if g is None and cfg.data.batch_size * n_c > n_train:
                raise ConfigError(f"invalid value {cfg.data.batch_size} for data.batch_size: {n_c} CONV workers x "
                                  f"{cfg.data.batch_size} exceeds the {n_train} training samples")
            if g is not None and g > n_train:
                raise ConfigError(f"invalid value {g} for data.global_batch_size: exceeds the {n_train} training samples")
        else:
            fits = [c for c in conv_candidates(cfg) if (g if g is not None else cfg.data.batch_size * c) <= n_train]
            if not fits:
                what = f"data.global_batch_size {g}" if g is not None else f"data.batch_size {cfg.data.batch_size}"
                raise ConfigError(f"invalid value for trainer.fc_workers=auto: no allocation of {nodes(cfg)} ranks "
                                  f"fits {what} into the {n_train} training samples (with a global batch, n_c must divide it)")

    # -- set-up -------------------------------------------------------------------------------------
    def setup(self) -> None:
        cfg = self.cfg
        self.model = self.build_model()
        self.comm_device = self.info.comm_device
        self.n = self.info.world_size
        self.a = boundary_floats(self.model, self.spec, self.device)
        n_f = fixed_fc_workers(cfg)
        self.allocation: Optional[pm.Allocation] = None
        if n_f is None or cfg.trainer.profile:
            n_f = self._profile_and_choose(n_f)
        self._assign_roles(n_f)
        self._steps_done, self._synced_at = 0, -1
        self._last_entry: Optional[float] = None
        self._periods: List[float] = []

    def _profile_and_choose(self, fixed: Optional[int]) -> int:
        """Profile every rank (workbench.perfmodel.profile), let the model choose or price the
        allocation (workbench.perfmodel.stanza), and log what it said."""
        cfg = self.cfg
        g = cfg.data.global_batch_size
        b = g // max(conv_candidates(cfg)) if g is not None else cfg.data.batch_size
        t0 = time.perf_counter()
        x = stanza_inputs(self.model, self.spec, b, self.a, self.meter, self.device, self.comm_device,
                          cfg.trainer.profile_steps, lambda ps: build_optimizer(ps, cfg.optim))
        self.allocation = pm.allocate(x, self.n, fixed, g, len(self.train_set), time.perf_counter() - t0)
        self.log.log(self.allocation.record(self.n))
        if self.rank == 0:
            print(self.allocation.line(), flush=True)
        return self.allocation.fc_workers

    def _assign_roles(self, n_f: int) -> None:
        cfg, n = self.cfg, self.n
        self.n_f, self.n_c = n_f, n - n_f
        self.conv_ranks, self.fc_ranks = list(range(self.n_c)), list(range(self.n_c, n))
        # Every rank creates every group, in the same order (torch.distributed's rule).
        self.conv_group = new_group(self.conv_ranks)
        self.fc_group = new_group(self.fc_ranks)
        self.is_conv = self.rank < self.n_c
        self.workers = self.n_c
        self.batch_size = data_mod.batch_size_per_worker(cfg, self.n_c)
        self.global_batch = self.batch_size * self.n_c
        b, a, cd = self.batch_size, self.a, self.comm_device
        comp = cfg.get("compressor")
        self.acts, self.grads = (sm.Link(comp, b * a, cd, cfg.seed, d) for d in (sm.FORWARD, sm.BACKWARD))
        self.reduce_state: Optional[sm.ConvReduceState] = None
        if self.is_conv:
            self.worker_index, self.is_worker = self.rank, True
            self.fc_peer = self.n_c + self.rank % n_f
            # Summed, not averaged: the FC side already divides the loss by the global batch. No
            # buffer broadcast: it would bypass the meter; BN statistics are synchronised for
            # evaluation instead (_sync_for_eval).
            hook = (AllreduceHookState(self.meter, self.conv_group, "allreduce_conv"), metered_sum_hook)
            if sm.codec_name(comp, sm.ALLREDUCE) is not None:
                self.reduce_state = sm.ConvReduceState(comp, self.meter, self.conv_group, cfg.seed)
                hook = (self.reduce_state, sm.conv_sum_hook)
            self.ddp = wrap_ddp(self.model.features, self.device, cfg.trainer.bucket_cap_mb, *hook,
                                process_group=self.conv_group, broadcast_buffers=False)
            if self.reduce_state is not None:
                x = torch.zeros(2, self.spec.channels, self.spec.image_size, self.spec.image_size, device=self.device)
                sm.settle_buckets(self.ddp, self.reduce_state, self.model.features, x)
            self.optimizer = build_optimizer(self.model.features.parameters(), cfg.optim)
            self.grad_buf = self.grads.buffer((b, a))
            self.loss_buf = torch.zeros(1, device=cd)
        else:
            self.worker_index, self.is_worker = 0, False
            self.pieces = [c for c in self.conv_ranks if self.n_c + c % n_f == self.rank]
            self.optimizer = build_optimizer(self.model.classifier.parameters(), cfg.optim)
            self.act_bufs = [self.acts.buffer((b, a)) for _ in self.pieces]
            self.label_bufs = [torch.empty(b, dtype=torch.int64, device=cd) for _ in self.pieces]
            self.train_set = _IndexOnly(len(self.train_set))
            self.fc_buckets = size_buckets(self.model.classifier.parameters(), int(cfg.trainer.bucket_cap_mb * 2**20))

    # -- one step -----------------------------------------------------------------------------------
    def train_step(self, x, y):
        now = time.perf_counter()
        if self._last_entry is not None:
            self._periods.append(now - self._last_entry)
        self._last_entry = now
        self._steps_done += 1
        return self._conv_step(x, y) if self.is_conv else self._fc_step()

    def _conv_step(self, x, y):
        self.optimizer.zero_grad(set_to_none=True)
        step = self._steps_done - 1
        h = self.ddp(x)
        act = self.acts.encode(h.detach(), self.rank, step)
        sends = [self.meter.isend(act, self.fc_peer, "activations", TAG_ACT),
                 self.meter.isend(y.to(self.comm_device, torch.int64).contiguous(), self.fc_peer, "labels", TAG_LABELS)]
        grad = self.meter.irecv(self.grad_buf, self.fc_peer, "activation_grads", TAG_GRAD)
        loss = self.meter.irecv(self.loss_buf, self.fc_peer, "loss", TAG_LOSS)
        grad.wait()
        loss.wait()  # sent right after the gradients: waiting here keeps the meter's times honest
        for s in sends:
            s.wait()
        h.backward(self.grads.decode(self.grad_buf, self.rank, step).to(self.device).view_as(h))
        self.optimizer.step()
        return self.loss_buf[0].clone()

    def _fc_step(self):
        self.optimizer.zero_grad(set_to_none=True)
        b, step = self.batch_size, self._steps_done - 1
        recvs = [(self.meter.irecv(act, c, "activations", TAG_ACT), self.meter.irecv(lab, c, "labels", TAG_LABELS))
                 for c, act, lab in zip(self.pieces, self.act_bufs, self.label_bufs)]
        sends, losses, wire = [], [], []  # wire: the payloads, alive until their sends are done
        for (r_act, r_lab), c, act, lab in zip(recvs, self.pieces, self.act_bufs, self.label_bufs):
            r_act.wait()
            r_lab.wait()
            h = self.acts.decode(act, c, step).view(b, self.a).to(self.device).detach().requires_grad_()
            ce = F.cross_entropy(self.model.classifier(h), lab.to(self.device), reduction="sum")
            (ce / self.global_batch).backward()  # this piece's share of the global-batch mean loss
            wire.append(self.grads.encode(h.grad, c, step))
            sends.append(self.meter.isend(wire[-1], c, "activation_grads", TAG_GRAD))
            piece_loss = (ce.detach() / b).reshape(1).to(self.comm_device)
            losses.append(piece_loss)
            sends.append(self.meter.isend(piece_loss, c, "loss", TAG_LOSS))
        for s in sends:
            s.wait()
        self._allreduce_fc()
        self.optimizer.step()
        return torch.cat(losses).mean() if losses else None

    def _allreduce_fc(self) -> None:
        """Sum the FC gradients over the FC workers (one FC worker: nothing to do)."""
        if self.n_f == 1:
            return
        for bucket in self.fc_buckets:
            grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in bucket]
            summed = flat_collective(grads, self.comm_device,
                                     lambda flat: self.meter.all_reduce(flat, "allreduce_fc", group=self.fc_group))
            for p, g in zip(bucket, summed):
                p.grad = g

    # -- evaluation and the final model ---------------------------------------------------------------
    def _sync_for_eval(self) -> None:
        """Give every rank the current FC part (from the first FC worker) and the CONV workers rank
        0's buffers, once per step count (evaluation and model.pt both need the whole model)."""
        if self._synced_at == self._steps_done:
            return
        clf = [t for t in list(self.model.classifier.parameters()) + list(self.model.classifier.buffers())
               if t.is_floating_point()]
        if clf:
            got = flat_collective([t.detach() for t in clf], self.comm_device,
                                  lambda flat: self.meter.broadcast(flat, self.fc_ranks[0], "eval_sync"))
            with torch.no_grad():
                for t, v in zip(clf, got):
                    t.copy_(v)
        bufs = [t for t in self.model.features.buffers() if t.is_floating_point()]
        if bufs and self.is_conv and self.n_c > 1:
            got = flat_collective(bufs, self.comm_device,
                                  lambda flat: self.meter.broadcast(flat, 0, "eval_sync", group=self.conv_group))
            for t, v in zip(bufs, got):
                t.copy_(v)
        self._synced_at = self._steps_done

    def evaluate(self) -> Dict[str, float]:
        self._sync_for_eval()
        out = super().evaluate()
        self._last_entry = None  # the next step period would include the evaluation
        return out

    def save_final_model(self) -> None:
        self._sync_for_eval()
        super().save_final_model()

    def step_metrics(self) -> Dict[str, float]:
        """A CONV worker's compressed all-reduce: encode/decode/communication ms, payload and dense bytes."""
        return self.reduce_state.inner.pop_stats() if self.reduce_state is not None else {}

    def state_dict(self) -> dict:
        """Model and optimizer, the step count (a stochastic codec's draws depend on it) and, on a
        CONV worker that compresses its all-reduce, the compressor's state (residuals, PowerSGD's P/Q)."""
        out = {**super().state_dict(), "stanza_steps": self._steps_done}
        if self.reduce_state is not None:
            out["compressor"] = self.reduce_state.inner.state_dict()
        return out

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self._steps_done = int(state.get("stanza_steps", self._steps_done))
        if self.reduce_state is not None and "compressor" in state:
            self.reduce_state.inner.load_state_dict(state["compressor"])

    def run(self) -> dict:
        try:
            summary = super().run()
        finally:
            if getattr(self, "reduce_state", None) is not None:
                self.reduce_state.inner.close()
        periods = self._periods[1:] if len(self._periods) > 1 else self._periods  # drop the warm-up step
        steady = self.global_batch / statistics.median(periods) if periods else None
        info: Dict[str, Any] = {
            "fc_workers": self.n_f, "conv_workers": self.n_c, "fc_ranks": self.fc_ranks,
            "assignment": {str(c): self.n_c + c % self.n_f for c in self.conv_ranks},
            "boundary_floats": self.a, "params": self.model.param_counts(),
            "measured_samples_per_s": summary.get("samples_per_s"),
            "measured_steady_samples_per_s": steady,
        }
        if self.allocation is not None:
            info.update(self.allocation.summary(steady))
        if self.reduce_state is not None:  # DDP's buckets, as the analytic count needs them
            info["conv_buckets"] = [b["numel"] for b in self.reduce_state.inner.bucket_profile()]
        summary["stanza"] = info
        if self.rank == 0 and self.allocation is not None:
            print(f"stanza: {self.n_c} CONV + {self.n_f} FC workers: predicted {info['predicted_samples_per_s'] or float('nan'):.1f} "
                  f"samples/s, measured {steady or float('nan'):.1f} (steady), "
                  f"{summary.get('samples_per_s') or float('nan'):.1f} (all steps)", flush=True)
        return summary


def _check_split(cfg) -> None:
    """The model must have parameters on both sides of its conv/FC boundary (built on the meta device:
    no memory, no time)."""
    from workbench.data import DATASETS
    spec = DATASETS[cfg.data.name].spec(cfg.data)
    with torch.device("meta"):
        model = MODELS[cfg.model.name].build(spec, cfg.model)
    if not isinstance(model, SplitModel):
        raise ConfigError(f"invalid value {cfg.model.name!r} for model.name: trainer=stanza needs a SplitModel "
                          "(features + classifier); this model has no conv/FC split")
    counts = model.param_counts()
    if counts["features"] == 0 or counts["classifier"] == 0:
        side = "conv (features)" if counts["features"] == 0 else "FC (classifier)"
        raise ConfigError(f"invalid value {cfg.model.name!r} for model.name: trainer=stanza needs parameters on both "
                          f"sides of the split; its {side} part has none")


def _label(get) -> str:
    """``stanza/n_f=<k>`` with a fixed number of FC workers, ``stanza`` with auto."""
    n_f = get("trainer.fc_workers")
    return f"stanza/n_f={int(n_f)}" if n_f is not None and not _auto(n_f) else qualified("stanza", get)


def _conv_worker_bytes(cfg, summary, shapes) -> float:
    """A CONV worker's bytes sent per step (:func:`stanza_messages.conv_worker_bytes`)."""
    return pm.total(sm.conv_worker_bytes(cfg, summary), "sent")


def _stanza_model(cfg):
    from workbench.compress.codec_timing import codec_for
    from workbench.perfmodel import paradigms
    grad, act = codec_for(cfg.get("compressor")), codec_for(cfg.get("compressor"), "compressor.activations")
    if grad is not None:  # stanza/n_f=<k>+<c>: the CONV ring, and the activations unless activations=none
        return paradigms.compressed_messages.stanza, {"fc_workers": int(fixed_fc_workers(cfg)), "grad": grad, "act": act}
    return paradigms.stanza, {"fc_workers": int(fixed_fc_workers(cfg))}


def _stanza_variants(ranks: int) -> list:
    """n_f = 1 … ranks − 1, and n_f = 1 with each planned compressor that carries the CONV group's
    gradients by its collective and the activations point to point (``compressor.activations=same``)."""
    from workbench.compress.codec_timing import planned
    split = [["trainer=stanza", f"trainer.fc_workers={k}"] for k in range(1, ranks)]
    both = planned(("gradient", "collective"), ("activation", "p2p"))
    return split + [[*split[0], f"compressor={c}"] for c in both] if split else []


SYNC_BSP = Update(law="synchronous SGD (Stanza is BSP: tests/test_stanza.py's equivalence)")


declare(ParadigmSpec(
    "stanza", label=_label, perf_model=_stanza_model,
    analytic_bytes=_conv_worker_bytes,
    update_law=lambda cfg, ranks: SYNC_BSP,  # BSP: the update is synchronous SGD's at the CONV workers' batch
    plan_variants=_stanza_variants,
    bench_variants=lambda workers: [(f"stanza {workers - 1} CONV + 1 FC (a CONV worker)",
                                     ["trainer=stanza", "trainer.fc_workers=1", f"cluster.nproc={workers}"])],
    smoke_overrides=lambda nproc: ["cluster.nproc=2"] if nproc < 2 else []))  # one CONV rank and one FC rank at least
