"""The cost of every collective the trainers use, once: time (α-β model) and bytes (the meter's
exact counts). Every other model in :mod:`workbench.perfmodel` prices its communication here.

Time, with α the latency per message (s) and β the bandwidth of one node's link (bytes/s):

=================================  ===========================================================
ring all-reduce of n bytes, p      2(p−1)·α + 2(p−1)/p · n/β         (reduce-scatter + all-gather)
all-gather of n bytes each, p      (p−1)·α·m + (p−1) · n/β           (m collectives per bucket)
point-to-point of n bytes          α + n/β
PS push (or pull), W workers,      max(2α + n/β, W·(2α + n/(S·β)))  (header + payload per server;
S servers, n bytes per worker                                         a server takes the W workers'
                                                                      messages one after another)
a server's busy time per exchange  2α + n/(S·β) + max(0, n/S − B)/β  (the push in; a reply of up to
                                                                      B bytes, the kernel's send
                                                                      buffer, drains while the
                                                                      server takes the next push)
=================================  ===========================================================

Bytes per rank (what :class:`workbench.meter.Meter` records, floored to whole bytes as it does):
all-reduce sent = received = ⌊2(p−1)·n/p⌋; all-gather sent (p−1)·n; point-to-point n.

Units: bytes, seconds, bytes per second. This module imports nothing from the project: the meter,
the trainers and the planner all sit above it.
"""
from __future__ import annotations

import math


def allreduce_time(nbytes: float, p: int, bandwidth: float, latency: float = 0.0, messages: float = 1.0) -> float:
    """Ring all-reduce: 2(p−1) steps of n/p bytes each (``messages`` collectives pay the latency)."""
    if p <= 1:
        return 0.0
    return 2 * (p - 1) * latency * messages + 2 * nbytes * (p - 1) / (p * bandwidth)


def allgather_time(nbytes: float, p: int, bandwidth: float, latency: float = 0.0, messages: float = 1.0) -> float:
    """Ring all-gather of ``nbytes`` from every rank: each receives (p−1)·n bytes in p−1 steps."""
    if p <= 1:
        return 0.0
    return (p - 1) * latency * messages + (p - 1) * nbytes / bandwidth


def p2p_time(nbytes: float, bandwidth: float, latency: float = 0.0) -> float:
    """One point-to-point message."""
    return latency + nbytes / bandwidth


PS_MESSAGES = 2  # a push (and a reply) is a header and a payload per server (workbench/ps/protocol.py)


def ps_transfer_time(nbytes: float, workers: int, servers: int, bandwidth: float, latency: float = 0.0) -> float:
    """A worker's push (or pull) of ``nbytes`` spread over ``servers`` shards while all ``workers``
    do the same. The worker sends a header and its shard to every server at once (its link carries
    n bytes); a server receives header then payload from one worker at a time (its loop is serial,
    ``workbench/ps/server.py``), so it spends W·(2α + n/(Sβ)) on a round of all workers (incast:
    its link carries W/S workers' shards, and it pays every message's latency in turn). The slower
    side sets the time."""
    if workers < 1 or servers < 1:
        raise ValueError(f"a parameter server needs workers >= 1 and servers >= 1, got {workers}, {servers}")
    worker_side = PS_MESSAGES * latency + nbytes / bandwidth
    server_side = workers * (PS_MESSAGES * latency + nbytes / (servers * bandwidth))
    return max(worker_side, server_side)


# Bytes a send may leave in the kernel before it returns: Linux's TCP send buffer grows (autotuning) up
# to net.ipv4.tcp_wmem's maximum, 4 MiB by default (and on this machine).
SEND_BUFFER = 4 * 2**20


def server_service_time(nbytes: float, servers: int, bandwidth: float, latency: float = 0.0,
                        send_buffer: float = SEND_BUFFER) -> float:
    """A server's busy time for one worker's exchange: its shard of the push in, a header and a
    payload, 2α + n/(S·β) (the loop posts one receive at a time and gloo moves a payload only into a
    posted receive, so pushes arrive one after another); then its reply. The reply's send returns
    once the bytes are in the kernel's socket buffer, so a reply that fits drains on the outgoing
    half of the server's link while the server already receives the next push; only the part of a
    shard that does not fit, max(0, n/S − B)/β, holds the server. With asynchronous workers the
    servers serve exchanges one at a time; this is the service time of that queue.

    Measured (docs/planner.md), the servers' timelines on emulated links, 2 workers: the small CNN's
    605 KB reply at 50 Mbit/s returned 1.2 ms after its push arrived (draining takes 101 ms), AlexNet's
    228 MB at 500 Mbit/s held the server 3.8 s, its whole transfer
    (docs/notes/2026-12-06-perfmodel-history.md)."""
    shard = nbytes / servers
    return PS_MESSAGES * latency + shard / bandwidth + max(0.0, shard - send_buffer) / bandwidth


# ---------------------------------------------------------------------------------------------
# Bytes per rank: the meter's exact formulas (workbench/meter.py)

def allreduce_bytes(nbytes: int, p: int) -> int:
    """Bytes one rank sends (and receives) in a ring all-reduce of ``nbytes`` (floored)."""
    return 2 * (p - 1) * int(nbytes) // p if p > 1 else 0


def allgather_bytes(nbytes: int, p: int) -> int:
    """Bytes one rank sends in an all-gather of its ``nbytes`` (and receives, if all are equal)."""
    return (p - 1) * int(nbytes)


def allgather_varlen_bytes(nbytes: int, p: int) -> int:
    """An all-gather of unequal lengths: the sizes (int64 each) are exchanged first."""
    return (p - 1) * (int(nbytes) + 8)


GBIT = 1e9 / 8  # bytes per second in one Gbit/s


def bits(bytes_per_s: float) -> float:
    return 8 * bytes_per_s if bytes_per_s is not None and math.isfinite(bytes_per_s) else bytes_per_s
