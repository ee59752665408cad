"""Progress of a profile while its ranks measure: rank 0 reports each stage it has timed to the
parent through the queue the parent already reads for the result (:mod:`.spawn`), so a rank that
dies leaves nothing to wait for beyond what the parent's wait already bounds.

Events are dicts ``{"progress": {"stage", "done", "total", "elapsed_s"}}``: ``done`` stages of an
estimated ``total`` (refined once the loop count is known), ``elapsed_s`` since the ranks started.
The parent hands them to a callback; :func:`reporter` makes the default one: a tqdm bar on a
terminal (a widget in a notebook, ``tqdm.auto``), one line per stage in a log or CI (no tty).
"""
from __future__ import annotations

import sys
import time
from contextlib import contextmanager
from typing import Callable, Optional


class RankProgress:
    """Rank 0's side: after each stage, one event on ``queue`` (every other rank, or no queue:
    nothing is sent). ``total``: the stages expected, :meth:`plan` to refine it."""

    def __init__(self, queue=None, total: int = 0) -> None:
        self.queue, self.total, self.done = queue, total, 0
        self.t0 = time.monotonic()

    def plan(self, total: int) -> None:
        self.total = max(total, self.done)

    @contextmanager
    def stage(self, name: str):
        yield
        self.done += 1
        self.total = max(self.total, self.done)
        if self.queue is not None:
            self.queue.put({"progress": {"stage": name, "done": self.done, "total": self.total,
                                         "elapsed_s": time.monotonic() - self.t0}})


QUIET = RankProgress()  # a rank that does not report


def remaining_s(event: dict) -> Optional[float]:
    """Seconds left at the mean pace of the stages so far (None before the first)."""
    done, total = event["done"], event["total"]
    return event["elapsed_s"] / done * (total - done) if done else None


def _is_notebook() -> bool:
    try:
        from IPython import get_ipython
        shell = get_ipython()
    except ImportError:  # pragma: no cover - IPython is a dependency of the notebooks
        return False
    return shell is not None and shell.__class__.__name__ == "ZMQInteractiveShell"


class _Bar:
    """A tqdm bar over the stages (a widget in a notebook), the stage and what remains beside it."""

    def __init__(self, title: str) -> None:
        from tqdm.auto import tqdm
        self.bar = tqdm(total=1, desc=title, unit="stage", leave=False)

    def __call__(self, event: dict) -> None:
        if event is None:
            self.bar.close()
            return
        self.bar.total = event["total"]
        self.bar.update(event["done"] - self.bar.n)
        self.bar.set_postfix_str(event["stage"])


class _Lines:
    """One line per stage, for a log or CI: what was timed, how far, and about how long is left."""

    def __init__(self, title: str, log: Callable[[str], None]) -> None:
        self.title, self.log = title, log

    def __call__(self, event: dict) -> None:
        if event is None:
            return
        left = remaining_s(event)
        self.log(f"{self.title}: {event['done']}/{event['total']} {event['stage']} "
                 f"({event['elapsed_s']:.0f} s, about {left:.0f} s left)")


def reporter(title: str, log: Callable[[str], None] = print) -> Callable[[Optional[dict]], None]:
    """The default progress callback: a bar where someone watches (a terminal on stderr, a
    notebook), else ``log`` once per stage. Called with each event, then with None at the end."""
    if _is_notebook() or sys.stderr.isatty():
        return _Bar(title)
    return _Lines(title, log)
