"""NumPy reference implementations of the compressors (written from the papers, independently of
workbench/compress/), used by tests/test_compress*.py. Each takes the ranks' local bucket tensors
and returns what every rank should hold after the exchange (the decoded average)."""
import numpy as np


def keep(k, n):
    return max(1, min(n, int(k * n)))


def topk_indices(x, k):
    a = np.abs(x)
    m = keep(k, x.size)
    idx = np.argsort(-a, kind="stable")[:m]
    idx = idx[a[idx] > 0]
    return np.sort(idx)


def mstopk_indices(x, k, steps):
    a = np.abs(x).astype(np.float32)
    count = keep(k, x.size)
    lo = np.float32(0)
    hi = a.max() if a.size else lo
    for _ in range(steps):
        mid = np.float32((lo + hi) * np.float32(0.5))
        c = int((a > mid).sum())
        if c == count:
            lo = hi = mid
            break
        if c > count:
            lo = mid
        else:
            hi = mid
    top = np.nonzero(a > hi)[0]
    between = np.nonzero((a > lo) & (a <= hi))[0]
    return np.sort(np.concatenate([top, between[: max(0, count - top.size)]]))


def sparse_local(x, idx):
    out = np.zeros_like(x)
    out[idx] = x[idx]
    return out


def sign_bits(x):
    return np.packbits(x >= 0)


def signs(x):
    return np.where(x >= 0, 1.0, -1.0).astype(np.float32)


def majority_vote(xs):
    return np.sign(sum(signs(x) for x in xs)).astype(np.float32)


def scaled_sign(x):
    return (np.abs(x).sum() / x.size).astype(np.float32) * signs(x)


def qsgd_local(x, s, u):
    norm = np.float32(np.sqrt(np.sum(x.astype(np.float64) ** 2)))
    if norm == 0:
        return np.zeros_like(x)
    xi = np.floor(np.abs(x) / norm * np.float32(s) + u)
    return (np.sign(x) * xi).astype(np.float32) * (norm / np.float32(s))


def local(name, x, cfg, u=None, idx=None):
    """What one rank's payload stands for."""
    if name == "none":
        return x
    if name == "fp16":
        return x.astype(np.float16).astype(np.float32)
    if name in ("topk",):
        return sparse_local(x, topk_indices(x, cfg["k"]))
    if name == "mstopk":
        return sparse_local(x, mstopk_indices(x, cfg["k"], cfg["search_steps"]))
    if name == "randomk":
        return sparse_local(x, idx)
    if name == "signsgd":
        return signs(x) * np.float32(cfg.get("scale", 1.0))
    if name == "efsignsgd":
        return scaled_sign(x)
    if name == "qsgd":
        return qsgd_local(x, cfg["levels"], u)
    raise KeyError(name)


def exchange(name, xs, cfg, us=None, idx=None, errors=None):
    """(decoded average, new residuals) for the ranks' inputs ``xs`` (with error feedback when
    ``errors`` is a list of residuals)."""
    if errors is not None:
        xs = [x + e for x, e in zip(xs, errors)]
    locs = [local(name, x, cfg, None if us is None else us[r], idx) for r, x in enumerate(xs)]
    if name == "signsgd":
        avg = majority_vote(xs) * np.float32(cfg.get("scale", 1.0))
    elif name == "efsignsgd":  # the step is scaled, the residual (from the local reconstruction) is not
        avg = sum(locs) / np.float32(len(xs)) * np.float32(cfg.get("step_scale", 1.0))
    else:
        avg = sum(locs) / np.float32(len(xs))
    new_errors = [x - l for x, l in zip(xs, locs)] if errors is not None else None
    return avg.astype(np.float32), new_errors


def powersgd_rank1_exact(a, b):
    """A rank-1 matrix a bᵀ: what rank-1 PowerSGD must reproduce exactly."""
    return np.outer(a, b)
