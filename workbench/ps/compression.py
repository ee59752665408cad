"""Compression of a parameter server's push and pull (``trainer=ps``, ``trainer=staleness``).

Push (``compressor.name``): a worker compresses each server's flat shard of its gradient with its
own codec, built for point to point (``world=1``), ``BucketInfo.index`` = the server's shard, so
error-feedback residuals are kept per shard; the server decodes it with the codec's
:meth:`~workbench.compress.base.Compressor.receive` (it knows its shard's size) and hands the
decoded gradient to its update rule, which is unchanged.

Pull (``compressor.pull``): the server keeps, per worker, the replica of its shard that worker
holds (the sum of what it has sent it). It sends ``codec(weights - replica)`` and adds the decoded
delta to the replica; the worker adds the same decoded delta to its own copy, so both stay equal to
the bit. What the codec drops stays in ``weights - replica`` and goes out with a later pull: error
feedback on the server's side, as BytePS does, so the pull codec is never wrapped in
:class:`~workbench.compress.error_feedback.ErrorFeedback` as well.

On the wire a payload is its raw bytes (uint8), of a length the 32-byte header announces
(``header[3]``), so a variable-length payload (Top-K drops zeros) needs no second message and the
meter's payload category counts exactly the payload's bytes. Exact bytes per worker per step, the
shards' element counts n_s: push ``sum_s payload_bytes(n_s)`` (:func:`push_bytes`), pull the pull
codec's ``sum_s payload_bytes(n_s)`` where it is on, else ``4 n`` each way.
"""
from __future__ import annotations

import time
from typing import Dict, List, Optional, Sequence

import torch

from workbench.compress import COMPRESSORS, BucketInfo, Compressor
from workbench.compress.messages import Message, build_codec, codec_config, codec_name

PUSH = Message("gradient", "p2p", what="the parameter server's push")
PULL = Message("weights", "p2p", key="compressor.pull", what="the parameter server's pull")


def messages(comp) -> List[Message]:
    """The messages a gradient parameter server compresses under ``comp`` (``cfg.compressor``)."""
    pull = str(comp.get("pull", "none")) if comp is not None else "none"
    return [PUSH] + ([PULL] if pull != "none" else [])


def payload_bytes(comp, msg: Message, shard_sizes: Sequence[int]) -> Optional[int]:
    """Bytes of ``msg`` per step over the shards (element counts ``shard_sizes``); None: it goes dense."""
    name = codec_name(comp, msg)
    if name is None:
        return None
    node = codec_config(comp, msg)
    return sum(COMPRESSORS[name].payload_bytes(node, n) for n in shard_sizes if n)


def to_wire(payload: torch.Tensor) -> torch.Tensor:
    """A payload's raw bytes, as one flat uint8 tensor on the CPU (the servers are CPU processes)."""
    return payload.detach().reshape(-1).contiguous().cpu().view(torch.uint8)


def payload_dtype(codec: Compressor) -> torch.dtype:
    """The dtype of ``codec``'s payloads (what a receiver reads the wire bytes as)."""
    inner = getattr(codec, "inner", codec)  # never touch an error-feedback wrapper's residuals
    return inner.encode(torch.ones(1), BucketInfo(-1, 0, 0, 1))[0].dtype


