"""A flat model delta through a compressor, for the paradigms that exchange models rather than
gradients: averaged over the ranks by the compressor's own collective (local SGD's and BMUF's block
average, :class:`DeltaAverager`), or sent by one rank to one receiver (EASGD's elastic difference,
:func:`send_payload` / :func:`recv_payload`).

The averager cuts the flat vector into buckets of whole parameters (in parameter order, at most
:data:`BUCKET_CAP_BYTES` of float32 each, a larger parameter alone: DDP's default cap, so a model
has the buckets the compressed trainer's ``bucket_cap_mb`` default would give it before DDP's
rebuild) and hands each to :meth:`CompressionHookState.reduce_bucket`, the very bookkeeping of the
compressed trainer: the payload and dense bytes, encode/decode/collective time, the per-bucket
profile, and the compressor's state (error-feedback residuals per bucket index, PowerSGD's P and
Q) with the round counter in one checkpointable ``state_dict``. ``BucketInfo.step`` counts averaging
rounds, so PowerSGD's ``start_iter`` is a number of rounds.

Point to point, a payload of any dtype and length (a Top-K payload drops zeros, so its length
varies) goes with a 16-byte header (its element count and dtype) in the control category, the
payload itself in the message's category: the payload category holds exactly the codec's bytes.
"""
from __future__ import annotations

from typing import List, Sequence

import torch

from workbench.compress.base import BucketInfo, Compressor
from workbench.compress.hook import CompressionHookState
from workbench.meter import Meter
from workbench.perfmodel.paradigms.compressed_messages import delta_buckets

BUCKET_CAP_BYTES = 25 * 2**20  # float32 bytes per bucket (DDP's default bucket_cap_mb)

# the dtypes a point-to-point payload may have, by their code in the header
DTYPES = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16, torch.bfloat16,
          torch.float32, torch.float64)


def bucket_shapes(shapes: Sequence[Sequence[int]], cap_bytes: int = BUCKET_CAP_BYTES) -> List[List[torch.Size]]:
    """Consecutive parameter shapes in buckets of at most ``cap_bytes`` of float32 (a larger one alone):
    the cut the performance model prices (:func:`workbench.perfmodel.paradigms.compressed_messages.delta_buckets`)."""
    return [[torch.Size(s) for s in b] for b in delta_buckets(shapes, cap_bytes)]


def bucket_numels(shapes: Sequence[Sequence[int]]) -> List[int]:
    """Each bucket's element count (:func:`bucket_shapes`): what the analytic byte counts sum over."""
    return [sum(s.numel() for s in b) for b in bucket_shapes(shapes)]


class DeltaAverager:
    """Average a flat delta over the ranks of ``group`` through ``compressor``, bucket by bucket,
    metered; :meth:`pop_stats` gives the compressed trainer's per-step fields."""

    def __init__(self, compressor: Compressor, meter: Meter, shapes: Sequence[Sequence[int]], group=None,
                 seed: int = 0) -> None:
        self.state = CompressionHookState(compressor, meter, group, seed)
        self.state.close()  # its thread pool serves DDP's hook; here the buckets go in order on this thread
        self.buckets = bucket_shapes(shapes)
        self.rounds = 0  # averages since the last pop_stats

    @property
    def compressor(self) -> Compressor:
        return self.state.compressor

    def average(self, flat: torch.Tensor) -> torch.Tensor:
        """The mean over the ranks of ``flat`` (every rank's delta, same length), as the compressor
        decodes it; ``flat`` is overwritten with it and returned."""
        s, off = self.state, 0
        for i, shapes in enumerate(self.buckets):
            n = sum(sh.numel() for sh in shapes)
            info = BucketInfo(index=i, step=s.step, rank=s.rank, world=s.world, shapes=tuple(shapes), seed=s.seed)
            s.reduce_bucket(flat[off: off + n], info, last=i == len(self.buckets) - 1)
            off += n
        assert off == flat.numel(), f"the buckets cover {off} of {flat.numel()} elements"
        self.rounds += 1
        return flat

    def pop_stats(self) -> dict:
        """The rounds since the last call: encode/decode/collective ms, payload and dense bytes and
        their ratio (:meth:`CompressionHookState.pop_stats`); empty where no round ran."""
        stats = self.state.pop_stats()
        done, self.rounds = self.rounds, 0
        return stats if done else {}

    def bucket_profile(self) -> list:
        return self.state.bucket_profile()

    def state_dict(self) -> dict:
        return self.state.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.state.load_state_dict(state)


def send_payload(meter: Meter, payload: torch.Tensor, dst: int, category: str, control: str, tag: int,
                 group=None) -> list:
    """Start sending ``payload`` (any dtype, any length, possibly empty) to ``dst``: a header of its
    element count and dtype (``control``), then its bytes (``category``) on ``tag`` and ``tag + 1``;
    returns the works to wait for."""
    flat = payload.detach().reshape(-1).contiguous().cpu()
    head = torch.tensor([flat.numel(), DTYPES.index(flat.dtype)], dtype=torch.int64)
    works = [meter.isend(head, dst, control, tag, group)]
    if flat.numel():
        works.append(meter.isend(flat, dst, category, tag + 1, group))
    return works + [_Keep(head, flat)]


def recv_payload(meter: Meter, src: int, category: str, control: str, tag: int, group=None) -> torch.Tensor:
    """Receive what :func:`send_payload` sent from ``src``."""
    head = torch.zeros(2, dtype=torch.int64)
    meter.recv(head, src, control, tag, group)
    out = torch.empty(int(head[0]), dtype=DTYPES[int(head[1])])
    if out.numel():
        meter.recv(out, src, category, tag + 1, group)
    return out


class _Keep:
    """Holds a send's buffers until its works are waited for (a finished work to wait on)."""

    def __init__(self, *tensors: torch.Tensor) -> None:
        self.tensors = tensors

    def wait(self) -> None:
        self.tensors = ()
