"""The profiler reports its progress while its ranks measure: rank 0 sends an event per stage it
has timed to the parent, which hands each to a callback (a bar on a terminal, a line in a log)."""
from __future__ import annotations

import time

import pytest

from workbench.perfmodel.profile.progress import remaining_s, reporter


def test_a_log_gets_one_line_per_stage_with_what_remains():
    lines = []
    show = reporter("profiling small_cnn", log=lines.append)  # pytest's stderr is no tty: lines
    show({"stage": "ddp", "done": 3, "total": 12, "elapsed_s": 6.0})
    show(None)
    assert lines == ["profiling small_cnn: 3/12 ddp (6 s, about 18 s left)"]
    assert remaining_s({"stage": "x", "done": 0, "total": 5, "elapsed_s": 0.1}) is None


@pytest.mark.slow  # a real profile: about 100 s on this shared machine
def test_the_parent_hears_each_loop_before_the_profile_is_returned():
    """A real profile of the small CNN on 2 ranks: the callback hears the stages as rank 0 times
    them (in order, the loops among them, spread over the run rather than at its end), and the
    estimated total is the count of stages that were reported."""
    import workbench
    from workbench.perfmodel.profile import measure
    cfg = workbench.compose(["model=small_cnn", "cluster.nproc=2"])
    heard = []
    prof = measure(cfg, 2, progress=lambda e: heard.append((time.monotonic(), e)))
    events = [e for _, e in heard]
    assert [e["done"] for e in events] == list(range(1, len(events) + 1))
    loops = [i for i, e in enumerate(events) if e["stage"] in ("aligned", "ddp") or e["stage"].startswith("collectives/")]
    assert len(loops) >= 2
    assert events[-1]["done"] == events[-1]["total"] and prof.loops["ddp"] > 0
    first = loops[0]
    spread_ranks = events[-1]["elapsed_s"] - events[first]["elapsed_s"]
    spread_heard = heard[-1][0] - heard[first][0]
    assert spread_ranks > 0 and spread_heard >= 0.5 * spread_ranks, (spread_heard, spread_ranks)
