"""Metered communication: the one layer every byte between processes goes through.

Every collective and point-to-point transfer is called through a :class:`Meter`, which counts, per
category (``allreduce``, ``grad_push``, ``param_pull``, ``activations`` …), the bytes this rank sends
and receives and the wall time the call took. The papers' claims are claims about these numbers.

Byte counts are exact functions of the tensor sizes under the textbook algorithm of each collective
(what the papers' analyses assume), not sniffed off the wire:

===============  ===========================================  ===================================
collective       sent by this rank                            received by this rank
===============  ===========================================  ===================================
all-reduce       2(p-1)/p * N   (ring: reduce-scatter+gather)  same
all-gather       (p-1) * n_own                                sum of the other ranks' n
broadcast        (p-1) * N at the source, 0 elsewhere         N at the others, 0 at the source
send / recv      N                                            N
===============  ===========================================  ===================================

with N the tensor's bytes and p the group size; fractions are floored to whole bytes.

Time is the wall time of the blocking call, or for asynchronous operations (DDP's buckets) from
launch to completion of the future, so overlapped communication is still counted in full.

Every receive and collective has a timeout (the process group's, ``cluster.timeout_s``): a dead peer
makes it raise instead of hanging.
"""

import threading
import time
from collections import defaultdict
from datetime import timedelta
from typing import Dict, List, Optional

import torch
import torch.distributed as dist
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors


class _Counter:
    __slots__ = ("sent", "recv", "time", "calls")

    def __init__(self) -> None:
        self.sent = 0
        self.recv = 0
        self.time = 0.0
        self.calls = 0

    def add(self, sent: int, recv: int, seconds: float) -> None:
        self.sent += int(sent)
        self.recv += int(recv)
        self.time += seconds
        self.calls += 1

    def as_dict(self) -> dict:
        return {"sent": self.sent, "recv": self.recv, "time": self.time, "calls": self.calls}


def nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def allreduce_bytes(n: int, p: int) -> int:
    return 2 * (p - 1) * n // p