def from_wire(buf: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return buf.view(dtype) if buf.numel() else torch.empty(0, dtype=dtype)


def plain_codec(comp, msg: Message, rank: int, seed: int) -> Optional[Compressor]:
    """The codec of ``msg`` without error feedback (the pull's replica is its error feedback)."""
    node = codec_config(comp, msg)
    return None if node is None else COMPRESSORS[node.name](node, rank, 1, seed)


class _Timed:
    """Bytes and times of one rank's codec work since the last :meth:`pop`."""

    def __init__(self) -> None:
        self.v = self._zero()

    @staticmethod
    def _zero() -> Dict[str, float]:
        return {"encode_s": 0.0, "decode_s": 0.0, "payload_bytes": 0, "dense_bytes": 0, "pull_payload_bytes": 0}

    def pop(self) -> Dict[str, float]:
        v, self.v = self.v, self._zero()
        return v


class WorkerCodecs:
    """A worker's side: one push codec per server shard (error feedback per shard), and the decoder
    of the compressed pull where there is one."""

    def __init__(self, comp, rank: int, shard_shapes: Sequence[Sequence[torch.Size]], seed: int,
                 push: Optional[Message] = PUSH, pull: Optional[Message] = PULL) -> None:
        self.rank, self.seed = rank, seed
        self.shapes = [tuple(s) for s in shard_shapes]
        self.push = [build_codec(comp, push, rank, 1, seed) for _ in self.shapes] if push is not None else []
        self.push = self.push if any(c is not None for c in self.push) else None
        self.pull = plain_codec(comp, pull, rank, seed) if pull is not None else None
        self.pull_dtype = payload_dtype(self.pull) if self.pull is not None else None
        self.stats = _Timed()

    def info(self, shard: int, step: int) -> BucketInfo:
        return BucketInfo(shard, step, self.rank, 1, self.shapes[shard], self.seed)

    def encode(self, flat: torch.Tensor, shard: int, step: int) -> torch.Tensor:
        """The wire bytes of this worker's push of ``flat`` (server ``shard``'s gradients) at ``step``."""
        t0 = time.perf_counter()
        wire = to_wire(self.push[shard].send(flat, self.info(shard, step)))
        v = self.stats.v
        v["encode_s"] += time.perf_counter() - t0
        v["payload_bytes"] += wire.numel()
        v["dense_bytes"] += 4 * flat.numel()
        return wire

    def decode_pull(self, buf: torch.Tensor, shard: int, n: int, timestamp: int) -> torch.Tensor:
        """The weight delta a compressed pull's wire bytes stand for (float32, ``n`` elements)."""
        t0 = time.perf_counter()
        delta = self.pull.receive(from_wire(buf, self.pull_dtype), n, self.info(shard, timestamp))
        self.stats.v["decode_s"] += time.perf_counter() - t0
        self.stats.v["pull_payload_bytes"] += buf.numel()
        return delta

    def pop_stats(self) -> dict:
        """This step's push payload and dense bytes, ratio and codec times (``metrics.jsonl``)."""
        s = self.stats.pop()
        out = {"encode_ms": 1e3 * s["encode_s"], "decode_ms": 1e3 * s["decode_s"],
               "payload_bytes": s["payload_bytes"], "dense_bytes": s["dense_bytes"],
               "compression_ratio": s["dense_bytes"] / s["payload_bytes"] if s["payload_bytes"] else float("inf")}
        if self.pull is not None:
            out["pull_payload_bytes"] = s["pull_payload_bytes"]
        return out

    def state_dict(self) -> dict:
        """The push codecs' state (error-feedback residuals); the pull's replica is the model itself."""
        return {"push": [c.state_dict() if c is not None else {} for c in (self.push or [])]}

    def load_state_dict(self, state: dict) -> None:
        for c, st in zip(self.push or [], state.get("push", [])):
            if c is not None:
                c.load_state_dict(st)


class ServerCodecs:
    """A server's side for its ``shard``: the push decoder, and per worker the replica of the shard
    that worker holds where the pull is compressed."""

    def __init__(self, comp, shard: int, params: torch.Tensor, shapes: Sequence[torch.Size],
                 workers: Sequence[int], seed: int, push: Optional[Message] = PUSH,
                 pull: Optional[Message] = PULL) -> None:
        self.shard, self.n, self.shapes, self.seed = shard, params.numel(), tuple(shapes), seed
        self.push = build_codec(comp, push, shard, 1, seed) if push is not None else None
        self.push_dtype = payload_dtype(self.push) if self.push is not None else None
        self.pull = plain_codec(comp, pull, shard, seed) if pull is not None else None
        self.replicas: Dict[int, torch.Tensor] = (
            {int(w): params.detach().clone() for w in workers} if self.pull is not None else {})

    def info(self, worker: int, step: int) -> BucketInfo:
        return BucketInfo(self.shard, step, int(worker), 1, self.shapes, self.seed)

    def decode_push(self, buf: torch.Tensor, worker: int, step: int) -> torch.Tensor:
        """The gradient a push's wire bytes stand for (float32, the shard's size)."""
        return self.push.receive(from_wire(buf, self.push_dtype), self.n, self.info(worker, step))

    def encode_pull(self, worker: int, params: torch.Tensor, timestamp: int) -> torch.Tensor:
        """The wire bytes of ``codec(params - replica)`` for ``worker``; the replica takes the decoded delta."""
        replica = self.replicas[int(worker)]
        info = self.info(worker, timestamp)
        payload = self.pull.send(params - replica, info)
        replica.add_(self.pull.receive(payload, self.n, info))
        return to_wire(payload)

    def state_dict(self) -> dict:
        return {"replicas": {int(w): r.clone() for w, r in self.replicas.items()}}

    def load_state_dict(self, state: dict) -> None:
        for w, r in state.get("replicas", {}).items():
            self.replicas[int(w)].copy_(r)
