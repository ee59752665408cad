"""A compressor's decoded message against the gradient it stands for, measured on a model's own
gradients: ``C(g) = rho g + xi`` (:class:`workbench.perfmodel.efficiency.UpdateStats`), what the
efficiency model's compression law takes.

The gradients are those of the reference run's final weights (``model.pt``) on ``batches`` of its
per-worker batch from its training set, cut into DDP's buckets (25 MiB of float32, whole
parameters, :func:`workbench.perfmodel.paradigms.compressed_messages.delta_buckets`); each bucket
goes through the compressor's ``encode`` and ``decode`` as one rank of one would send and apply it:

    rho   = sum <C(g), g> / sum |g|^2
    omega = sum |C(g) - rho g|^2 / (rho^2 sum |g|^2)

With error feedback ``rho`` is measured against what the compressor counts as sent (``local``, what
the residual subtracts): the scale the step puts on it (EF-signSGD's ``step_scale``), which error
feedback does not restore; the rest the law assumes keeps SGD's rate. Beside it ``delta``, the share
of the gradient's energy a message keeps, ``1 - sum |g - sent|^2 / sum |g|^2`` (the theorems' δ).
One that reduces in several collectives (PowerSGD) has no one-rank message: rho = 1 with error
feedback, None without.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Dict, Optional

import torch

from workbench.perfmodel.efficiency import UpdateStats


def reference_gradients(run_dir, batches: int = 8, seed: int = 0):
    """The run's final weights' flat gradient on each of ``batches`` per-worker batches drawn from its
    training set with ``seed``, one at a time (a large model's gradients are not all held), after
    the parameter shapes: ``(shapes, iterator)``."""
    from workbench.data import batch_size_per_worker, load
    from workbench.models import build_model
    from workbench.runs.handle import Run
    cfg = Run(run_dir).config
    train, _, spec = load(cfg)
    model = build_model(cfg, spec)
    model.load_state_dict(torch.load(Path(run_dir) / "model.pt", map_location="cpu"))
    b = batch_size_per_worker(cfg, int(cfg.cluster.nproc))
    g = torch.Generator().manual_seed(seed)

    def grads():
        for _ in range(batches):
            idx = torch.randint(len(train), (b,), generator=g).tolist()
            x = torch.stack([train[i][0] for i in idx])
            y = torch.as_tensor([int(train[i][1]) for i in idx])
            model.zero_grad(set_to_none=True)
            torch.nn.functional.cross_entropy(model(x), y).backward()
            yield torch.cat([p.grad.reshape(-1) for p in model.parameters()]).detach()
    return [tuple(p.shape) for p in model.parameters()], grads()


class _Sums:
    """One compressor's running sums over the gradients it is shown (:func:`update_stats`)."""

    def __init__(self, ccfg, shapes) -> None:
        from workbench.compress import COMPRESSORS
        from workbench.compress.base import Compressor
        from workbench.perfmodel.paradigms.compressed_messages import delta_buckets
        self.ef = bool(ccfg.get("error_feedback", False))
        cls = COMPRESSORS[ccfg.name]
        self.comp = None if cls.reduce is not Compressor.reduce else cls(ccfg, 0, 1, 0)  # several collectives: none
        self.buckets = delta_buckets(shapes)
        self.sizes = [sum(math.prod(s) for s in b) for b in self.buckets]
        self.step, self.dot, self.sq, self.csq = 0, 0.0, 0.0, 0.0
        self.lost, self.energy = 0.0, 0.0  # |g - sent|^2 and |g|^2: the share of the gradient a message keeps

    def add(self, g: torch.Tensor) -> None:
        from workbench.compress.base import BucketInfo
        if self.comp is None:
            return
        comp = self.comp
        for i, (x, b) in enumerate(zip(torch.split(g, self.sizes), self.buckets)):
            info = BucketInfo(index=i, step=self.step, rank=0, world=1, shapes=tuple(torch.Size(s) for s in b))
            payload, ctx = comp.encode(x.clone(), info)
            sent = comp.local(payload, ctx, info).to(torch.float64)  # what error feedback counts as sent
            applied = comp.decode([payload] if comp.collective == "allgather" else payload, ctx, info).to(torch.float64)
            # with error feedback the step applies ``applied`` of what was sent and keeps the rest of
            # the gradient for later; without it, ``applied`` stands for the gradient itself
            g64 = x.to(torch.float64)
            self.lost, self.energy = self.lost + float(((g64 - sent) ** 2).sum()), self.energy + float(g64 @ g64)
            x = sent if self.ef else g64
            self.dot, self.sq, self.csq = self.dot + float(applied @ x), self.sq + float(x @ x), self.csq + float(applied @ applied)
        self.step += 1

    def stats(self) -> Optional[UpdateStats]:
        if self.comp is None:
            return UpdateStats(error_feedback=True) if self.ef else None
        rho = self.dot / self.sq
        if self.ef:  # the scale the step puts on what was sent (EF-signSGD's step_scale); no extra noise
            return UpdateStats(rho=rho, error_feedback=True, delta=1 - self.lost / self.energy)
        omega = (self.csq - 2 * rho * self.dot + rho * rho * self.sq) / (rho * rho * self.sq) if rho else math.inf
        return UpdateStats(rho=rho, omega=max(0.0, omega))


def update_stats(ccfg, grads, shapes) -> Optional[UpdateStats]:
    """``rho`` and ``omega`` of compressor config ``ccfg`` (``cfg.compressor``) on the flat gradients
    ``grads`` of a model whose parameters have ``shapes``."""
    sums = _Sums(ccfg, shapes)
    for g in grads:
        sums.add(g)
    return sums.stats()


def measure(run_dir, compressors: Dict[str, object], batches: int = 8) -> Dict[str, Optional[UpdateStats]]:
    """:func:`update_stats` of every compressor config in ``compressors`` (name -> ``cfg.compressor``)
    on the reference run's gradients, each gradient computed once."""
    shapes, grads = reference_gradients(run_dir, batches)
    sums = {name: _Sums(c, shapes) for name, c in compressors.items()}
    for g in grads:
        for s_ in sums.values():
            s_.add(g)
    return {name: s_.stats() for name, s_ in sums.items()}
