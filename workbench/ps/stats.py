"""What a server counts: updates, gradients, staleness histogram, update sizes, drops, time.

Kept as a fixed-length float64 vector so that rank 0 can fetch it over the wire (``ps_control``)
at every evaluation and sum it over servers; :func:`summarize` turns one into the numbers that go
to ``metrics.jsonl`` (``kind: staleness``) and ``summary.json`` (``ps``).
"""
from __future__ import annotations

import time
from typing import Dict, Iterable, Optional

import torch

BINS = 64  # staleness 0..63, and a last bin for >= 64; update sizes likewise
_SCALARS = ("updates", "gradients", "dropped", "merged", "blocked", "max_tau", "sum_tau", "busy_s", "elapsed_s")
LENGTH = len(_SCALARS) + 2 * (BINS + 1)


class ServerStats:
    def __init__(self) -> None:
        self.v = {k: 0.0 for k in _SCALARS}
        self.tau_hist = [0] * (BINS + 1)
        self.size_hist = [0] * (BINS + 1)
        self.t_first: Optional[float] = None
        self.t_last: Optional[float] = None
        self.elapsed_before = 0.0  # server time of the attempts before a restart

    def mark(self) -> None:
        """A message arrived: the server's clock for updates/s starts at the first one."""
        now = time.perf_counter()
        if self.t_first is None:
            self.t_first = now
        self.t_last = now

    def update(self, taus: Iterable[int], busy_s: float) -> None:
        taus = list(taus)
        self.v["updates"] += 1
        self.v["gradients"] += len(taus)
        self.v["busy_s"] += busy_s
        self.size_hist[min(len(taus), BINS)] += 1
        for t in taus:
            self.tau_hist[min(t, BINS)] += 1
            self.v["sum_tau"] += t
            self.v["max_tau"] = max(self.v["max_tau"], t)
        self.mark()

    def state_dict(self) -> dict:
        self.tensor()  # brings elapsed_s up to date
        return {"v": dict(self.v), "tau_hist": list(self.tau_hist), "size_hist": list(self.size_hist)}

    def load_state_dict(self, st: dict) -> None:
        self.v.update(st["v"])
        self.tau_hist, self.size_hist = list(st["tau_hist"]), list(st["size_hist"])
        self.elapsed_before = self.v["elapsed_s"]

    def tensor(self) -> torch.Tensor:
        if self.t_first is not None:
            self.v["elapsed_s"] = self.elapsed_before + self.t_last - self.t_first
        return torch.tensor([self.v[k] for k in _SCALARS] + self.tau_hist + self.size_hist, dtype=torch.float64)


def combine(vectors: Iterable[torch.Tensor]) -> torch.Tensor:
    """Sum over servers, except max_tau and elapsed_s, which take the maximum."""
    vs = list(vectors)
    out = torch.stack(vs).sum(0)
    for k in ("max_tau", "elapsed_s"):
        i = _SCALARS.index(k)
        out[i] = max(float(v[i]) for v in vs)
    return out


def summarize(vec: torch.Tensor, servers: int = 1) -> Dict:
    """Readable form of a (combined) stats vector. Counts are per server shard: with S servers each
    gradient is counted S times (once per shard it updates); ``updates_per_s`` is per server."""
    n = len(_SCALARS)
    v = {k: float(vec[i]) for i, k in enumerate(_SCALARS)}
    tau = [int(x) for x in vec[n:n + BINS + 1]]
    sizes = [int(x) for x in vec[n + BINS + 1:]]
    grads = max(1.0, v["gradients"])
    last = max([i for i, c in enumerate(tau) if c] or [0])
    return {
        "updates": int(v["updates"]) // servers, "gradients": int(v["gradients"]) // servers,
        "dropped": int(v["dropped"]) // servers, "merged_updates": int(v["merged"]) // servers,
        "blocked_pushes": int(v["blocked"]) // servers,
        "staleness_mean": v["sum_tau"] / grads,
        "staleness_max": last if last < BINS else int(v["max_tau"]),
        "staleness_hist": tau[: last + 1],  # index = staleness in updates (last bin: >= 64)
        "update_sizes": {str(i): c // servers for i, c in enumerate(sizes) if c},
        "updates_per_s": (v["updates"] / servers) / v["elapsed_s"] if v["elapsed_s"] > 0 else None,
        "server_busy_s": v["busy_s"] / servers,
    }


def interval(now: torch.Tensor, before: Optional[torch.Tensor]) -> torch.Tensor:
    """Counts since ``before`` (a per-evaluation-interval histogram); max_tau stays cumulative."""
    return now.clone() if before is None else torch.where(
        torch.arange(len(now)) == _SCALARS.index("max_tau"), now, now - before)
