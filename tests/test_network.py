"""network=emulated: real namespaces, veth links and tc shaping; one elastic agent per namespace;
nothing left behind, also after a failure. Needs root and iproute2 (CI runs as root)."""
import os
import subprocess

import pytest

import workbench
from conftest import launch_run
from workbench.config import ConfigError, validate


def leftovers():
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [l for l in out.splitlines() if l.startswith("wb")]


def test_bad_network_values_fail_before_launch():
    for override, key in (("network.bandwidth=fast", "network.bandwidth"), ("network.latency=5", "network.latency"),
                          ("network.subnet=8.8.8", "network.subnet")):
        with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
            validate(workbench.compose(["network=emulated", override]))
    with pytest.raises(ConfigError, match="node_bandwidth"):
        validate(workbench.compose(["network=emulated", "cluster.nproc=2", "+network.node_bandwidth.5=1mbit"]))


@pytest.mark.slow
@pytest.mark.root
@pytest.mark.timeout(400)
def test_emulated_run_completes_across_namespaces(run_overrides):
    run = launch_run(run_overrides + ["network=emulated", "network.bandwidth=500mbit", "cluster.nproc=2",
                                      "trainer.max_steps=10", "trainer.eval_every=5"])
    s = run.summary
    assert s["status"] == "completed" and s["world_size"] == 2 and s["steps"] == 10
    net = workbench.runs.store.read_json(run.path / "network.json")
    assert net["addresses"] == ["10.213.0.1", "10.213.0.2"]
    nodes = sorted(workbench.runs.store.read_json(p)["node"] for p in (run.path / "ranks").glob("rank*_node.json"))
    assert nodes == [0, 1]  # every rank ran in its own namespace
    assert leftovers() == []


@pytest.mark.slow
@pytest.mark.root
@pytest.mark.timeout(400)
def test_failed_emulated_run_cleans_up(run_overrides):
    with pytest.raises(workbench.RunFailed) as e:
        launch_run(run_overrides + ["network=emulated", "cluster.nproc=2", "trainer.max_steps=200",
                                    "inject.kill_rank=1", "inject.kill_at_step=3", "cluster.timeout_s=20"])
    assert e.value.run.status == "failed"
    assert leftovers() == []


@pytest.mark.slow
@pytest.mark.root
@pytest.mark.timeout(300)
def test_links_are_really_shaped():
    """At 50 Mbit/s a 4 MiB transfer cannot be faster than the link (loopback would be ~100x faster)."""
    from workbench.network.calibrate import calibrate
    res = calibrate(2, "50mbit", sizes_mb=(4,), repeats=1)
    for r in res["rows"]:
        assert r["achieved_bits_per_s"] < 1.15 * 50e6, r
    assert leftovers() == []


@pytest.mark.root
@pytest.mark.timeout(120)
def test_killed_owner_leaves_no_namespace():
    """`kill` (SIGTERM) of the process that owns a network still removes its namespaces."""
    import signal
    import sys
    code = ("from workbench.network.emulated import EmulatedNetwork; import time\n"
            "net = EmulatedNetwork(2, '100mbit').open(); print('up', flush=True); time.sleep(100)")
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "up" and len(leftovers()) == 3  # two nodes and the bridge
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=60) == 128 + signal.SIGTERM
    assert leftovers() == []


@pytest.mark.root
def test_emulated_ranks_share_the_cores(run_overrides):
    """Every emulated node is a process on this machine: threads per rank = cores // nodes, not
    cores // 1 (each agent sees one local rank)."""
    run = launch_run(run_overrides + ["network=emulated", "cluster.nproc=2", "trainer.max_steps=2", "testbed.pin=true"])
    assert run.summary["threads_per_rank"] == max(1, (os.cpu_count() or 1) // 2)
    # each node's rank on its own core, as host rank <node> of WORKBENCH_HOST_RANKS (workbench.dist.init)
    allowed = sorted(os.sched_getaffinity(0))
    assert run.summary["cores"] == (allowed[:len(allowed) // 2] if len(allowed) >= 2 else None)
