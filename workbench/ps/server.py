"""The server side: a message loop (:class:`ServerLoop`) around an update rule.

A server rank owns one shard of the parameters (see :mod:`workbench.ps.sharding`) and answers
workers until every worker has said it is done. The loop only moves bytes; *when* to answer and
*what* to do with a push is the update rule's business:

- :class:`workbench.ps.rules.GradientRule`: gradients in, optimizer on the server (``trainer=ps``,
  ``trainer=staleness``: hardsync, n-softsync, async, bounded staleness);
- ``ElasticRule`` in :mod:`workbench.trainers.easgd`: parameters in, elastic averaging of the centre.

A rule implements ``params`` (the shard, flat), ``timestamp``, ``on_push(worker, ts, payload)``,
``on_pull(worker)``, ``on_done(worker)``, ``on_barrier(worker)`` (a worker waits at a checkpoint)
and ``release_barrier(workers)`` — each returning the replies to send now as
``(worker, status, tensor)`` — ``finish()``, ``stats`` (a :class:`ServerStats`) and
``state_dict()``/``load_state_dict()`` (what a checkpoint must hold to continue). A worker whose
reply is withheld is blocked; the rule must release it once it can make progress, and a rule whose
every worker is waiting must always be able to (the bounded-staleness rule proves it in its tests).

With ``codecs`` (:class:`workbench.ps.compression.ServerCodecs`) the loop decodes compressed pushes
before the rule sees them, and turns the rule's replies into compressed pulls against each worker's
replica before they are sent (at a checkpoint, before the shard is saved, so that the replicas
saved are the weights the workers save); the rule never knows.
"""
from __future__ import annotations

from typing import Callable, List, Optional, Sequence, Tuple

import torch

from workbench.meter import Meter
from workbench.ps import protocol as P
from workbench.ps import stats as S

Reply = Tuple[int, int, torch.Tensor]  # (worker, status, the weights to send it)
Wire = Tuple[int, int, torch.Tensor, Optional[int]]  # ... what goes out, and a compressed payload's length


