"""``randomk``: keep ``k * n`` elements at random positions, the same positions on every rank
(drawn from a generator seeded by (seed, step, bucket)), so the kept values can be all-reduced.
Values are not rescaled by ``n / k``; use ``error_feedback=true`` to send the rest later."""
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
    return torch.randperm(n, generator=g)[:count].sort().values


@COMPRESSORS.register("randomk")
class RandomK(Compressor):
    name = "randomk"
    collective = "allreduce"

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
