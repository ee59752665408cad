"""The DDP communication hook that drives a compressor bucket by bucket, through the meter.

DDP calls :func:`compression_hook` for each bucket as soon as backward has filled it; the hook hands
the bucket to one background thread (so the bucket order, and thus the order of collectives, is the
same on every rank) and returns a future at once, so compression and communication overlap the rest
of the backward pass, as DDP's own all-reduce does. DDP waits for every future before the optimizer
step.

Per step the state accumulates, for this rank: encode and decode time, the time inside collectives,
the payload bytes this rank put into collectives and the dense bytes (the bucket as float32) it
stood for; :meth:`CompressionHookState.pop_stats` returns them and starts the next step. Per bucket
it keeps running averages of the same (the input of the performance model).
"""
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Dict, List

import torch
import torch.distributed as dist

from workbench.compress.base import BucketInfo, Compressor
from workbench.meter import Meter, nbytes


class Channel:
    """Metered collectives plus the timers of one bucket's reduction."""

    def __init__(self, meter: Meter, group=None) -> None:
        self.meter, self.group = meter, group
        self.reset()

    def reset(self) -> None:
        self.encode_s = self.decode_s = self.comm_s = 0.0
        self.payload_bytes = 0
        self.messages = 0
        self.allreduce_dtype = None  # what the reduction sums: gloo sums 16-bit floats far slower per byte

    @contextmanager
    def timed(self, what: str):
        t0 = time.perf_counter()
        try:
            yield
        finally:
            setattr(self, f"{what}_s", getattr(self, f"{what}_s") + time.perf_counter() - t0)

    def exchange(self, collective: str, payload: torch.Tensor, category: str):
        """All-reduce (sum, in place; returns the tensor) or all-gather (returns every rank's
        payload; lengths may differ, may be empty)."""
        self.payload_bytes += nbytes(payload)
        self.messages += 1
        t0 = time.perf_counter()
        try:
            if collective == "allreduce":
                self.allreduce_dtype = str(payload.dtype).removeprefix("torch.")
                return self.meter.all_reduce(payload, category, group=self.group)
            if collective == "allgather":
                return self.meter.all_gather_varlen(payload.reshape(-1), category, group=self.group)
            raise ValueError(f"unknown collective {collective!r}")
        finally:
            self.comm_s += time.perf_counter() - t0


