"""The event queue and the simulated clock: one heap of (time, sequence, event), popped in time
order; the sequence number breaks ties in the order events were scheduled, so a run is
deterministic. Events are plain tuples, not objects: a 1024-learner run schedules millions.

:class:`CorePool` is the shared host: a processor-sharing pool of cores whose jobs (compute,
message copies, server service) are re-timed whenever the set of active jobs changes."""
from __future__ import annotations

import heapq
from typing import Tuple


class EventQueue:
    def __init__(self) -> None:
        self.now = 0.0
        self._heap: list = []
        self._seq = 0
        self.events = 0  # popped so far

    def at(self, t: float, *event) -> None:
        """Schedule ``event`` at simulated time ``t`` (never before now: time only moves forward)."""
        if t < self.now:
            raise ValueError(f"event at {t} scheduled before the clock's {self.now}")
        self._seq += 1
        heapq.heappush(self._heap, (t, self._seq, event))

    def pop(self) -> Tuple:
        """The next event; the clock moves to its time."""
        t, _, event = heapq.heappop(self._heap)
        self.now = t
        self.events += 1
        return event

    def __len__(self) -> int:
        return len(self._heap)


POOL = "pool"  # the kind of a pool's completion event: (POOL, pool, version)


class CorePool:
    """A processor-sharing pool of ``cores`` cores: with k jobs active each progresses at
    min(1, cores/k) (a job is one thread, so it never runs faster than one core).

    Every active job progresses at the same rate, so the order in which they finish never changes;
    only *when* does, each time a job starts or ends. The pool therefore keeps one virtual clock
    ``v`` (the work every active job has done since the pool began) and a heap of each job's finish
    point on it, and schedules only the earliest completion as a ``(POOL, pool, version)`` event on the
    queue; a change of the active set bumps the version, so an earlier event popped later is stale
    and ignored (lazy invalidation). Jobs of equal work started together finish in one event.
    """

    def __init__(self, q: EventQueue, cores: int) -> None:
        self.q, self.cores = q, cores
        self.v = 0.0  # virtual work done by each job active since the pool began
        self.t = 0.0  # when v was last brought up to date
        self._jobs: list = []  # heap of (v at which it finishes, sequence, token)
        self._seq = 0
        self.version = 0

    def __len__(self) -> int:
        return len(self._jobs)

    def _rate(self) -> float:
        return min(1.0, self.cores / len(self._jobs)) if self._jobs else 0.0

    def _advance(self) -> None:
        now = self.q.now
        self.v += (now - self.t) * self._rate()
        self.t = now

    def _reschedule(self) -> None:
        self.version += 1
        if self._jobs:
            left = self._jobs[0][0] - self.v
            self.q.at(self.t + (left / self._rate() if left > 0 else 0.0), POOL, self, self.version)

    def start(self, work: float, token) -> None:
        """Start a job of ``work`` CPU-seconds now; ``token`` comes back from :meth:`fire` when it ends."""
        self._advance()
        self._seq += 1
        heapq.heappush(self._jobs, (self.v + work, self._seq, token))
        self._reschedule()

    def fire(self, version: int) -> list:
        """The tokens of the jobs that end at this ``(POOL, …)`` event, in the order they started
        (none if the event is stale)."""
        if version != self.version:
            return []
        self._advance()
        done = []
        # the rounding of v's sums must not leave a job a femtosecond short of its end
        eps = 1e-12 * max(1.0, abs(self.v))
        while self._jobs and self._jobs[0][0] <= self.v + eps:
            done.append(heapq.heappop(self._jobs))
        if done:
            self.v = max(self.v, done[-1][0])
        self._reschedule()
        return [tok for _, _, tok in sorted(done, key=lambda j: j[1])]

