"""``qsgd``: QSGD (Alistarh et al. 2017) with ``levels`` = s quantisation levels. Each element is
sent as ``sign(x_i) * xi_i`` with ``xi_i = floor(s |x_i| / ||x||_2 + u_i)``, u_i uniform in [0, 1)
(stochastic rounding: unbiased), plus the bucket's float32 norm; levels fit in int8 for s <= 127.
All-gathered; the decode averages ``||x|| / s * sign * xi`` over the ranks. The random numbers come
from a generator seeded by (seed, rank, step, bucket): a rerun gives the same bits."""
from dataclasses import dataclass

import torch

from workbench.compress import (COMPRESSORS, Compressor, CompressorConfig, as_bytes, check, from_bytes, mix_seed,
                                register_compressor_schema)


@dataclass
class QSGDConfig(CompressorConfig):
    name: str = "qsgd"
    levels: int = 16  # s: quantisation levels per sign (>= 1; 1 is ternary)


register_compressor_schema("qsgd", QSGDConfig)


def level_dtype(levels: int) -> torch.dtype:
    return torch.int8 if levels <= 127 else torch.int16 if levels <= 32767 else torch.int32


def quantize(x: torch.Tensor, levels: int, u: torch.Tensor):
    """(norm, signed levels) of ``x`` given uniform draws ``u`` (same shape as x)."""
    norm = torch.linalg.vector_norm(x.float())
    if norm == 0:
        return norm, torch.zeros_like(x, dtype=level_dtype(levels))
    xi = torch.floor(x.abs().float() / norm * levels + u)
    return norm, (torch.sign(x) * xi).to(level_dtype(levels))


def dequantize(norm: torch.Tensor, q: torch.Tensor, levels: int) -> torch.Tensor:
    return q.float() * (norm / levels)


@COMPRESSORS.register("qsgd")
class QSGD(Compressor):
    name = "qsgd"
    collective = "allgather"
    carries = frozenset({"gradient", "delta", "weights", "activation"})
    bench_overrides = ("compressor.levels=16",)

    @classmethod
    def payload_bytes(cls, cfg, n):
        return 4 + torch.empty(0, dtype=level_dtype(cfg.levels)).element_size() * n  # float32 norm + a level each

    @classmethod
    def validate(cls, cfg):
        check(cfg.levels >= 1, "levels", cfg.levels, "must be >= 1")

    def encode(self, x, info):
        g = torch.Generator().manual_seed(mix_seed(info.seed, info.rank, info.step, info.index))
        u = torch.rand(x.numel(), generator=g).to(x.device)
        norm, q = quantize(x, self.cfg.levels, u)
        return as_bytes(norm.float().reshape(1).cpu(), q.cpu()), x.numel()

    def _one(self, buf, n):
        norm, off = from_bytes(buf.cpu(), torch.float32, 1)
        q, _ = from_bytes(buf.cpu(), level_dtype(self.cfg.levels), n, off)
        return dequantize(norm, q, self.cfg.levels)

    def decode(self, received, ctx, info):
        out = torch.zeros(ctx)
        for buf in received:
            out += self._one(buf, ctx)
        return out.div_(self.world).to(received[0].device)

    def local(self, payload, ctx, info):
        return self._one(payload, ctx).to(payload.device)
