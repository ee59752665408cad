"""Each rank's threads on its own cores (``testbed.pin=true``; off by default): which cores, and that
a run's ranks are pinned where asked and the ranks fit the cores, and not where they do not or by
default (behind the emulated links: tests/test_network.py); a pinned rank's gloo device threads under
``SCHED_BATCH`` (``workbench.dist.yield_gloo_loops``)."""
import os
import subprocess
import sys

import pytest

from conftest import launch_run
from workbench.dist import GLOO_LOOP_SCHED, rank_cores


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
    run = launch_run(ov + ["testbed.pin=true"])
    assert run.summary["cores"] == allowed[:len(allowed) // 2]  # read back from the kernel in rank 0
    assert run.summary["gloo_loop_sched"] == [GLOO_LOOP_SCHED]
    default = launch_run(ov)
    assert default.summary["cores"] is None  # the default: not pinned
    assert default.summary["gloo_loop_sched"] == ["other"]  # as started
    if len(allowed) < 3:
        assert launch_run(ov + ["testbed.pin=true", "cluster.nproc=3"]).summary["cores"] is None


def test_every_gloo_device_thread_of_a_process_yields():
    """A process group of its own (gloo, one rank) and another made by ``workbench.dist.new_group``
    in a pinned process: each has a device thread, and both end under ``SCHED_BATCH``, read back, at
    the nice they started with."""
    code = (
        "import os, time, torch.distributed as dist\n"
        "from workbench import dist as wd\n"
        "dist.init_process_group('gloo', init_method='tcp://127.0.0.1:0', rank=0, world_size=1)\n"
        "while not wd.gloo_loops():  # the device thread names itself once it runs\n"
        "    time.sleep(0.01)\n"
        "before = wd.gloo_loop_sched()\n"
        "assert len(wd.yield_gloo_loops(expected=1)) == 1, wd.gloo_loops()\n"
        "wd._pinned = True\n"
        "wd.new_group([0])\n"
        "print(before, len(wd.gloo_loops()), wd.gloo_loop_sched(),\n"
        "      sorted({os.getpriority(os.PRIO_PROCESS, t) for t in wd.gloo_loops()}))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    start = os.getpriority(os.PRIO_PROCESS, 0)
    assert out.stdout.split("\n")[0] == f"['other'] 2 ['{GLOO_LOOP_SCHED}'] [{start}]"
