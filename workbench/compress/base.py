"""The compressor interface and the byte packing its all-gather members share (the registry and
construction are in :mod:`workbench.compress`; this module is what error feedback and the hook
build on, below the registry)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List, Tuple, Union

import torch

from workbench.core import ConfigError


@dataclass(frozen=True)
class BucketInfo:
    """What a compressor knows about the bucket it is compressing."""

    index: int  # DDP bucket index (state is kept per bucket)
    step: int  # optimizer step, 0-based, the same on every rank
    rank: int
    world: int
    shapes: Tuple[torch.Size, ...] = ()  # parameter shapes in buffer order (layer-wise compressors)
    seed: int = 0


def mix_seed(*parts: int) -> int:
    """A deterministic 63-bit seed from integers (same on every rank that passes the same parts)."""
    h = 1469598103934665603
    for p in parts:
        h = ((h ^ (int(p) & 0xFFFFFFFFFFFFFFFF)) * 1099511628211) & 0x7FFFFFFFFFFFFFFF
    return h


def keep_count(k: float, n: int) -> int:
    """Elements a sparsifier keeps of ``n``: ``floor(k * n)``, at least one."""
    return max(1, min(n, int(k * n)))


Payload = torch.Tensor
Received = Union[torch.Tensor, List[torch.Tensor]]


class Compressor:
    """One compression scheme. Subclasses set ``name``, ``collective`` and implement
    ``encode`` / ``decode`` / ``local`` (or ``reduce`` for several rounds)."""

    name = "base"
    collective = "allreduce"  # allreduce | allgather
    category = "compressed"  # meter category of its traffic
    bench_overrides: tuple = ()  # settings the bench suites run it with (e.g. a sparsifier's k)
    # The messages it can carry (workbench.compress.messages.KINDS): gradient | delta | weights | activation
    carries: frozenset = frozenset({"gradient", "delta"})
    point_to_point = True  # send/receive one rank's tensor with no collective (a push, a pull, an activation)

    def __init__(self, cfg, rank: int, world: int, seed: int = 0) -> None:
        self.cfg, self.rank, self.world, self.seed = cfg, rank, world, seed

    @classmethod
    def validate(cls, cfg) -> None:
        """Range checks of this compressor's config (``cfg.compressor``); raise workbench.core.ConfigError."""

    @classmethod
    def payload_bytes(cls, cfg, n: int) -> int:
        """Bytes this compressor puts into its collective for one bucket of ``n`` float32 gradients
        under config ``cfg`` (``cfg.compressor``), from its wire format. Compressors whose payload
        depends on the parameters' shapes rather than the bucket (PowerSGD) override
        :meth:`payload_bytes_of_shapes` instead."""
        return 4 * n

    @classmethod
    def payload_bytes_of_shapes(cls, cfg, shapes, buckets) -> int:
        """Bytes per step over all buckets (``buckets``: each bucket's element count) of a model whose
        parameter shapes are ``shapes``; by default the sum of :meth:`payload_bytes` per bucket."""
        return sum(cls.payload_bytes(cfg, n) for n in buckets)

    @classmethod
    def sent_bytes(cls, payload: float, buckets: int, world: int) -> float:
        """Bytes one rank sends per step for ``payload`` bytes over ``buckets`` buckets among ``world``
        ranks: a ring all-reduce sends 2(N-1)/N of it; an all-gather sends it to the N-1 others, plus
        each bucket's int64 length, exchanged first so that unequal payloads never hang."""
        if cls.collective == "allgather":
            return (world - 1) * (payload + 8 * buckets)
        return 2 * (world - 1) / world * payload

    # -- one round: encode -> collective -> decode --------------------------------------------------
    def encode(self, x: torch.Tensor, info: BucketInfo) -> Tuple[Payload, Any]:
        raise NotImplementedError  # pragma: no cover - abstract

    def decode(self, received: Received, ctx: Any, info: BucketInfo) -> torch.Tensor:
        raise NotImplementedError  # pragma: no cover - abstract

    def local(self, payload: Payload, ctx: Any, info: BucketInfo) -> torch.Tensor:
        """The tensor this rank's payload stands for (``x`` minus what compression dropped)."""
        raise NotImplementedError  # pragma: no cover - abstract

    def reduce(self, x: torch.Tensor, info: BucketInfo, channel) -> torch.Tensor:
        """Average ``x`` over the ranks through this compressor; ``channel`` (hook.Channel) runs the
        metered collectives and accumulates encode/decode/communication time and payload bytes."""
        with channel.timed("encode"):
            payload, ctx = self.encode(x, info)
        received = channel.exchange(self.collective, payload, self.category)
        with channel.timed("decode"):
            return self.decode(received, ctx, info)

    # -- point to point: one rank's tensor, decoded by its receiver --------------------------------
    # (an instance built with world=1: its payload stands for ``x`` itself, not for a share of a sum)
    def send(self, x: torch.Tensor, info: BucketInfo) -> Payload:
        """The payload of ``x`` (error feedback, where wrapped, keeps what it drops)."""
        payload, _ = self.encode(x, info)
        return payload

    def receive(self, payload: Payload, n: int, info: BucketInfo) -> torch.Tensor:
        """The ``n``-element float32 tensor a payload from :meth:`send` stands for."""
        return self.local(payload, self.p2p_context(n), info).reshape(-1).float()

    def p2p_context(self, n: int) -> Any:
        """What :meth:`local` needs beside the payload, known to a receiver that knows ``n``."""
        return n

    # -- checkpoint -------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass


# ---------------------------------------------------------------------------------------------
# Byte packing shared by the all-gather compressors (one collective per bucket, whatever the parts).

def as_bytes(*parts: torch.Tensor) -> torch.Tensor:
    """Concatenate tensors' raw bytes into one uint8 tensor."""
    return torch.cat([p.contiguous().reshape(-1).view(torch.uint8) for p in parts]) if parts else torch.empty(0, dtype=torch.uint8)


def from_bytes(buf: torch.Tensor, dtype: torch.dtype, count: int, offset: int = 0) -> Tuple[torch.Tensor, int]:
    """``count`` elements of ``dtype`` starting at byte ``offset``; returns them and the next offset."""
    size = torch.empty(0, dtype=dtype).element_size() * count
    return buf[offset: offset + size].clone().view(dtype), offset + size


def packbits(bits: torch.Tensor) -> torch.Tensor:
    """Bool tensor -> uint8, 8 per byte, most significant bit first (NumPy's ``packbits``)."""
    n = bits.numel()
    pad = (-n) % 8
    b = torch.cat([bits.reshape(-1).to(torch.uint8), torch.zeros(pad, dtype=torch.uint8)]) if pad else bits.reshape(-1).to(torch.uint8)
    weights = torch.tensor([128, 64, 32, 16, 8, 4, 2, 1], dtype=torch.uint8)
    return (b.view(-1, 8) * weights).sum(1, dtype=torch.uint8) if n else torch.empty(0, dtype=torch.uint8)


def unpackbits(packed: torch.Tensor, n: int) -> torch.Tensor:
    """uint8 -> bool tensor of length ``n`` (inverse of :func:`packbits`)."""
    shifts = torch.arange(7, -1, -1, dtype=torch.uint8)
    return ((packed.reshape(-1, 1) >> shifts) & 1).reshape(-1)[:n].bool()


def check(ok: bool, key: str, value: Any, valid: str) -> None:
    if not ok:
        raise ConfigError(f"invalid value {value!r} for compressor.{key}: {valid}")
