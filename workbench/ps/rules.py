"""Gradient update rules of a parameter server: hardsync, n-softsync / async, bounded staleness.

Symbols as in Rudra (docs/papers.md §1): λ workers, the server's timestamp i (updates applied so far), a
gradient computed on weights with timestamp j and applied at i has staleness τ = i − j.

- **hardsync**: average exactly one gradient from every (still active) worker, update, then answer
  them all with the new weights. τ = 0; equal to SGD on the global batch.
- **n-softsync**: update as soon as c = ⌊λ/n⌋ gradients from any workers are buffered:
  θ ← θ − α₀·(1/c)·Σ f(τ_l)·Δθ_l, the oldest gradients first; a pushing worker is answered at once
  with the current weights (which may not include its own gradient yet). n = λ is Downpour async.
- **learning-rate modulation** f(τ): ``none`` 1; ``per_gradient`` 1/τ (1 at τ = 0), i.e.
  α(τ) = α₀/τ; ``mean`` 1/⟨τ⟩ over the gradients of the update (1 when ⟨τ⟩ < 1).
- **enforced bound** s = ``max_staleness`` (SSP): ``block`` — the server does not advance its clock
  while an unapplied gradient (buffered, or being computed on weights j) would then exceed s, and
  withholds its answer to the workers that pushed meanwhile, so they block; when every worker is
  waiting it may always apply all buffered gradients at once (a *merged* update), so the run
  never deadlocks. ``drop`` — a gradient whose staleness exceeds s is discarded (the X10 ``spread``).
  Either way every applied gradient satisfies τ ≤ s, asserted at apply time.

The optimizer (SGD with momentum, weight decay, the run's learning-rate schedule) runs here, on the
server's shard; the schedule advances one step per λ gradients applied, i.e. per global batch.

The protocol's decisions (when to update, which gradients, whom to answer, what to drop) are
:class:`Protocol`, pure Python without tensors or clocks: the real server's :class:`GradientRule`
adds the tensors, the optimizer and wall time to it, and the simulator (:mod:`workbench.sim`) drives
the same class with simulated time. ``WORKBENCH_PS_TRACE=<dir>`` makes a real server write every
push, done and applied update (with each gradient's τ) to ``<dir>/server-<pid>.jsonl``, so that a
real schedule can be replayed through the simulator; every record carries ``t``, the host's monotonic
clock, and the server loop adds a ``sent`` record when a reply's sends have returned, so the same file
is the server's timeline (docs/planner.md reads it).
"""
from __future__ import annotations

import json
import os
import time
from typing import Callable, Dict, List, Optional, Sequence

import torch

from workbench.ps import protocol as P
from workbench.ps.stats import ServerStats

MODULATIONS = ("none", "per_gradient", "mean")
ON_STALE = ("block", "drop")


def modulation(taus: Sequence[int], mode: str) -> List[float]:
    """Per-gradient learning-rate factors α(τ)/α₀ for the gradients of one update."""
    if mode == "none":
        return [1.0] * len(taus)
    if mode == "per_gradient":
        return [1.0 / t if t > 0 else 1.0 for t in taus]
    if mode == "mean":
        m = sum(taus) / len(taus) if taus else 0.0
        return [1.0 / m if m > 1.0 else 1.0] * len(taus)
    raise ValueError(f"unknown lr modulation {mode!r}; choose from {', '.join(MODULATIONS)}")


