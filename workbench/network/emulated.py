"""An emulated cluster on one Linux machine.

Each node k gets its own network namespace ``wb<id>n<k>`` holding one end of a veth pair
(``eth0``, address ``<subnet>.<k+1>/24``); the other ends sit in a bridge namespace ``wb<id>br``,
attached to a bridge. Both directions of every link are shaped with tc: a token bucket (``tbf``) at
the node's rate, and ``netem`` for latency/jitter when asked. Nothing is created in the root
namespace, the addresses are private to the run's namespaces, and :meth:`EmulatedNetwork.close`
(also on errors, interrupts, and at interpreter exit) deletes the namespaces, which removes their
links and qdiscs with them.

    with EmulatedNetwork(nodes=4, bandwidth="1gbit") as net:
        net.popen(0, ["python", "-c", "..."])          # runs inside node 0's namespace
"""
from __future__ import annotations

import atexit
import os
import signal
import subprocess
import threading
import uuid
from typing import Dict, List, Optional

from workbench.network import parse_rate, parse_time


class NetworkSetupError(RuntimeError):
    pass


def tbf_burst(rate_bps: float) -> int:
    """The token bucket's size in bytes for a link of ``rate_bps``: at least one MTU-sized packet
    and a timer tick's (4 ms) worth of bytes at the rate. The planner's model of these links
    passes that many bytes at the host's speed after the link has idled (``perfmodel.paradigms``)."""
    return max(16_000, int(rate_bps / 8 / 250))


# What tc's rate counts: whole frames. A full TCP segment on these links (MTU 1500, Linux's
# timestamps option on) carries 1448 payload bytes in a 1514-byte frame (Ethernet 14, IP 20,
# TCP 32), so a link shaped to R bits/s moves R/8 · 1448/1514 bytes of payload a second.
MTU, FRAME_HEADERS, TCP_IP_HEADERS = 1500, 14, 52
PAYLOAD_PER_FRAME = (MTU - TCP_IP_HEADERS) / (MTU + FRAME_HEADERS)


def payload_rate(rate_bps: float) -> float:
    """Payload bytes/s of a link shaped to ``rate_bps`` (long TCP transfers: full segments)."""
    return rate_bps / 8 * PAYLOAD_PER_FRAME


def _run(cmd: List[str]) -> str:
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise NetworkSetupError(f"`{' '.join(cmd)}` failed: {p.stderr.strip() or p.stdout.strip()}")
    return p.stdout


def _exit_on_sigterm(signum, frame):
    raise SystemExit(128 + signum)