class Meter:
    """Counts bytes and time per category; ``pop()`` returns and clears the current window (a step)."""

    def __init__(self, timeout_s: float = 120.0) -> None:
        self.timeout = timedelta(seconds=timeout_s)
        self._window: Dict[str, _Counter] = defaultdict(_Counter)
        self._total: Dict[str, _Counter] = defaultdict(_Counter)
        self._lock = threading.Lock()  # async completions arrive on the backend's threads

    # -- bookkeeping ------------------------------------------------------------------------------
    def record(self, category: str, sent: int, recv: int, seconds: float) -> None:
        with self._lock:
            self._window[category].add(sent, recv, seconds)
            self._total[category].add(sent, recv, seconds)

    def pop(self) -> Dict[str, dict]:
        """The counters since the last pop, by category: ``{cat: {sent, recv, time, calls}}``."""
        with self._lock:
            out = {k: c.as_dict() for k, c in self._window.items()}
            self._window.clear()
        return out

    def totals(self) -> Dict[str, dict]:
        with self._lock:
            return {k: c.as_dict() for k, c in self._total.items()}

    def restore_totals(self, totals: Dict[str, dict]) -> None:
        """Continue counting from a checkpoint's totals (a resumed run reports whole-run bytes)."""
        with self._lock:
            self._total.clear()
            for cat, c in totals.items():
                ctr = self._total[cat]
                ctr.sent, ctr.recv, ctr.time, ctr.calls = int(c["sent"]), int(c["recv"]), float(c["time"]), int(c["calls"])

    @staticmethod
    def _size(group) -> int:
        return dist.get_world_size(group)

    # -- collectives ------------------------------------------------------------------------------
    def all_reduce(self, tensor: torch.Tensor, category: str, op=dist.ReduceOp.SUM, group=None) -> torch.Tensor:
        p = self._size(group)
        t0 = time.perf_counter()
        dist.all_reduce(tensor, op=op, group=group)
        b = allreduce_bytes(nbytes(tensor), p) if p > 1 else 0
        self.record(category, b, b, time.perf_counter() - t0)
        return tensor

    def all_reduce_async(self, tensor: torch.Tensor, category: str, op=dist.ReduceOp.SUM, group=None) -> torch.futures.Future:
        """Start an all-reduce; the returned future completes with ``[tensor]``. Time is counted
        from launch to completion."""
        p = self._size(group)
        t0 = time.perf_counter()
        fut = dist.all_reduce(tensor, op=op, group=group, async_op=True).get_future()
        b = allreduce_bytes(nbytes(tensor), p) if p > 1 else 0

        def done(f):
            self.record(category, b, b, time.perf_counter() - t0)
            return f.value()
        return fut.then(done)

    def all_gather(self, tensors: List[torch.Tensor], tensor: torch.Tensor, category: str, group=None) -> List[torch.Tensor]:
        """Equal-size all-gather into ``tensors`` (a list of group-size tensors)."""
        p = self._size(group)
        t0 = time.perf_counter()
        dist.all_gather(tensors, tensor, group=group)
        own = nbytes(tensor)
        self.record(category, (p - 1) * own, (p - 1) * own, time.perf_counter() - t0)
        return tensors

    def all_gather_varlen(self, tensor: torch.Tensor, category: str, group=None) -> List[torch.Tensor]:
        """All-gather of 1-D tensors whose lengths differ by rank (including empty ones: sizes are
        exchanged first, padded to the longest, so no rank waits for bytes that never come)."""
        p = self._size(group)
        flat = tensor.reshape(-1)
        size = torch.tensor([flat.numel()], dtype=torch.int64, device=flat.device)
        sizes = [torch.zeros_like(size) for _ in range(p)]
        t0 = time.perf_counter()
        dist.all_gather(sizes, size, group=group)
        lens = [int(s.item()) for s in sizes]
        longest = max(lens) if lens else 0
        padded = torch.zeros(longest, dtype=flat.dtype, device=flat.device)
        padded[: flat.numel()] = flat
        outs = [torch.empty_like(padded) for _ in range(p)]
        if longest > 0:
            dist.all_gather(outs, padded, group=group)
        el = flat.element_size()
        own = flat.numel() * el
        others = sum(lens) * el - own
        meta = 8 * (p - 1)
        self.record(category, (p - 1) * own + meta, others + meta, time.perf_counter() - t0)
        return [o[:n] for o, n in zip(outs, lens)]

    def broadcast(self, tensor: torch.Tensor, src: int, category: str, group=None) -> torch.Tensor:
        p = self._size(group)
        t0 = time.perf_counter()
        dist.broadcast(tensor, src=src, group=group)
        n = nbytes(tensor)
        me = dist.get_rank()
        self.record(category, (p - 1) * n if me == src else 0, 0 if me == src else n, time.perf_counter() - t0)
        return tensor

    def barrier(self, category: str = "control", group=None) -> None:
        t0 = time.perf_counter()
        dist.barrier(group=group)
        self.record(category, 0, 0, time.perf_counter() - t0)

    # -- point to point ---------------------------------------------------------------------------
    def send(self, tensor: torch.Tensor, dst: int, category: str, tag: int = 0, group=None) -> None:
        t0 = time.perf_counter()
        dist.isend(tensor, dst=dst, tag=tag, group=group).wait(self.timeout)
        self.record(category, nbytes(tensor), 0, time.perf_counter() - t0)

    def recv(self, tensor: torch.Tensor, src: Optional[int], category: str, tag: int = 0, group=None) -> int:
        """Receive into ``tensor`` from ``src`` (None: any source); returns the sender's rank.
        Raises after the timeout instead of waiting for a peer that died. ``group``: a process
        group spanning every rank in order (e.g. a gloo group beside NCCL), so ranks are global."""
        t0 = time.perf_counter()
        if src is None:
            work = dist.irecv(tensor, tag=tag, group=group)
            work.wait(self.timeout)
            sender = work._source_rank()
        else:
            dist.irecv(tensor, src=src, tag=tag, group=group).wait(self.timeout)
            sender = src
        self.record(category, 0, nbytes(tensor), time.perf_counter() - t0)
        return sender

    def isend(self, tensor: torch.Tensor, dst: int, category: str, tag: int = 0, group=None) -> "MeteredWork":
        return MeteredWork(self, dist.isend(tensor, dst=dst, tag=tag, group=group), category, nbytes(tensor), 0)

    def irecv(self, tensor: torch.Tensor, src: int, category: str, tag: int = 0, group=None) -> "MeteredWork":
        return MeteredWork(self, dist.irecv(tensor, src=src, tag=tag, group=group), category, 0, nbytes(tensor))


