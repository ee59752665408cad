"""Emulated networks: the papers' 1-100 Gb clusters re-created on one Linux box with a real network
stack (namespaces, veth, bridge, tc), not a simulator. See :mod:`workbench.network.emulated`.

``network.name`` picks a member of :data:`NETWORKS`; each checks its own config before launch
(``loopback``: nothing to check; ``emulated``: :func:`check_config`)."""
from __future__ import annotations

import os
import re
import shutil

from workbench.core import ConfigError
from workbench.registry import Registry

_UNITS = {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12,
          "bps": 8, "kbps": 8e3, "mbps": 8e6, "gbps": 8e9}
_TIME = {"us": 1e-6, "ms": 1e-3, "s": 1.0}


def parse_rate(text: str, key: str = "network.bandwidth") -> float:
    """'1gbit' -> 1e9 bits/s (tc's units)."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]+)\s*", str(text))
    if not m or m.group(2).lower() not in _UNITS:
        raise ConfigError(f"invalid value {text!r} for {key}: a rate like 100mbit, 1gbit, 10gbit "
                          f"(units: {', '.join(_UNITS)})")
    value = float(m.group(1)) * _UNITS[m.group(2).lower()]
    if value <= 0:
        raise ConfigError(f"invalid value {text!r} for {key}: must be > 0")
    return value


def parse_time(text: str, key: str) -> float:
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(us|ms|s)\s*", str(text))
    if not m:
        raise ConfigError(f"invalid value {text!r} for {key}: a duration like 0ms, 5ms, 100us")
    return float(m.group(1)) * _TIME[m.group(2)]


def check_config(cfg) -> None:
    """Everything an emulated run needs, checked before anything starts."""
    n, c = cfg.network, cfg.cluster
    parse_rate(n.bandwidth)
    parse_time(n.latency, "network.latency")
    parse_time(n.jitter, "network.jitter")
    nodes = c.nproc
    for k, rate in n.node_bandwidth.items():
        if not str(k).isdigit() or not 0 <= int(k) < nodes:
            raise ConfigError(f"invalid key {k!r} in network.node_bandwidth: node indices are 0..{nodes - 1}")
        parse_rate(rate, f"network.node_bandwidth.{k}")
    if not re.fullmatch(r"(10|172\.(1[6-9]|2[0-9]|3[01])|192\.168)(\.\d{1,3}){1,2}", n.subnet) or n.subnet.count(".") != 2:
        raise ConfigError(f"invalid value {n.subnet!r} for network.subnet: the first three octets of a private /24, "
                          "e.g. 10.213.0")
    if nodes > 250:
        raise ConfigError(f"invalid value {nodes} for cluster.nproc: an emulated network holds at most 250 nodes")
    if c.nnodes != 1:
        raise ConfigError(f"invalid value {c.nnodes} for cluster.nnodes: network=emulated makes every rank its own "
                          "node; set cluster.nproc to the number of nodes")
    from workbench.dist import choose_backend
    if nodes > 1 and choose_backend(c) == "nccl":  # each node's one rank is its local rank 0, so on GPU 0
        raise ConfigError(f"invalid value {c.nproc} for cluster.nproc: network=emulated puts every node's rank on "
                          "GPU 0 and NCCL takes a GPU per rank; set cluster.backend=gloo")
    require_host("'emulated' for network.name", "use network=loopback")


def require_host(what: str, instead: str) -> None:
    """What the emulated network needs of this machine (root, iproute2), or a one-line error about
    ``what`` (the value and its key) that suggests ``instead``."""
    if os.geteuid() != 0:
        raise ConfigError(f"invalid value {what}: needs root (network namespaces and tc); run as root or {instead}")
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            raise ConfigError(f"invalid value {what}: `{tool}` not found; install iproute2")


class Network:
    """A network a run's ranks talk over; ``validate(cfg)`` runs before anything starts."""

    @staticmethod
    def validate(cfg) -> None:
        pass


class Emulated(Network):
    validate = staticmethod(check_config)


NETWORKS: Registry[Network] = Registry("network", key="network.name")
NETWORKS.register("loopback")(Network())
NETWORKS.register("emulated")(Emulated())