class CompressionHookState:
    """State of :func:`compression_hook` (``__slots__``, like torch's hook states); its
    :meth:`state_dict` is the compressor's checkpoint (residuals, PowerSGD's Q, step counter)."""

    __slots__ = ("compressor", "meter", "channel", "rank", "world", "step", "seed", "passthrough", "_executor", "_lock",
                 "_step_stats", "_buckets", "_threads")

    def __init__(self, compressor: Compressor, meter: Meter, group=None, seed: int = 0) -> None:
        self.compressor, self.meter = compressor, meter
        self.channel = Channel(meter, group)
        self.rank = dist.get_rank(group)
        self.world = dist.get_world_size(group)
        self.step = 0
        self.seed = seed
        self.passthrough = False  # plain all-reduce that leaves the compressor and counters alone
        self._threads = torch.get_num_threads()
        # One thread: buckets are reduced in DDP's order, the same on every rank.
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="compress",
                                            initializer=torch.set_num_threads, initargs=(self._threads,))
        self._lock = threading.Lock()
        self._step_stats = self._zero()
        self._buckets: Dict[int, dict] = {}

    @staticmethod
    def _zero() -> dict:
        return {"encode_s": 0.0, "decode_s": 0.0, "comm_s": 0.0, "payload_bytes": 0, "dense_bytes": 0, "buckets": 0}

    def reduce_bucket(self, buf: torch.Tensor, info: BucketInfo, last: bool) -> torch.Tensor:
        if self.passthrough:
            return self.meter.all_reduce(buf.div_(self.world), "setup")
        ch = self.channel
        ch.reset()
        dense = nbytes(buf)
        out = self.compressor.reduce(buf, info, ch)
        if out is not buf:
            buf.copy_(out)
        with self._lock:
            s = self._step_stats
            s["encode_s"] += ch.encode_s
            s["decode_s"] += ch.decode_s
            s["comm_s"] += ch.comm_s
            s["payload_bytes"] += ch.payload_bytes
            s["dense_bytes"] += dense
            s["buckets"] += 1
            b = self._buckets.setdefault(info.index, {"index": info.index, "numel": buf.numel(), "dense_bytes": dense,
                                                      "n": 0, "payload_bytes": 0.0, "encode_s": 0.0, "decode_s": 0.0,
                                                      "comm_s": 0.0, "messages": 0.0, "pos": 0})
            if b["numel"] != buf.numel():  # DDP rebuilt its buckets after step 1: start over
                b.update(numel=buf.numel(), dense_bytes=dense, n=0, payload_bytes=0.0, encode_s=0.0, decode_s=0.0,
                         comm_s=0.0, messages=0.0)
            b["n"] += 1
            b["allreduce_dtype"] = ch.allreduce_dtype
            b["pos"] = s["buckets"]  # position in this step's launch order
            for k, v in (("payload_bytes", ch.payload_bytes), ("encode_s", ch.encode_s), ("decode_s", ch.decode_s),
                         ("comm_s", ch.comm_s), ("messages", ch.messages)):
                b[k] += v
            if last:
                self.step += 1
        return buf

    def pop_stats(self) -> dict:
        """This step's totals (this rank): encode/decode/communication ms, payload and dense bytes, ratio."""
        with self._lock:
            s, self._step_stats = self._step_stats, self._zero()
        return {"encode_ms": 1e3 * s["encode_s"], "decode_ms": 1e3 * s["decode_s"], "compress_comm_ms": 1e3 * s["comm_s"],
                "payload_bytes": s["payload_bytes"], "dense_bytes": s["dense_bytes"],
                "compression_ratio": s["dense_bytes"] / s["payload_bytes"] if s["payload_bytes"] else float("inf")}

    def bucket_profile(self) -> List[dict]:
        """Per bucket, in DDP's order: numel, dense bytes and averages per step of payload bytes,
        encode/decode/communication seconds and collectives, and the dtype its all-reduces sum
        (``None``: no all-reduce)."""
        with self._lock:
            out = []
            for b in sorted(self._buckets.values(), key=lambda b: b["pos"]):
                n = max(1, b["n"])
                out.append({"index": b["index"], "numel": b["numel"], "dense_bytes": b["dense_bytes"], "steps": b["n"],
                            "allreduce_dtype": b.get("allreduce_dtype"),
                            **{k: b[k] / n for k in ("payload_bytes", "encode_s", "decode_s", "comm_s", "messages")}})
            return out

    def reset_profile(self) -> None:
        """Forget the per-bucket averages so far (warm-up steps, DDP's bucket rebuild)."""
        with self._lock:
            self._buckets.clear()

    def state_dict(self) -> dict:
        return {"step": self.step, "compressor": self.compressor.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.step = int(state.get("step", 0))
        self.compressor.load_state_dict(state.get("compressor", {}))

    def close(self) -> None:
        self._executor.shutdown(wait=True)


def compression_hook(state: CompressionHookState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP communication hook: compress, exchange and decode ``bucket`` on the state's thread;
    the returned future completes with the averaged (decoded) bucket."""
    buf = bucket.buffer()
    info = BucketInfo(index=bucket.index(), step=state.step, rank=state.rank, world=state.world,
                      shapes=tuple(p.shape for p in bucket.parameters()), seed=state.seed)
    last = bucket.is_last()
    fut: torch.futures.Future = torch.futures.Future()

    def work():
        try:
            fut.set_result(state.reduce_bucket(buf, info, last))
        except BaseException as e:  # noqa: BLE001 - handed to DDP, which raises it in backward
            fut.set_exception(e)

    state._executor.submit(work)
    return fut
