"""The gradient noise scale of synchronous training, from the two gradients it already has
(McCandlish et al. 2018, "An Empirical Model of Large-Batch Training", appendix A.1).

Each of W workers computes the gradient g_small of its own batch B_small; the all-reduce averages
them into g_big, the gradient of the global batch B_big = W * B_small. Since E|g_B|^2 = |G|^2 +
tr(Sigma)/B, the two norms give unbiased estimates of the true gradient's squared norm and of the
per-sample covariance's trace:

    |G|^2 = (B_big |g_big|^2 - B_small |g_small|^2) / (B_big - B_small)
    S     = (|g_small|^2 - |g_big|^2) / (1/B_small - 1/B_big)
    B_noise = S / |G|^2

with |g_small|^2 the mean over workers of each one's local squared norm. Both estimates are noisy
step by step, so, as the paper does, each is smoothed by an exponential moving average over steps
before the ratio is taken.

How it rides on DDP: :func:`gns_hook` wraps a communication hook (the meter's plain all-reduce);
it adds up, per step, the local bucket's squared norm before the inner hook runs and the averaged
bucket's after its future completes, without touching the values (so training stays bit-identical
to DDP's). :meth:`GnsState.end_step` folds the step into the moving averages. Both estimates are
linear in the two norms, so the moving average of the workers' mean is the mean of each worker's
own moving average: the workers' |g_small|^2 need one scalar all-reduce per evaluation
(:meth:`GnsState.metrics`, meter category ``gns``), not one per step, and the step's bytes are
DDP's alone.
"""

import math
from typing import Callable, Dict, List, Optional

import torch
import torch.distributed as dist

from workbench.meter import Meter


def estimates(small_sq: float, big_sq: float, b_small: int, b_big: int) -> Dict[str, float]:
    """The paper's unbiased ``|G|^2`` (``grad_sq``) and ``tr(Sigma)`` (``trace``) from the squared
    norms of gradients at batches ``b_small < b_big``, and their ratio ``noise_scale`` (NaN where
    the |G|^2 estimate is not positive: the gradient is below its noise)."""
    if not 0 < b_small < b_big:
        raise ValueError(f"need 0 < b_small < b_big, got {b_small}, {b_big}")
    grad_sq = (b_big * big_sq - b_small * small_sq) / (b_big - b_small)
    trace = (small_sq - big_sq) / (1.0 / b_small - 1.0 / b_big)
    return {"grad_sq": grad_sq, "trace": trace, "noise_scale": trace / grad_sq if grad_sq > 0 else math.nan}


def _sq(t: torch.Tensor) -> torch.Tensor:
    return torch.sum(t * t, dtype=torch.float64)


class GnsState:
    """Per-step squared norms from the hook and their moving averages (on the gradients' device,
    so the hook never waits for a GPU); ``inner_state`` and ``inner_hook`` are the wrapped hook."""

    __slots__ = ("inner_state", "inner_hook", "meter", "group", "b_small", "b_big", "decay", "steps",
                 "_small", "_big", "_ema")

    def __init__(self, inner_state, inner_hook: Callable, meter: Meter, b_small: int, b_big: int,
                 decay: float = 0.95, group=None) -> None:
        self.inner_state, self.inner_hook, self.meter, self.group = inner_state, inner_hook, meter, group
        self.b_small, self.b_big, self.decay = b_small, b_big, decay
        self.steps = 0
        self._small: List[torch.Tensor] = []  # this step's buckets (list.append: safe from the hook's threads)
        self._big: List[torch.Tensor] = []
        self._ema: Optional[torch.Tensor] = None  # [EMA |g_small|^2 (this worker), EMA |g_big|^2]

    def end_step(self) -> None:
        """Fold this step's norms into the moving averages (call after backward, once per step)."""
        if not self._small:
            return
        now = torch.stack([torch.stack(self._small).sum(), torch.stack(self._big).sum()])
        self._small.clear()
        self._big.clear()
        self._ema = now * (1 - self.decay) if self._ema is None else self._ema * self.decay + now * (1 - self.decay)
        self.steps += 1

    def metrics(self, comm_device: torch.device) -> Dict[str, float]:
        """``gradient_noise_scale`` (B_noise, in samples) with ``gns_grad_sq`` and ``gns_trace``, from
        the moving averages (bias-corrected), the workers' averaged by one all-reduce of two float64s
        (category ``gns``); NaN before the first step. Every rank must call it."""
        ema = self._ema if self._ema is not None else torch.zeros(2, dtype=torch.float64)
        buf = ema.detach().to(comm_device, torch.float64).clone()
        self.meter.all_reduce(buf, "gns", group=self.group)
        if self.steps == 0:
            return {"gradient_noise_scale": math.nan, "gns_grad_sq": math.nan, "gns_trace": math.nan}
        small, big = (buf / (dist.get_world_size(self.group) * (1 - self.decay ** self.steps))).tolist()
        e = estimates(small, big, self.b_small, self.b_big)
        return {"gradient_noise_scale": e["noise_scale"], "gns_grad_sq": e["grad_sq"], "gns_trace": e["trace"]}


def gns_hook(state: GnsState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP hook: the inner hook's exchange, with the bucket's squared norm taken before (this
    worker's gradient, batch B_small) and after (the average, batch B_big)."""
    state._small.append(_sq(bucket.buffer()))

    def after(fut: torch.futures.Future) -> torch.Tensor:
        out = fut.value()
        state._big.append(_sq(out))
        return out
    return state.inner_hook(state.inner_state, bucket).then(after)
