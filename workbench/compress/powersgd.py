"""``powersgd``: PowerSGD (Vogels et al. 2019), the algorithm of torch's ``powerSGD_hook``, metered.

For every parameter matrix M (n x m, conv kernels flattened to n x rest) in a bucket: P = M Q,
all-reduce P, orthogonalise P, Q = Mᵀ P, all-reduce Q (averaged), M ≈ P Qᵀ. Two all-reduces of
(n + m) r floats instead of n m. Details as torch's hook, so the two agree given the same state:

- ``rank`` r (at most min(n, m)); one power iteration per step;
- ``warm_start``: Q of the previous step is the start of this one (orthogonalised), else a fresh
  Gaussian Q from a NumPy RandomState(seed) that every rank draws from in step;
- ``error_feedback``: the bucket's residual (input minus the averaged approximation) is added to
  the next step's gradient (its own, not the generic wrapper);
- ``start_iter``: plain all-reduce for the first steps (bucket order settles after step 1);
- ``min_compression_rate``: a matrix is compressed only if (n + m) r * rate < n m; 1-D tensors
  (biases, norms) and matrices below the rate are all-reduced uncompressed.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Dict

import math

import numpy as np
import torch

from workbench.compress import COMPRESSORS, Compressor, CompressorConfig, check, register_compressor_schema


@dataclass
class PowerSGDConfig(CompressorConfig):
    name: str = "powersgd"
    rank: int = 4  # r: rank of the approximation M ≈ P Qᵀ
    start_iter: int = 10  # plain all-reduce before this step (>= 2 with error feedback or warm start)
    min_compression_rate: float = 2.0  # compress a matrix only if it shrinks at least this much
    warm_start: bool = True  # reuse last step's Q as the start of the power iteration
    error_feedback: bool = True  # add the residual to the next step's gradient
    orthogonalization_epsilon: float = 0.0  # added to column norms (guards all-zero columns)


register_compressor_schema("powersgd", PowerSGDConfig)


def orthogonalize(matrices: torch.Tensor, epsilon: float = 0.0) -> None:
    """Orthonormalise the columns of each matrix of a (batch, n, r) tensor in place: Gram-Schmidt
    for r <= 2, QR otherwise (as torch's hook, for identical results)."""
    rank = matrices.shape[2]
    if rank <= 2 or matrices.dtype in (torch.float16, torch.bfloat16):
        for i in range(rank):
            col = matrices[:, :, i: i + 1]
            norm = torch.linalg.vector_norm(col, dim=1, keepdim=True)
            col /= norm + epsilon if epsilon else norm
            if i + 1 < rank:
                rest = matrices[:, :, i + 1:]
                rest -= torch.sum(col * rest, dim=1, keepdim=True) * col
    else:
        torch.linalg.qr(matrices, out=(matrices, torch.empty(matrices.shape[0], rank, rank, dtype=matrices.dtype,
                                                            device=matrices.device)))


def should_compress(n: int, m: int, rank: int, min_rate: float) -> bool:
    return (n + m) * rank * min_rate < n * m


def _views(x, info) -> list:
    """The bucket ``x`` as its parameters' shapes (views, no copies)."""
    views, off = [], 0
    for shape in info.shapes:
        n = int(torch.Size(shape).numel())
        views.append(x[off: off + n].view(shape))
        off += n
    assert off == x.numel(), f"bucket {info.index}: parameters cover {off} of {x.numel()} elements"
    return views


def _split(views, c):
    """(matrices to compress, as n x rest; tensors to send whole; P's and Q's element counts)."""
    compress, plain = [], []
    p_size = q_size = 0
    for t in views:
        mat = t.view(t.shape[0], -1)
        n, m = mat.shape
        r = min(n, m, c.rank)
        if should_compress(n, m, r, c.min_compression_rate):
            compress.append(mat)
            p_size += n * r
            q_size += m * r
        else:
            plain.append(t)
    return compress, plain, p_size, q_size


@COMPRESSORS.register("powersgd")
class PowerSGD(Compressor):
    name = "powersgd"
    collective = "allreduce"
    point_to_point = False  # two all-reduces (P, then Q) per matrix
    own_error_feedback = True  # the generic wrapper is not applied
    bench_overrides = ("compressor.start_iter=2",)  # the bench suites measure compressed steps only

    @classmethod
    def payload_bytes_of_shapes(cls, cfg, shapes, buckets):
        """P and Q of every matrix worth compressing, the rest (1-D tensors, small matrices) dense."""
        total = 0
        for sh in shapes:
            numel = math.prod(sh)
            if len(sh) > 1:
                n, m = sh[0], numel // sh[0]
                if should_compress(n, m, cfg.rank, cfg.min_compression_rate):
                    total += 4 * cfg.rank * (n + m)
                    continue
            total += 4 * numel
        return total

    def __init__(self, cfg, rank, world, seed=0):
        super().__init__(cfg, rank, world, seed)
        self.rng = np.random.RandomState(seed)
        self.p_memory: Dict[int, torch.Tensor] = {}
        self.q_memory: Dict[int, torch.Tensor] = {}
        self.errors: Dict[int, torch.Tensor] = {}

    @classmethod
    def validate(cls, cfg):
        check(cfg.rank >= 1, "rank", cfg.rank, "must be >= 1")
        check(cfg.start_iter >= 0, "start_iter", cfg.start_iter, "must be >= 0")
        check(cfg.min_compression_rate >= 0, "min_compression_rate", cfg.min_compression_rate, "must be >= 0")
        check(cfg.orthogonalization_epsilon >= 0, "orthogonalization_epsilon", cfg.orthogonalization_epsilon, "must be >= 0")
        if cfg.error_feedback or cfg.warm_start:
            check(cfg.start_iter >= 2, "start_iter", cfg.start_iter,
                  "must be >= 2 with error_feedback or warm_start (DDP rebuilds its buckets after step 1)")

    def reduce(self, x, info, ch):
        """One bucket's step: a plain all-reduce before ``start_iter``; then, with error feedback
        around the whole, P = M Q, all-reduce P, orthogonalise it, Q = Mᵀ P, all-reduce Q, M ≈ P Qᵀ
        for the matrices worth compressing, and one plain all-reduce of the rest."""
        c, p, idx = self.cfg, self.world, info.index
        if info.step < c.start_iter:
            return ch.exchange("allreduce", x.div_(p), "allreduce")
        with ch.timed("encode"):
            x_copy = self._add_residual(x, idx) if c.error_feedback else None
            compress, plain, p_size, q_size = _split(_views(x, info), c)
            plain_mem = torch.cat([t.reshape(-1) for t in plain]) if plain else x.new_empty(0)
            mats, ps, qs = self._factors(x, idx, compress, p_size, q_size)
            for mat, q, pm in zip(mats, qs, ps):
                torch.bmm(mat, q, out=pm)
        if plain_mem.numel():
            plain_mem = ch.exchange("allreduce", plain_mem, self.category).div_(p)
            o = 0
            for t in plain:
                t.copy_(plain_mem[o: o + t.numel()].view_as(t))
                o += t.numel()
        if p_size:
            self._power_iteration(ch, idx, mats, ps, qs)
        with ch.timed("decode"):
            for pm, q, mat in zip(ps, qs, mats):
                torch.bmm(pm, q.transpose(1, 2), out=mat)
            if c.error_feedback:
                self.errors[idx] = x_copy - x
            if not c.warm_start:
                self.p_memory.clear()
                self.q_memory.clear()
        return x

    def _add_residual(self, x, idx):
        """Error feedback: the bucket's last residual added to ``x`` (a zero one where the bucket is
        new or changed shape); returns a copy of the sum, what the approximation is subtracted from."""
        e = self.errors.get(idx)
        if e is not None and e.shape == x.shape:
            x.add_(e)
        else:
            self.errors[idx] = torch.zeros_like(x)
        return x.detach().clone()

    def _factors(self, x, idx, compress, p_size, q_size):
        """Each compressed matrix as (1, n, m) with its P (1, n, r) and Q (1, m, r), views into the
        bucket's memories in the order of torch's hook (equal shapes grouped; Q's draws follow it).
        Q is last step's, orthogonalised (``warm_start``), or a fresh Gaussian every rank draws alike."""
        c = self.cfg
        fresh = not c.warm_start or idx not in self.p_memory or self.p_memory[idx].numel() != p_size \
            or self.q_memory[idx].numel() != q_size
        if fresh:
            self.p_memory[idx] = x.new_empty(p_size)
            self.q_memory[idx] = x.new_empty(q_size)
        by_shape = defaultdict(list)
        for mat in compress:
            by_shape[mat.shape].append(mat)
        mats, ps, qs, pi, qi = [], [], [], 0, 0
        for group in by_shape.values():
            for mat in group:
                n, m = mat.shape
                r = min(n, m, c.rank)
                mats.append(mat.unsqueeze(0))
                ps.append(self.p_memory[idx][pi: pi + n * r].view(1, n, r))
                qs.append(self.q_memory[idx][qi: qi + m * r].view(1, m, r))
                pi += n * r
                qi += m * r
        if not fresh:
            for q in qs:
                orthogonalize(q, c.orthogonalization_epsilon)
        else:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(self.rng.randint(1_000_000_000))
                for q in qs:
                    q.copy_(torch.randn(*q.shape, device="cpu", dtype=x.dtype))
                    orthogonalize(q, c.orthogonalization_epsilon)
        return mats, ps, qs

    def _power_iteration(self, ch, idx, mats, ps, qs):
        """All-reduce the Ps (M Q), orthogonalise them, Q = Mᵀ P, all-reduce the Qs, averaged."""
        c, p = self.cfg, self.world
        # Ps are orthogonalised next, so they need no division by the world size.
        self.p_memory[idx] = ch.exchange("allreduce", self.p_memory[idx], self.category)
        with ch.timed("encode"):
            for pm in ps:
                orthogonalize(pm, c.orthogonalization_epsilon)
            for mat, pm, q in zip(mats, ps, qs):
                torch.bmm(mat.transpose(1, 2), pm, out=q)
        self.q_memory[idx] = ch.exchange("allreduce", self.q_memory[idx], self.category).div_(p)

    def state_dict(self) -> dict:
        cp = lambda d: {k: v.detach().cpu().clone() for k, v in d.items()}  # noqa: E731
        _, keys, pos, has_gauss, gauss = self.rng.get_state()
        rng = {"keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos), "has_gauss": int(has_gauss),
               "gauss": float(gauss)}  # tensors and numbers only: checkpoints load with weights_only
        return {"rng": rng, "p": cp(self.p_memory), "q": cp(self.q_memory), "errors": cp(self.errors)}

    def load_state_dict(self, state: dict) -> None:
        if "rng" in state:
            r = state["rng"]
            self.rng.set_state(("MT19937", r["keys"].numpy().astype(np.uint32), r["pos"], r["has_gauss"], r["gauss"]))
        self.p_memory = {int(k): v.clone() for k, v in state.get("p", {}).items()}
        self.q_memory = {int(k): v.clone() for k, v in state.get("q", {}).items()}
        self.errors = {int(k): v.clone() for k, v in state.get("errors", {}).items()}
