"""The gradient noise scale (workbench/gns.py) against a direct computation from per-sample
gradients of a tiny model: the paper's two-batch estimator recovers |G|^2 and tr(Sigma) exactly from
the expected norms and without bias from sampled batches, and the DDP hook measures the very norms
a hand computation gives (and leaves DDP's averaged gradients bit-identical)."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from dist_utils import run_ranks
from workbench.gns import GnsState, estimates, gns_hook

N, D, C = 48, 5, 3  # samples, inputs, classes of the tiny model


def _problem():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(N, D, generator=g)
    y = torch.randint(0, C, (N,), generator=g)
    torch.manual_seed(5)
    model = torch.nn.Linear(D, C).double()
    return model, x.double(), y


def per_sample_grads(model, x, y) -> torch.Tensor:
    """(N, P): the gradient of each sample's loss, one backward each."""
    rows = []
    for i in range(len(y)):
        model.zero_grad()
        F.cross_entropy(model(x[i:i + 1]), y[i:i + 1]).backward()
        rows.append(torch.cat([p.grad.reshape(-1) for p in model.parameters()]).clone())
    return torch.stack(rows)


def test_estimates_recover_truth_from_expected_norms():
    model, x, y = _problem()
    g = per_sample_grads(model, x, y)
    true_g = g.mean(0)
    trace = ((g - true_g) ** 2).sum(1).mean().item()  # tr(Sigma) of one sample drawn uniformly
    g2 = (true_g ** 2).sum().item()
    for b_small, b_big in ((4, 16), (2, 48)):
        # E|g_B|^2 = |G|^2 + tr(Sigma)/B for B samples drawn independently
        e = estimates(g2 + trace / b_small, g2 + trace / b_big, b_small, b_big)
        assert e["grad_sq"] == pytest.approx(g2, rel=1e-9)
        assert e["trace"] == pytest.approx(trace, rel=1e-9)
        assert e["noise_scale"] == pytest.approx(trace / g2, rel=1e-9)


def test_estimates_are_unbiased_over_sampled_batches():
    """Mean of the estimates over many sampled batches (4 workers of 4 samples) vs the truth."""
    model, x, y = _problem()
    g = per_sample_grads(model, x, y).numpy()
    true_g = g.mean(0)
    trace, g2 = ((g - true_g) ** 2).sum(1).mean(), (true_g ** 2).sum()
    rng = np.random.default_rng(0)
    draws, workers, b = 20000, 4, 4
    idx = rng.integers(0, N, size=(draws, workers, b))
    small = g[idx].mean(2)  # (draws, workers, P)
    big = small.mean(1)
    small_sq = (small ** 2).sum(2).mean(1)  # the workers' mean of the local squared norms
    big_sq = (big ** 2).sum(1)
    e = estimates(small_sq.mean(), big_sq.mean(), b, workers * b)  # linear: mean of estimates
    assert e["grad_sq"] == pytest.approx(g2, rel=0.05)
    assert e["trace"] == pytest.approx(trace, rel=0.05)


def test_estimates_reject_equal_batches():
    with pytest.raises(ValueError):
        estimates(1.0, 1.0, 8, 8)
    assert math.isnan(estimates(4.0, 1.0, 4, 8)["noise_scale"])  # |G|^2 estimate (8 - 16)/4 < 0


BATCHES = [[0, 5, 9, 11, 20, 31], [2, 3, 17, 30, 40, 47]], [[1, 8, 13, 22, 35, 44], [4, 6, 7, 12, 19, 46]]
DECAY = 0.5


def _ranks(rank, world, hooked):
    from torch.nn.parallel import DistributedDataParallel as DDP

    from workbench.meter import AllreduceHookState, Meter, metered_allreduce_hook
    model, x, y = _problem()
    model = model.float()
    meter = Meter()
    ddp = DDP(model)
    inner = (AllreduceHookState(meter), metered_allreduce_hook)
    state = GnsState(*inner, meter, b_small=6, b_big=12, decay=DECAY) if hooked else None
    ddp.register_comm_hook(*((state, gns_hook) if hooked else inner))
    grads = []
    for step in BATCHES:  # weights fixed: backward only
        ddp.zero_grad()
        i = step[rank]
        F.cross_entropy(ddp(x[i].float()), y[i]).backward()
        grads.append([p.grad.numpy().copy() for p in model.parameters()])  # numpy: pickled by value
        if hooked:
            state.end_step()
    window = meter.pop()
    metrics = state.metrics(torch.device("cpu")) if hooked else {}
    return grads, {k: v["sent"] for k, v in window.items()}, metrics, {k: v["sent"] for k, v in meter.pop().items()}


def test_ddp_hook_matches_direct_computation():
    hooked = run_ranks(_ranks, 2, True)
    plain = run_ranks(_ranks, 2, False)
    for (gh, bytes_h, _, _), (gp, bytes_p, _, _) in zip(hooked, plain):
        assert all(np.array_equal(a, b) for sa, sb in zip(gh, gp) for a, b in zip(sa, sb))  # bit-identical
        assert bytes_h == bytes_p  # the steps' bytes are DDP's own
    metrics, gns_bytes = hooked[0][2], hooked[0][3]
    assert metrics == hooked[1][2]
    assert gns_bytes == {"gns": 16}  # one all-reduce of two float64s per evaluation (2 ranks: N bytes)

    model, x, y = _problem()
    g = per_sample_grads(model, x, y)
    ema, w = torch.zeros(2, dtype=torch.float64), 0.0
    for step in BATCHES:
        small = sum((g[i].mean(0) ** 2).sum() for i in step) / len(step)
        big = (g[step[0] + step[1]].mean(0) ** 2).sum()
        ema = DECAY * ema + (1 - DECAY) * torch.stack([small, big])
        w = DECAY * w + (1 - DECAY)
    want = estimates(*(ema / w).tolist(), 6, 12)
    assert metrics["gns_grad_sq"] == pytest.approx(want["grad_sq"], rel=1e-5)
    assert metrics["gns_trace"] == pytest.approx(want["trace"], rel=1e-5)
    assert metrics["gradient_noise_scale"] == pytest.approx(want["noise_scale"], rel=1e-5)
