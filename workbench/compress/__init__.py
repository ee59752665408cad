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

A compressor also declares what the rest of the house would otherwise re-derive from its name:
:meth:`Compressor.payload_bytes` (the bytes its wire format puts into the collective for one bucket;
the bytes suite's analytic count uses it; the performance model measures the codec itself), its
``collective``, and ``bench_overrides`` (the settings the bench suites run it with).

Add a compressor: one module here with a config dataclass (filed with
:func:`register_compressor_schema`) and a :class:`Compressor` subclass registered with
``@COMPRESSORS.register(name)``, and one ``conf/compressor/<name>.yaml`` whose defaults list
starts with ``- /schema/compressor/<name>@_here_``; or the same module in another package, named by
an entry point of the ``workbench.compressors`` group (``docs/extending.md``).
"""
from __future__ import annotations

from workbench.compress.base import (BucketInfo, Compressor, Payload, Received, as_bytes, check,  # noqa: F401
                                     from_bytes, keep_count, mix_seed, packbits, unpackbits)
from workbench.core import CompressorConfig, store_schema  # noqa: F401  (CompressorConfig: members extend it)
from workbench.registry import Registry

COMPRESSORS: Registry = Registry("compressor", key="compressor.name", entry_points="workbench.compressors",
                                 validate=lambda cls, cfg: cls.validate(cfg.compressor))


SCHEMAS: dict = {}  # name -> the compressor's config dataclass (a codec built by another key: compressor.pull)


def register_compressor_schema(name: str, node: type) -> None:
    """File a compressor's dataclass as ``schema/compressor/<name>``."""
    SCHEMAS[name] = node
    store_schema("compressor", name, node)


def build_compressor(cfg, rank: int, world: int, seed: int = 0) -> Compressor:
    """The compressor ``cfg`` names (``cfg.compressor``), wrapped in error feedback if asked."""
    from workbench.compress.error_feedback import ErrorFeedback
    comp = COMPRESSORS[cfg.name](cfg, rank, world, seed)
    if cfg.get("error_feedback", False) and not getattr(comp, "own_error_feedback", False):
        comp = ErrorFeedback(comp)
    return comp


COMPRESSORS.discover(__name__, __path__, skip=("base", "hook", "error_feedback", "messages", "bench"))