class ServerLoop:
    def __init__(self, meter: Meter, rule, worker_ranks: Sequence[int], group=None,
                 push_category: str = "grad_push", pull_category: str = "param_pull",
                 on_message: Optional[Callable[[int], None]] = None, expect_final: bool = True,
                 on_checkpoint: Optional[Callable[[int], None]] = None, codecs=None) -> None:
        self.meter, self.rule, self.group = meter, rule, group
        self.codecs = codecs  # compressed push / pull (None: dense)
        self.workers = list(worker_ranks)
        self.push_category, self.pull_category = push_category, pull_category
        self.on_message = on_message  # called with the rule's update count (fault injection)
        self.expect_final = expect_final
        self.on_checkpoint = on_checkpoint  # called with the step once every worker is at the barrier

    def _wire(self, replies: list) -> List[Wire]:
        """The rule's replies as they go out: a compressed pull's payload where the pull is
        compressed, else the weights themselves (replies already on the wire pass unchanged)."""
        out = []
        for r in replies:
            if len(r) == 4:
                out.append(r)
                continue
            worker, status, tensor = r
            if self.codecs is not None and self.codecs.pull is not None and tensor.numel():
                wire = self.codecs.encode_pull(worker, tensor, self.rule.timestamp)
                out.append((worker, status, wire, wire.numel()))
            else:
                out.append((worker, status, tensor, None))
        return out

    def _send(self, replies: list) -> None:
        works = []
        for worker, status, tensor, size in self._wire(replies):
            h = P.header(self.rule.timestamp, status, int(size is not None or tensor.numel() > 0), size or 0)
            works.append((h, self.meter.isend(h, worker, P.CONTROL, P.TAG_REPLY_HDR, self.group)))
            if tensor.numel():
                works.append((tensor, self.meter.isend(tensor, worker, self.pull_category, P.TAG_REPLY_DATA, self.group)))
        for _, w in works:
            w.wait()
        log = getattr(self.rule, "_log", None)  # the trace's timeline: when the sends returned
        if log is not None and replies:
            log({"sent": [r[0] for r in replies]})

    def _receive_push(self, sender: int, hdr: torch.Tensor, n: int) -> torch.Tensor:
        """The gradient (or, for EASGD, the parameters) of a push whose header is ``hdr``."""
        if self.codecs is not None and self.codecs.push is not None:
            wire = torch.empty(int(hdr[3]), dtype=torch.uint8)
            if wire.numel():
                self.meter.recv(wire, sender, self.push_category, P.TAG_DATA, self.group)
            return self.codecs.decode_push(wire, sender, int(hdr[2]))
        buf = torch.empty(n, dtype=self.rule.params.dtype)
        if n:
            self.meter.recv(buf, sender, self.push_category, P.TAG_DATA, self.group)
        return buf

    def run(self) -> None:
        """Serve until every worker is done and, if ``expect_final``, one of them has polled for and
        received the final weights (rank 0, which saves them)."""
        rule, g = self.rule, self.group
        active = set(self.workers)
        finished = False
        barrier: set = set()
        n = rule.params.numel()
        while active or (self.expect_final and not finished):
            hdr = torch.zeros(P.HEADER, dtype=torch.int64)
            sender = self.meter.recv(hdr, None, P.CONTROL, P.TAG_HDR, g)
            kind, ts = int(hdr[0]), int(hdr[1])
            if kind == P.FINAL:
                if sender not in self.workers or sender in active:
                    raise RuntimeError(f"rank {sender} asked for the final weights before saying it is done")
                if active:  # others still train: say so; the poller asks again
                    self.meter.send(P.header(rule.timestamp, P.PENDING), sender, P.CONTROL, P.TAG_REPLY_HDR, g)
                    continue
                rule.finish()
                finished = True
                h = P.header(rule.timestamp, P.APPLIED)
                works = [self.meter.isend(h, sender, P.CONTROL, P.TAG_REPLY_HDR, g)]
                if n:
                    works.append(self.meter.isend(rule.params, sender, P.FINAL_CATEGORY, P.TAG_REPLY_DATA, g))
                vec = rule.stats.tensor()
                works.append(self.meter.isend(vec, sender, P.CONTROL, P.TAG_STATS, g))
                for wk in works:
                    wk.wait()
                continue
            if sender not in active:
                raise RuntimeError(f"server got message kind {kind} from rank {sender}, which is not an active worker")
            if kind == P.PUSH:
                buf = self._receive_push(sender, hdr, n)
                rule.stats.mark()
                replies = rule.on_push(sender, ts, buf)
            elif kind == P.PULL:
                replies = rule.on_pull(sender)
            elif kind == P.STATS:
                h = P.header(rule.timestamp, P.APPLIED)
                w1 = self.meter.isend(h, sender, P.CONTROL, P.TAG_REPLY_HDR, g)
                vec = rule.stats.tensor()
                w2 = self.meter.isend(vec, sender, P.CONTROL, P.TAG_REPLY_DATA, g)
                w1.wait(), w2.wait()
                replies = []
            elif kind == P.CKPT:
                barrier.add(sender)
                replies = rule.on_barrier(sender)
                if barrier >= active:
                    replies = self._wire(replies + rule.release_barrier(sorted(barrier)))
                    if self.on_checkpoint is not None:
                        # after the release: the saved clocks say which weights each worker computes on
                        self.on_checkpoint(int(hdr[2]))
                    barrier.clear()
            elif kind == P.DONE:
                active.discard(sender)
                replies = rule.on_done(sender)
            else:
                raise RuntimeError(f"unknown message kind {kind} from rank {sender}")
            self._send(replies)
            if self.on_message is not None:
                self.on_message(int(rule.stats.v["updates"]))
        if not finished:
            rule.finish()
