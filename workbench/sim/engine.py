"""The event queue and the simulated clock: one heap of (time, sequence, event), popped in time
order; the sequence number breaks ties in the order events were scheduled, so a run is
deterministic. Events are plain tuples, not objects: a 1024-learner run schedules millions."""
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
