"""``topk``: exact Top-K. Each rank keeps the ``k * n`` entries of largest magnitude in a bucket
(zeros dropped, so a bucket of zero gradients sends nothing) and all-gathers (value, index) pairs;
the decode sums every rank's sparse vector and divides by the world size. Payloads differ in
length from rank to rank and may be empty (sizes are exchanged first, so nothing hangs).

Payload layout: ``m`` float32 values then ``m`` int32 indices, as one byte string."""
from dataclasses import dataclass

import torch

from workbench.compress import (COMPRESSORS, Compressor, CompressorConfig, as_bytes, check, from_bytes,
                                keep_count, register_compressor_schema)


@dataclass
class TopKConfig(CompressorConfig):
    name: str = "topk"
    k: float = 0.01  # fraction of each bucket's elements sent, in (0, 1]


register_compressor_schema("topk", TopKConfig)


def pack_sparse(values: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    return as_bytes(values.float(), indices.to(torch.int32))


def unpack_sparse(buf: torch.Tensor):
    m = buf.numel() // 8
    values, off = from_bytes(buf, torch.float32, m)
    indices, _ = from_bytes(buf, torch.int32, m, off)
    return values, indices.long()


def topk_select(x: torch.Tensor, count: int) -> torch.Tensor:
    """Sorted indices of the ``count`` largest-magnitude nonzero entries of ``x``."""
    a = x.abs()
    idx = torch.topk(a, count, sorted=False).indices
    idx = idx[a[idx] > 0]
    return idx.sort().values


class SparseCompressor(Compressor):
    """All-gather of (value, index) pairs; subclasses choose the indices."""

    collective = "allgather"
    carries = frozenset({"gradient", "delta", "weights"})
    bench_overrides = ("compressor.k=0.01",)

    @classmethod
    def payload_bytes(cls, cfg, n):
        return 8 * keep_count(cfg.k, n)  # float32 value + int32 index per kept element

    @classmethod
    def validate(cls, cfg):
        check(0 < cfg.k <= 1, "k", cfg.k, "must be in (0, 1]")

    def select(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError  # pragma: no cover - abstract

    def encode(self, x, info):
        idx = self.select(x)
        return pack_sparse(x[idx], idx), x.numel()

    def decode(self, received, ctx, info):
        out = torch.zeros(ctx, dtype=torch.float32)
        for buf in received:
            values, indices = unpack_sparse(buf.cpu())
            out.index_add_(0, indices, values)
        return out.div_(self.world).to(received[0].device)

    def local(self, payload, ctx, info):
        values, indices = unpack_sparse(payload.cpu())
        out = torch.zeros(ctx, dtype=torch.float32)
        out[indices] = values
        return out.to(payload.device)


@COMPRESSORS.register("topk")
class TopK(SparseCompressor):
    name = "topk"

    def select(self, x):
        return topk_select(x, keep_count(self.cfg.k, x.numel()))