def namespaces() -> List[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


class EmulatedNetwork:
    IFNAME = "eth0"  # the node's interface inside its namespace (GLOO_SOCKET_IFNAME)

    def __init__(self, nodes: int, bandwidth: str = "1gbit", latency: str = "0ms", jitter: str = "0ms",
                 node_bandwidth: Optional[Dict[str, str]] = None, subnet: str = "10.213.0") -> None:
        self.nodes = nodes
        self.rates = [parse_rate((node_bandwidth or {}).get(str(k), bandwidth)) for k in range(nodes)]
        self.rate_text = [(node_bandwidth or {}).get(str(k), bandwidth) for k in range(nodes)]
        self.latency, self.jitter = latency, jitter
        self.delay_s = parse_time(latency, "network.latency")
        self.jitter_s = parse_time(jitter, "network.jitter")
        self.subnet = subnet
        self.id = uuid.uuid4().hex[:6]
        self.bridge_ns = f"wb{self.id}br"
        self.node_ns = [f"wb{self.id}n{k}" for k in range(nodes)]
        self._created: List[str] = []
        self._procs: List[subprocess.Popen] = []
        self._sigterm = None

    def address(self, k: int) -> str:
        return f"{self.subnet}.{k + 1}"

    # -- set-up / tear-down ---------------------------------------------------------------------------
    def _shape(self, ns: str, dev: str, rate_text: str, rate: float) -> None:
        burst = tbf_burst(rate)
        _run(["tc", "-n", ns, "qdisc", "add", "dev", dev, "root", "handle", "1:", "tbf", "rate", rate_text,
              "burst", str(burst), "latency", "50ms"])
        if self.delay_s > 0 or self.jitter_s > 0:
            cmd = ["tc", "-n", ns, "qdisc", "add", "dev", dev, "parent", "1:1", "handle", "10:", "netem",
                   "delay", self.latency]
            if self.jitter_s > 0:
                cmd += [self.jitter]
            try:
                _run(cmd)
            except NetworkSetupError as e:
                raise NetworkSetupError(f"network.latency/jitter need the kernel's netem qdisc, which this machine "
                                        f"lacks ({e}); use network.latency=0ms or load sch_netem") from None

    def open(self) -> "EmulatedNetwork":
        atexit.register(self.close)
        if threading.current_thread() is threading.main_thread():
            # SIGTERM would end the interpreter without unwinding (no finally, no atexit): turn it into
            # SystemExit so that close() runs and no namespace outlives a `kill`
            self._sigterm = signal.signal(signal.SIGTERM, _exit_on_sigterm)
        try:
            _run(["ip", "netns", "add", self.bridge_ns])
            self._created.append(self.bridge_ns)
            _run(["ip", "-n", self.bridge_ns, "link", "add", "br0", "type", "bridge"])
            _run(["ip", "-n", self.bridge_ns, "link", "set", "br0", "up"])
            for k, ns in enumerate(self.node_ns):
                _run(["ip", "netns", "add", ns])
                self._created.append(ns)
                peer = f"p{k}"
                _run(["ip", "-n", ns, "link", "add", self.IFNAME, "type", "veth", "peer", "name", peer,
                      "netns", self.bridge_ns])
                _run(["ip", "-n", ns, "addr", "add", f"{self.address(k)}/24", "dev", self.IFNAME])
                _run(["ip", "-n", ns, "link", "set", "lo", "up"])
                _run(["ip", "-n", ns, "link", "set", self.IFNAME, "up"])
                _run(["ip", "-n", self.bridge_ns, "link", "set", peer, "master", "br0"])
                _run(["ip", "-n", self.bridge_ns, "link", "set", peer, "up"])
                self._shape(ns, self.IFNAME, self.rate_text[k], self.rates[k])  # node -> cluster
                self._shape(self.bridge_ns, peer, self.rate_text[k], self.rates[k])  # cluster -> node
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        for p in self._procs:
            if p.poll() is None:
                p.kill()
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    pass
        self._procs.clear()
        for ns in reversed(self._created):
            # `ip netns pids` finds stragglers (e.g. ranks an agent could not stop) that keep a namespace alive
            pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), 9)
                except (ProcessLookupError, ValueError):
                    pass
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        self._created.clear()
        atexit.unregister(self.close)
        if self._sigterm is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._sigterm)
            self._sigterm = None

    def __enter__(self) -> "EmulatedNetwork":
        return self.open()

    def __exit__(self, *exc) -> None:
        self.close()

    # -- running things inside ------------------------------------------------------------------------
    def popen(self, k: int, cmd: List[str], env: Optional[dict] = None, **kw) -> subprocess.Popen:
        """Start ``cmd`` inside node ``k``'s namespace (gloo pinned to its interface)."""
        e = {**os.environ, **(env or {}), "GLOO_SOCKET_IFNAME": self.IFNAME, "WORKBENCH_NODE": str(k)}
        p = subprocess.Popen(["ip", "netns", "exec", self.node_ns[k], *cmd], env=e, **kw)
        self._procs.append(p)
        return p

    def describe(self) -> dict:
        return {"nodes": self.nodes, "bandwidth": self.rate_text, "latency": self.latency, "jitter": self.jitter,
                "addresses": [self.address(k) for k in range(self.nodes)], "namespaces": self.node_ns}