class Protocol:
    """The decisions of one server's shard under one protocol, without tensors or clocks.
    ``workers``: the worker ranks (λ = len(workers)); ``c``: gradients per update (ignored by
    hardsync); ``max_staleness``: None for unbounded. A push's payload is opaque here; an update
    calls :meth:`step` with the entries to apply, their staleness and their learning-rate factors."""

    params = None  # what a reply carries: the real rule's tensor

    def __init__(self, workers: Sequence[int], *, hardsync: bool, c: int = 1, max_staleness: Optional[int] = None,
                 on_stale: str = "block", lr_modulation: str = "none", stats=None) -> None:
        if on_stale not in ON_STALE:
            raise ValueError(f"on_stale must be one of {ON_STALE}")
        self.workers = list(workers)
        self.lam = len(self.workers)
        self.hardsync, self.c = hardsync, (self.lam if hardsync else c)
        self.s, self.on_stale, self.mode = max_staleness, on_stale, lr_modulation
        modulation([0], lr_modulation)  # reject an unknown mode now, not at the first update
        self.timestamp = 0
        self.gradients_applied = 0
        self.active = set(self.workers)
        self.computing: Dict[int, int] = {w: 0 for w in self.workers}  # worker -> timestamp of its weights
        self.buffer: List[tuple] = []  # (seq, worker, j, payload)
        self.waiting: List[int] = []  # pushed, answer withheld
        self.blocked = False
        self.seq = 0
        self.stats = stats if stats is not None else ServerStats()

    def step(self, entries: List[tuple], taus: List[int], factors: List[float]) -> None:
        """Apply one update (the real rule: the optimizer on the tensors; the simulator: its clock)."""

    # -- the update ----------------------------------------------------------------------------------
    def _apply(self, entries: List[tuple]) -> None:
        taus = [self.timestamp - j for _, _, j, _ in entries]
        if self.s is not None:
            worst = max(taus)
            assert worst <= self.s, f"staleness {worst} exceeds max_staleness {self.s}"  # the enforced bound
        self.step(entries, taus, modulation(taus, self.mode))
        self.timestamp += 1
        self.gradients_applied += len(entries)

    def _may_advance(self, js) -> bool:
        """Would advancing the clock keep every gradient still to be applied within the bound?"""
        if self.s is None or self.on_stale == "drop":
            return True
        return all(self.timestamp + 1 - j <= self.s for j in js)

    def _purge_stale(self) -> None:
        if self.s is None or self.on_stale != "drop":
            return
        keep = [e for e in self.buffer if self.timestamp - e[2] <= self.s]
        self.stats.v["dropped"] += len(self.buffer) - len(keep)
        self.buffer = keep

    def _try_update(self) -> None:
        self.blocked = False
        if self.hardsync:
            # a worker waits for its answer, so at most one gradient of each is buffered
            if self.buffer and len(self.buffer) >= len(self.active) and {e[1] for e in self.buffer} >= self.active:
                self._apply(self.buffer)
                self.buffer = []
            return
        while True:
            self._purge_stale()
            if len(self.buffer) < self.c:
                return
            order = sorted(self.buffer, key=lambda e: (e[2], e[0]))  # oldest weights first
            take, rest = order[: self.c], order[self.c:]
            # unbounded: no need to look at every worker's clock (λ of them) at every update
            if (self.s is None or self.on_stale == "drop"
                    or self._may_advance([e[2] for e in rest] + list(self.computing.values()))):
                self._apply(take)
                self.buffer = rest
            elif self._may_advance(self.computing.values()):
                self._apply(order)
                self.stats.v["merged"] += 1
                self.buffer = []
            else:
                self.blocked = True
                return

    def _release(self, workers, status=P.APPLIED) -> list:
        out = []
        gone = set(workers)
        for w in workers:
            self.computing[w] = self.timestamp
            out.append((w, status, self.params))
        self.waiting = [w for w in self.waiting if w not in gone]
        return out

    def _answer_waiting(self) -> list:
        if self.hardsync:
            return self._release(list(self.waiting)) if not self.buffer else []
        if self.blocked:
            return []
        return self._release(list(self.waiting))

    # -- messages ------------------------------------------------------------------------------------
    def on_push(self, worker: int, ts: int, grad) -> list:
        self.computing.pop(worker, None)
        if (not self.hardsync and self.s is not None and self.on_stale == "drop"
                and self.timestamp - ts > self.s):
            self.stats.v["dropped"] += 1
            return self._release([worker], P.DROPPED)
        self.buffer.append((self.seq, worker, ts, grad))
        self.seq += 1
        self.waiting.append(worker)
        self._try_update()
        if self.blocked:
            self.stats.v["blocked"] += 1
        return self._answer_waiting()

    def on_pull(self, worker: int) -> list:
        self.computing[worker] = self.timestamp
        return [(worker, P.APPLIED, self.params)]

    def on_done(self, worker: int) -> list:
        self.computing.pop(worker, None)
        self.active.discard(worker)
        self._try_update()
        return self._answer_waiting()

    def on_barrier(self, worker: int) -> list:
        """The worker waits at a checkpoint barrier: it computes nothing, so it holds back no update."""
        self.computing.pop(worker, None)
        self._try_update()
        return self._answer_waiting()

    def release_barrier(self, workers) -> list:
        """Everyone is at the barrier (nobody waits on a push): they go on with the current weights."""
        return self._release(list(workers))

    def finish(self) -> None:
        """Every worker is done: apply what is left in the buffer (fewer than c gradients)."""
        self._purge_stale()
        if self.buffer:
            self._apply(sorted(self.buffer, key=lambda e: (e[2], e[0])))
            self.buffer = []


