"""The push/pull protocol between workers and parameter servers, over metered point-to-point.

One exchange, worker -> every server s:

    worker                                   server s
      post irecv(reply header), irecv(reply payload)        (before sending: a server's reply
      isend header [kind, timestamp, step, 0]   ─▶  recv header from any source
      isend payload (its shard of the model)    ─▶  recv payload from that worker
                                                     ... update rule decides when to answer ...
      reply header [timestamp, status, 0, 0]   ◀─   isend
      reply payload (its shard)                ◀─   isend

Posting the receives before the sends means a server's reply never waits on a worker that is
still sending to another server, so no cycle of blocking sends can form with several servers.

A checkpoint (``checkpoint.every``) is a barrier through the servers: after step k every worker
sends ``CKPT`` (header[2] = k); each server answers once all active workers have arrived, saving its
shard and clocks at that instant, when no gradient is in flight. A gradient rule answers with its
weights, as after a push, so a worker resumes on weights the server's clock vouches for (the reply
header's third field says whether a payload follows).

At the end every worker sends ``DONE``; rank 0 then polls each server with ``FINAL``, answered
``PENDING`` while other workers still train and, once all are done, with the final weights
(category ``ps_final``) and the server's statistics. Polling keeps every receive within the
timeout however far behind a straggler is.

Compressed (:mod:`workbench.ps.compression`, ``compressor=…`` and ``compressor.pull=…``): the push
header's fourth field is the payload's length in bytes, and the payload its raw bytes (any length,
none at all when it is empty); a compressed pull's reply header carries the length the same way. A
worker cannot post the receive of a reply whose length it does not know, so it waits for the
servers' reply headers in server order and receives each reply's payload right after its header: a
server blocked on a reply to this worker is then always either the one it waits on or one it reaches
next, and no cycle forms.

Categories: ``grad_push`` (gradients up; EASGD pushes parameters as ``param_push``), ``param_pull``
(parameters down) and ``ps_control`` (the 32-byte headers, clocks and statistics), so the payload
categories hold exactly the model's bytes. Every wait has the meter's timeout (``cluster.timeout_s``).

Timestamps are the servers' clocks: a server's timestamp is the number of updates it has applied;
a push carries the timestamp of the weights its gradient was computed on, so the server measures
the gradient's staleness on arrival of the update.
"""
from __future__ import annotations

import time
from typing import List, Optional, Sequence

import torch

from workbench.meter import Meter
from workbench.ps import stats as S
from workbench.ps.sharding import ShardLayout

# message kinds (header[0])
PUSH, PULL, DONE, STATS, FINAL, CKPT = 1, 2, 3, 4, 5, 6
# tags
TAG_HDR, TAG_DATA, TAG_REPLY_HDR, TAG_REPLY_DATA, TAG_STATS = 11, 12, 13, 14, 15
HEADER = 4  # int64 fields per header
# reply status (reply header[1])
APPLIED, DROPPED, PENDING = 0, 1, 2  # PENDING: other workers still run (final poll)
CONTROL = "ps_control"
FINAL_CATEGORY = "ps_final"  # the end-of-run pull of the final weights (not a training step)


def header(*values: int) -> torch.Tensor:
    h = torch.zeros(HEADER, dtype=torch.int64)
    h[: len(values)] = torch.tensor(values, dtype=torch.int64)
    return h


