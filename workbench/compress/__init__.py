"""Gradient compressors for synchronous data parallelism: one file per compressor, one small
interface, driven bucket by bucket by a DDP communication hook (:mod:`workbench.compress.hook`).

A compressor turns one DDP bucket (a flat float tensor ``x``, this rank's local gradients) into a
payload, exchanges the payloads with one collective, and decodes the result into the averaged
gradient estimate that DDP writes back into ``.grad``:

=============  ==========================  =============================================
collective     payload                     what ``decode`` receives
=============  ==========================  =============================================
``allreduce``  one tensor, pre-divided by  the element-wise sum over ranks (so: the mean)
               the world size, as DDP does
``allgather``  one 1-D tensor, any length  the list of every rank's payload (may differ in
               (empty allowed)             length, may be empty: sizes are exchanged first)
=============  ==========================  =============================================

``local(payload)`` says what this rank's own payload stands for, in ``x``'s units; error feedback
(:mod:`workbench.compress.error_feedback`, ``compressor.error_feedback=true``) keeps
``x + e - local`` as the residual ``e`` of the next step. Compressors that need more than one
round of communication (PowerSGD) override :meth:`Compressor.reduce` instead.

Add a compressor: one file here with a config dataclass (registered with
:func:`register_compressor_schema`) and a :class:`Compressor` subclass registered with
``@COMPRESSORS.register(name)``, and one ``conf/compressor/<name>.yaml`` whose defaults list
starts with ``- <name>_schema``.
"""
from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass
from typing import Any, List, Sequence, Tuple, Union

import torch
from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

from workbench.registry import Registry

COMPRESSORS: Registry = Registry("compressor")


@dataclass
class CompressorConfig:
    """Fields every compressor shares; a compressor's own dataclass extends this one."""

    name: str = MISSING  # registry key (workbench/compress/<name>.py)
    error_feedback: bool = False  # keep what was not sent and add it to the next step's gradient


def register_compressor_schema(name: str, node: type) -> None:
    """Store a compressor's dataclass as ``compressor/<name>_schema``."""
    ConfigStore.instance().store(group="compressor", name=f"{name}_schema", node=node)


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

    def __init__(self, cfg, rank: int, world: int, seed: int = 0) -> None:
        self.cfg, self.rank, self.world, self.seed = cfg, rank, world, seed

    @classmethod
    def validate(cls, cfg) -> None:
        """Range checks of this compressor's config; raise workbench.config.ConfigError."""

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


# ---------------------------------------------------------------------------------------------
# Construction and validation

def build_compressor(cfg, rank: int, world: int, seed: int = 0) -> Compressor:
    """The compressor ``cfg`` names (``cfg.compressor``), wrapped in error feedback if asked."""
    comp = COMPRESSORS[cfg.name](cfg, rank, world, seed)
    if cfg.get("error_feedback", False) and not getattr(comp, "own_error_feedback", False):
        from workbench.compress.error_feedback import ErrorFeedback
        comp = ErrorFeedback(comp)
    return comp


def validate_config(cfg, trainer_cls) -> None:
    """Pre-launch checks of ``cfg.compressor``: a known name, a trainer that uses compressors
    (class attribute ``uses_compressor``), and the compressor's own ranges."""
    from workbench.config import ConfigError
    c = cfg.get("compressor")
    if c is None:
        return
    if c.name not in COMPRESSORS:
        raise ConfigError(f"invalid value {c.name!r} for compressor.name: choose from {', '.join(COMPRESSORS)}")
    if c.name != "none" and not getattr(trainer_cls, "uses_compressor", False):
        raise ConfigError(f"invalid value {c.name!r} for compressor.name: trainer {cfg.trainer.name} does not "
                          "compress gradients; use trainer=compressed or compressor=none")
    COMPRESSORS[c.name].validate(c)


def check(ok: bool, key: str, value: Any, valid: str) -> None:
    if not ok:
        from workbench.config import ConfigError
        raise ConfigError(f"invalid value {value!r} for compressor.{key}: {valid}")


for _m in pkgutil.iter_modules(__path__):
    if _m.name not in ("hook", "error_feedback", "bench"):
        importlib.import_module(f"{__name__}.{_m.name}")
