"""``network=emulated``: one node per rank, each in its own network namespace behind a shaped link,
each started by its own elastic agent (torchrun), joined by a c10d rendezvous over the bridge —
exactly how the ranks of a real multi-node cluster start.

    sudo python -m workbench network=emulated network.bandwidth=1gbit cluster.nproc=4
    sudo python -m workbench network=emulated network.bandwidth=100mbit +network.node_bandwidth.3=10mbit

The namespaces, links and qdiscs are removed at the end, also when the run fails or is
interrupted. ``summary.json`` and ``network.json`` in the run directory record the emulated
topology; each rank's node index is in ``ranks/rank<r>_node.json``.
"""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

from workbench.runs import store as runstore
from workbench.starters import STARTERS, Starter


@STARTERS.register("emulated")
class EmulatedStarter(Starter):
    def check(self, cfg) -> None:
        from workbench.network import check_config
        check_config(cfg)

    def start(self, cfg, run_dir: Path) -> Optional[dict]:
        from workbench.network.emulated import EmulatedNetwork, NetworkSetupError
        n, c = cfg.network, cfg.cluster
        port = 29400
        net = EmulatedNetwork(c.nproc, n.bandwidth, n.latency, n.jitter, dict(n.node_bandwidth), n.subnet)
        try:
            net.open()
        except NetworkSetupError as e:
            net.close()
            return {"error": f"emulated network set-up failed: {e}", "failed_rank": None}
        runstore.write_json(run_dir / "network.json", net.describe())
        try:
            agents = []
            for k in range(c.nproc):
                log = open(run_dir / "logs" / f"agent_node{k}.log", "w")
                agents.append((net.popen(k, [
                    sys.executable, "-m", "torch.distributed.run", "--nnodes", str(c.nproc), "--nproc-per-node", "1",
                    "--rdzv-backend", "c10d", "--rdzv-endpoint", f"{net.address(0)}:{port}", "--rdzv-id", run_dir.name,
                    "--rdzv-conf", f"join_timeout={int(c.timeout_s)},read_timeout={int(c.timeout_s)},is_host={int(k == 0)}",
                    "--local-addr", net.address(k), "--max-restarts", str(c.max_restarts),
                    "--monitor-interval", str(c.monitor_interval_s),
                    "-m", "workbench.worker", "--run-dir", str(Path(run_dir).resolve())],
                    stdout=log, stderr=subprocess.STDOUT, env={"WORKBENCH_HOST_RANKS": str(c.nproc)}), log))
            return self._wait(agents, run_dir, c.timeout_s)
        finally:
            net.close()

    @staticmethod
    def _wait(agents, run_dir: Path, timeout_s: float) -> Optional[dict]:
        """Wait for every agent; after the first failure give the others a bounded time to notice
        (their collectives time out), then stop them."""
        first_fail, deadline = None, None
        while True:
            codes = [p.poll() for p, _ in agents]
            for k, code in enumerate(codes):
                if code not in (None, 0) and first_fail is None:
                    first_fail, deadline = k, time.monotonic() + min(timeout_s, 30)
            if all(code is not None for code in codes):
                break
            if deadline is not None and time.monotonic() > deadline:
                for p, _ in agents:
                    if p.poll() is None:
                        p.kill()
                break
            time.sleep(0.2)
        for _, log in agents:
            log.close()
        if first_fail is None:
            return None
        errors = sorted(Path(run_dir, "ranks").glob("rank*_error.json"),
                        key=lambda p: p.stat().st_mtime)
        if errors:
            e = runstore.read_json(errors[0]) or {}
            return {"error": f"rank {e.get('rank')} failed: {e.get('error')}", "failed_rank": e.get("rank"),
                    "failed_node": first_fail}
        return {"error": f"node {first_fail}'s agent exited with code {agents[first_fail][0].returncode} "
                         f"(log: logs/agent_node{first_fail}.log)", "failed_rank": None, "failed_node": first_fail}