class MeteredWork:
    """A pending point-to-point transfer; ``wait()`` (with the meter's timeout) records it."""

    __slots__ = ("meter", "work", "category", "sent", "recvd", "t0", "done")

    def __init__(self, meter: Meter, work, category: str, sent: int, recvd: int) -> None:
        self.meter, self.work, self.category, self.sent, self.recvd = meter, work, category, sent, recvd
        self.t0 = time.perf_counter()
        self.done = False

    def wait(self) -> None:
        if not self.done:
            self.work.wait(self.meter.timeout)
            self.meter.record(self.category, self.sent, self.recvd, time.perf_counter() - self.t0)
            self.done = True


# ---------------------------------------------------------------------------------------------
# DDP communication hook: DDP's own bucketed all-reduce, counted by the meter.

class AllreduceHookState:
    """State of :func:`metered_allreduce_hook` (``__slots__``, like torch's hook states)."""

    __slots__ = ("meter", "group", "category")

    def __init__(self, meter: Meter, group=None, category: str = "allreduce") -> None:
        self.meter, self.group, self.category = meter, group, category


def metered_allreduce_hook(state: AllreduceHookState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """The plain average all-reduce DDP does by default (torch's ``allreduce_hook``), metered.
    Dividing before the sum, as torch's hook does, keeps results bit-identical to it."""
    buf = bucket.buffer()
    buf.div_(dist.get_world_size(state.group))
    return state.meter.all_reduce_async(buf, state.category, group=state.group).then(lambda f: f.value()[0])


def metered_sum_hook(state: AllreduceHookState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP hook: *sum* (not average) a bucket over the state's group, metered. For a loss already
    divided by the global batch (Stanza's FC side), the sum is the global-batch gradient."""
    return state.meter.all_reduce_async(bucket.buffer(), state.category, group=state.group).then(lambda f: f.value()[0])


def size_buckets(tensors, cap_bytes: int) -> List[List[torch.Tensor]]:
    """Consecutive tensors in buckets of at most ``cap_bytes`` (a larger tensor gets one alone): one
    collective per bucket, for tensors no DDP buckets (Stanza's FC gradients)."""
    buckets: List[List[torch.Tensor]] = [[]]
    size = 0
    for t in tensors:
        if buckets[-1] and size + t.numel() * t.element_size() > cap_bytes:
            buckets.append([])
            size = 0
        buckets[-1].append(t)
        size += t.numel() * t.element_size()
    return buckets


def flat_collective(tensors: List[torch.Tensor], comm_device: torch.device, collective) -> List[torch.Tensor]:
    """``collective(buffer)`` on the tensors flattened into one buffer on ``comm_device``; returns the
    result cut back into the tensors' shapes, on their device (one message instead of one each)."""
    flat = _flatten_dense_tensors(tensors).to(comm_device)
    collective(flat)
    return _unflatten_dense_tensors(flat.to(tensors[0].device), tensors)
