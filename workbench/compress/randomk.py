"""``randomk``: keep ``k * n`` elements at random positions, the same positions on every rank
(drawn from a generator seeded by (seed, step, bucket)), so the kept values can be all-reduced.
Positions are stratified: one uniformly random position in each of ``k * n`` equal blocks of the
bucket (distinct, sorted, O(k n) to draw; a full random permutation of a 7M-element bucket takes
minutes on CPU). Values are not rescaled by ``n / k``; use ``error_feedback=true`` to send the rest
later."""
from dataclasses import dataclass

import torch

from workbench.compress import (COMPRESSORS, Compressor, CompressorConfig, check, keep_count, mix_seed,
                                register_compressor_schema)


@dataclass
class RandomKConfig(CompressorConfig):
    name: str = "randomk"
    k: float = 0.01  # fraction of each bucket's elements sent, in (0, 1]


register_compressor_schema("randomk", RandomKConfig)


def shared_indices(n: int, count: int, seed: int, step: int, bucket: int) -> torch.Tensor:
    """Sorted positions kept in this bucket at this step; a function of its arguments only."""
    g = torch.Generator().manual_seed(mix_seed(seed, step, bucket))
    block = torch.arange(count + 1, dtype=torch.int64) * n // count  # block i is [block[i], block[i+1])
    width = (block[1:] - block[:-1]).double()
    return block[:-1] + (torch.rand(count, generator=g, dtype=torch.float64) * width).long().clamp_max_(width.long() - 1)


@COMPRESSORS.register("randomk")
class RandomK(Compressor):
    name = "randomk"
    collective = "allreduce"
    point_to_point = False  # the positions come from a seed both ends of a collective share
    bench_overrides = ("compressor.k=0.01", "compressor.error_feedback=true")

    @classmethod
    def payload_bytes(cls, cfg, n):
        return 4 * keep_count(cfg.k, n)  # values only: every rank draws the same positions

    @classmethod
    def validate(cls, cfg):
        check(0 < cfg.k <= 1, "k", cfg.k, "must be in (0, 1]")

    def encode(self, x, info):
        idx = shared_indices(x.numel(), keep_count(self.cfg.k, x.numel()), info.seed, info.step, info.index).to(x.device)
        return x[idx].div_(self.world), (idx, x.numel())

    def decode(self, received, ctx, info):
        idx, n = ctx
        out = torch.zeros(n, dtype=received.dtype, device=received.device)
        out[idx] = received
        return out

    def local(self, payload, ctx, info):
        return self.decode(payload * self.world, ctx, info)
