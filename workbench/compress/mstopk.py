"""``mstopk``: approximate Top-K by a multi-step threshold search (MSTopK, Shi et al. 2021, the
variant Agarwal et al. evaluate): instead of sorting, bisect a magnitude threshold for
``search_steps`` rounds, each one counting the entries above it, then take every entry above the
upper threshold and fill up to ``k * n`` from those between the two thresholds in index order.
Same payload and all-gather as :mod:`topk`."""
from dataclasses import dataclass

import torch

from workbench.compress import COMPRESSORS, check, keep_count, register_compressor_schema
from workbench.compress.topk import SparseCompressor, TopKConfig


@dataclass
class MSTopKConfig(TopKConfig):
    name: str = "mstopk"
    search_steps: int = 20  # bisection rounds of the threshold search


register_compressor_schema("mstopk", MSTopKConfig)


def mstopk_select(x: torch.Tensor, count: int, steps: int) -> torch.Tensor:
    """Sorted indices of about ``count`` (never more) large-magnitude nonzero entries of ``x``."""
    a = x.abs().float()
    lo = torch.zeros((), dtype=torch.float32)  # entries > lo: at least count (or every nonzero one)
    hi = a.max() if a.numel() else lo  # entries > hi: at most count
    for _ in range(steps):
        mid = (lo + hi) * 0.5
        c = int((a > mid).sum())
        if c == count:
            lo = hi = mid
            break
        if c > count:
            lo = mid
        else:
            hi = mid
    top = torch.nonzero(a > hi).reshape(-1)
    between = torch.nonzero((a > lo) & (a <= hi)).reshape(-1)
    return torch.cat([top, between[: max(0, count - top.numel())]]).sort().values


@COMPRESSORS.register("mstopk")
class MSTopK(SparseCompressor):
    name = "mstopk"

    @classmethod
    def validate(cls, cfg):
        super().validate(cfg)
        check(cfg.search_steps >= 1, "search_steps", cfg.search_steps, "must be >= 1")

    def select(self, x):
        return mstopk_select(x, keep_count(self.cfg.k, x.numel()), self.cfg.search_steps)
