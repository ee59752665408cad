"""Each rank's threads on its own cores (``cluster.pin=true``; off by default): which cores, and that
a run's ranks are pinned where asked and the ranks fit the cores, and not where they do not, by
default, or behind the emulated links (tests/test_network.py)."""
import os

import pytest

from conftest import launch_run
from workbench.dist import rank_cores


def test_each_rank_takes_its_own_share_of_the_allowed_cores():
    assert rank_cores(0, 2, {0, 1}) == [0]
    assert rank_cores(1, 2, {1, 0}) == [1]
    assert rank_cores(1, 2, range(8)) == [4, 5, 6, 7]
    assert rank_cores(1, 2, {2, 5, 7, 9}) == [7, 9]  # the process's affinity, not 0..n-1
    assert rank_cores(2, 3, range(8)) == [4, 5]  # 8 // 3 each: two cores left to the system
    assert rank_cores(0, 3, {0, 1}) is None  # more ranks than cores: two would share one
    assert rank_cores(2, 2, {0, 1}) is None


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 cores to pin 2 ranks")
def test_a_run_pins_its_ranks_where_they_fit(run_overrides):
    ov = run_overrides + ["cluster.nproc=2", "trainer.max_steps=2", "trainer.eval_every=1000"]
    allowed = sorted(os.sched_getaffinity(0))
    run = launch_run(ov + ["cluster.pin=true"])
    assert run.summary["cores"] == allowed[:len(allowed) // 2]  # read back from the kernel in rank 0
    assert launch_run(ov).summary["cores"] is None  # the default: not pinned
    if len(allowed) < 3:
        assert launch_run(ov + ["cluster.pin=true", "cluster.nproc=3"]).summary["cores"] is None