class GradientRule(Protocol):
    """:class:`Protocol` on a tensor shard: the gradients are averaged with their learning-rate
    factors and applied by the run's optimizer; the statistics take the update's wall time."""

    def __init__(self, params: torch.Tensor, workers: Sequence[int], *, hardsync: bool, c: int = 1,
                 max_staleness: Optional[int] = None, on_stale: str = "block", lr_modulation: str = "none",
                 make_optimizer: Callable[[List[torch.Tensor]], torch.optim.Optimizer],
                 lr_fn: Callable[[int], float]) -> None:
        super().__init__(workers, hardsync=hardsync, c=c, max_staleness=max_staleness, on_stale=on_stale,
                         lr_modulation=lr_modulation)
        self.params = params
        self.optimizer = make_optimizer([params])
        self.lr_fn = lr_fn
        where = os.environ.get("WORKBENCH_PS_TRACE")
        self.trace = open(os.path.join(where, f"server-{os.getpid()}.jsonl"), "a", buffering=1) if where else None

    def _log(self, rec) -> None:
        if self.trace is not None:
            self.trace.write(json.dumps({**rec, "t": time.monotonic()}) + "\n")

    def step(self, entries: List[tuple], taus: List[int], f: List[float]) -> None:
        t0 = time.perf_counter()
        # sum in worker order, so that the result does not depend on arrival order
        order = sorted(range(len(entries)), key=lambda k: (entries[k][1], entries[k][0]))
        grad = torch.zeros_like(self.params)
        for k in order:
            grad.add_(entries[k][3], alpha=f[k])
        grad.div_(len(entries))
        lr = self.lr_fn(self.gradients_applied // self.lam)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.params.grad = grad
        self.optimizer.step()
        self.params.grad = None
        self.stats.update(taus, time.perf_counter() - t0)
        self._log({"apply": [[e[1], t] for e, t in zip(entries, taus)]})

    def on_push(self, worker: int, ts: int, grad) -> list:
        self._log({"push": worker, "ts": ts})
        return super().on_push(worker, ts, grad)

    def on_pull(self, worker: int) -> list:
        self._log({"pull": worker})
        return super().on_pull(worker)

    def on_done(self, worker: int) -> list:
        self._log({"done": worker})
        return super().on_done(worker)

    def state_dict(self) -> dict:
        return {"params": self.params, "optimizer": self.optimizer.state_dict(), "timestamp": self.timestamp,
                "gradients_applied": self.gradients_applied, "active": sorted(self.active),
                "computing": {int(w): int(j) for w, j in self.computing.items()},
                "buffer": [list(e) for e in self.buffer], "waiting": list(self.waiting), "seq": self.seq,
                "stats": self.stats.state_dict()}

    def load_state_dict(self, st: dict) -> None:
        with torch.no_grad():
            self.params.copy_(st["params"])
        self.optimizer.load_state_dict(st["optimizer"])
        self.timestamp, self.gradients_applied, self.seq = st["timestamp"], st["gradients_applied"], st["seq"]
        self.active = set(st["active"])
        self.computing = {int(w): int(j) for w, j in st["computing"].items()}
        self.buffer = [tuple(e) for e in st["buffer"]]
        self.waiting = list(st["waiting"])
        self.stats.load_state_dict(st["stats"])