class PSClient:
    """A worker's side of the protocol: one flat buffer per server, one clock per server.

    ``codecs`` (:class:`workbench.ps.compression.WorkerCodecs`, None: dense): the push's codecs,
    and the pull's where it is compressed; then ``pull_bufs`` hold the replica of each shard the
    server keeps for this worker (:meth:`sync_replicas` sets them from the model)."""

    def __init__(self, meter: Meter, layout: ShardLayout, server_ranks: Sequence[int], group=None,
                 push_category: str = "grad_push", pull_category: str = "param_pull", codecs=None) -> None:
        self.meter, self.layout, self.servers, self.group = meter, layout, list(server_ranks), group
        self.push_category, self.pull_category = push_category, pull_category
        self.codecs = codecs
        self.timestamps = [0] * len(self.servers)  # the servers' clocks on the weights we hold
        self.pull_bufs = [torch.empty(layout.numel(s)) for s in range(len(self.servers))]
        self.push_bufs = [torch.empty(layout.numel(s)) for s in range(len(self.servers))]
        self.last_status: List[int] = [APPLIED] * len(self.servers)

    @property
    def compressed_push(self) -> bool:
        return self.codecs is not None and self.codecs.push is not None

    @property
    def compressed_pull(self) -> bool:
        return self.codecs is not None and self.codecs.pull is not None

    def sync_replicas(self, params: Sequence[torch.Tensor]) -> None:
        """Set each shard's replica to ``params`` (the model the servers' replicas equal: at the
        start, and after a checkpoint is loaded)."""
        for s in range(len(self.servers)):
            self.layout.flatten(params, s, self.pull_bufs[s])

    def _post_sends(self, kind: int, step: int, payload: Optional[Sequence[torch.Tensor]]) -> list:
        """Post the header (and payload) to every server; header[3] is a compressed payload's length."""
        works = []
        for s, rank in enumerate(self.servers):
            size = payload[s].numel() if payload is not None and self.compressed_push else 0
            h = header(kind, self.timestamps[s], step, size)
            works.append((h, self.meter.isend(h, rank, CONTROL, TAG_HDR, self.group)))
            if payload is not None and payload[s].numel():
                works.append((payload[s], self.meter.isend(payload[s], rank, self.push_category, TAG_DATA, self.group)))
        return works

    def _exchange(self, kind: int, step: int, payload: Optional[Sequence[torch.Tensor]],
                  reply: bool, reply_len: Optional[List[int]] = None) -> List[torch.Tensor]:
        if reply and reply_len is None and self.compressed_pull:
            return self._exchange_deltas(kind, step, payload)
        works, hdrs, outs = [], [], []
        g = self.group
        if reply:
            for s, rank in enumerate(self.servers):
                h = torch.zeros(HEADER, dtype=torch.int64)
                hdrs.append(h)
                works.append(self.meter.irecv(h, rank, CONTROL, TAG_REPLY_HDR, g))
                buf = self.pull_bufs[s] if reply_len is None else torch.empty(reply_len[s], dtype=torch.float64)
                outs.append(buf)
                cat = self.pull_category if reply_len is None else CONTROL
                if buf.numel():
                    works.append(self.meter.irecv(buf, rank, cat, TAG_REPLY_DATA, g))
        sends = self._post_sends(kind, step, payload)  # (tensor, work): the tensors stay alive until sent
        works += [w for _, w in sends]
        for w in works:
            w.wait()
        for s, h in enumerate(hdrs):
            if reply_len is None:
                self.timestamps[s] = int(h[0])
            self.last_status[s] = int(h[1])
        return outs

    def _exchange_deltas(self, kind: int, step: int, payload: Optional[Sequence[torch.Tensor]]) -> List[torch.Tensor]:
        """An exchange whose replies are compressed pulls: the reply headers are posted first, each
        reply's payload is received once its header says how long it is (in server order)."""
        hdrs, works = [], []
        for rank in self.servers:
            h = torch.zeros(HEADER, dtype=torch.int64)
            hdrs.append(h)
            works.append(self.meter.irecv(h, rank, CONTROL, TAG_REPLY_HDR, self.group))
        sends = self._post_sends(kind, step, payload)
        for s, (h, w) in enumerate(zip(hdrs, works)):
            w.wait()
            self._take_reply(s, h)
        for _, w in sends:
            w.wait()
        return self.pull_bufs

    def _take_reply(self, s: int, h: torch.Tensor) -> bool:
        """Server ``s``'s reply header ``h`` (received): note its clock and status, receive the
        weights it announces into ``pull_bufs[s]`` (dense, or a compressed delta added to the
        replica); returns whether weights came."""
        self.timestamps[s], self.last_status[s] = int(h[0]), int(h[1])
        rank = self.servers[s]
        if not int(h[2]) or not self.pull_bufs[s].numel():
            return False
        if not self.compressed_pull:
            self.meter.recv(self.pull_bufs[s], rank, self.pull_category, TAG_REPLY_DATA, self.group)
            return True
        wire = torch.empty(int(h[3]), dtype=torch.uint8)
        if wire.numel():
            self.meter.recv(wire, rank, self.pull_category, TAG_REPLY_DATA, self.group)
        self.pull_bufs[s].add_(self.codecs.decode_pull(wire, s, self.pull_bufs[s].numel(), int(h[0])))
        return True

    def push_pull(self, tensors: Sequence[torch.Tensor], into: Sequence[torch.Tensor], step: int = 0) -> None:
        """Push this worker's ``tensors`` (one per parameter: gradients, or for EASGD the
        parameters), receive each server's answer into ``into`` (the model's parameters).
        ``step`` (0-based) is the worker's step: a compressed push's codecs draw their randomness from it."""
        for s in range(len(self.servers)):
            self.layout.flatten(tensors, s, self.push_bufs[s])
        out = self.push_bufs
        if self.compressed_push:
            out = [self.codecs.encode(self.push_bufs[s], s, step) for s in range(len(self.servers))]
        self._exchange(PUSH, step, out, reply=True)
        for s in range(len(self.servers)):
            self.layout.unflatten_into(self.pull_bufs[s], into, s)

    def pull(self, into: Sequence[torch.Tensor]) -> None:
        self._exchange(PULL, 0, None, reply=True)
        for s in range(len(self.servers)):
            self.layout.unflatten_into(self.pull_bufs[s], into, s)

    def checkpoint(self, step: int, into: Sequence[torch.Tensor]) -> None:
        """The checkpoint barrier after ``step``: returns once every server has saved its state;
        a server that answers with weights has them loaded into ``into``."""
        for s, rank in enumerate(self.servers):
            self.meter.isend(header(CKPT, self.timestamps[s], step), rank, CONTROL, TAG_HDR, self.group).wait()
        for s, rank in enumerate(self.servers):
            h = torch.zeros(HEADER, dtype=torch.int64)
            self.meter.recv(h, rank, CONTROL, TAG_REPLY_HDR, self.group)
            if self._take_reply(s, h):
                self.layout.unflatten_into(self.pull_bufs[s], into, s)

    def stats(self, length: int) -> List[torch.Tensor]:
        """Each server's statistics vector (float64, ``length`` long; see ServerLoop.stats)."""
        return self._exchange(STATS, 0, None, reply=True, reply_len=[length] * len(self.servers))

    def done(self, into: Optional[Sequence[torch.Tensor]] = None, stats_len: int = S.LENGTH,
             poll_s: float = 0.05) -> List[torch.Tensor]:
        """Tell the servers this worker has finished. With ``into`` (rank 0, to save ``model.pt``),
        then poll each server until every worker has finished and receive the final parameters and
        the server's final statistics. Polling, rather than one long wait, keeps every receive
        under the meter's timeout however long the slowest worker still needs."""
        self._exchange(DONE, 0, None, reply=False)
        if into is None:
            return []
        stats = []
        for s, rank in enumerate(self.servers):
            while True:
                h = torch.zeros(HEADER, dtype=torch.int64)
                w = self.meter.irecv(h, rank, CONTROL, TAG_REPLY_HDR, self.group)
                self.meter.isend(header(FINAL), rank, CONTROL, TAG_HDR, self.group).wait()
                w.wait()
                if int(h[1]) != PENDING:
                    break
                time.sleep(poll_s)
            works = []
            if self.pull_bufs[s].numel():
                works.append(self.meter.irecv(self.pull_bufs[s], rank, FINAL_CATEGORY, TAG_REPLY_DATA, self.group))
            st = torch.zeros(stats_len, dtype=torch.float64)
            works.append(self.meter.irecv(st, rank, CONTROL, TAG_STATS, self.group))
            for w in works:
                w.wait()
            self.timestamps[s] = int(h[0])
            self.layout.unflatten_into(self.pull_bufs[s], into, s)
            stats.append(st)
        return stats
