"""What the performance model needs to know about each compressor, measured: the payloads its
codec puts into collectives on each DDP bucket, its encode+decode time, and the loop of DDP with
its hook (:func:`hook_loops`, on every rank of the profile's group); for the messages the other
paradigms compress (:func:`measure_messages`): its point-to-point ``send`` and ``receive`` at
world 1 on the sizes a parameter server's shard and Stanza's activations take, and its ``reduce``
on the whole model's delta (BMUF, local SGD) and on the conv part (Stanza's CONV group). And what
the model needs to know about a compressor's wire format (:func:`message_codec`: its payload
bytes, ``Compressor.payload_bytes``), handed to the model by the trainers' specs. The profiler
(:mod:`workbench.perfmodel.profile`) calls :func:`measure_codecs` on rank 0 through the hook it is
handed, so the model's layer never imports the compressors (imports run down: compress uses
perfmodel, not the reverse).
"""
from __future__ import annotations

import math
import statistics
import time
from typing import Dict, List, Optional, Tuple

from workbench.compress import COMPRESSORS, BucketInfo, build_compressor


class _RecordingChannel:
    """Stands in for the compression hook's channel: returns what an all-reduce (the payload
    itself) or an all-gather (every rank's payload) would, and records the payloads."""

    def __init__(self, world: int) -> None:
        self.world, self.sent = world, []
        self.encode_s = self.decode_s = 0.0

    def timed(self, what):
        from contextlib import contextmanager

        @contextmanager
        def cm():
            t0 = time.perf_counter()
            yield
            setattr(self, f"{what}_s", getattr(self, f"{what}_s") + time.perf_counter() - t0)
        return cm()

    def exchange(self, collective, payload, category):
        self.sent.append({"collective": collective, "bytes": payload.numel() * payload.element_size(),
                          "category": category, "dtype": str(payload.dtype).removeprefix("torch.")})
        if collective == "allreduce":
            return payload
        return [payload.reshape(-1).clone() for _ in range(self.world)]


def _reduce_timed(comp, buckets: List[dict], start: int, world: int, repeats: int):
    """Each bucket's payloads and its ``reduce``'s seconds (the median of ``repeats`` steps after
    one that warms up and builds PowerSGD's Q)."""
    import torch
    per_step, payloads = [], None
    for r in range(repeats + 1):
        step_payloads, times = [], []
        for i, bk in enumerate(buckets):
            ch = _RecordingChannel(world)
            x = torch.randn(bk["numel"])
            info = BucketInfo(index=i, step=start + r, rank=0, world=world,
                              shapes=tuple(torch.Size(s) for s in bk["shapes"]), seed=0)
            t0 = time.perf_counter()
            comp.reduce(x, info, ch)
            times.append(time.perf_counter() - t0)
            step_payloads.append(ch.sent)
        if r:
            per_step.append(times)
        payloads = step_payloads
    return payloads, [statistics.median(t[i] for t in per_step) for i in range(len(buckets))]


def measure_codecs(buckets: List[dict], compressors: Dict[str, object], world: int, repeats: int = 3,
                   messages: Optional[dict] = None) -> Dict[str, dict]:
    """Per compressor: each bucket's payloads and encode+decode seconds (median of ``repeats``
    steps at a step late enough that every compressor compresses, e.g. after PowerSGD's start);
    with ``messages`` (:func:`measure_messages`' sizes) also the other paradigms' messages."""
    out = {}
    for name, ccfg in compressors.items():
        comp = build_compressor(ccfg, 0, world, 0)
        start = int(ccfg.get("start_iter", 0) or 0) + 2
        payloads, codec = _reduce_timed(comp, buckets, start, world, repeats)
        out[name] = {"collective": comp.collective, "payloads": payloads, "codec_s": codec}
        if messages:
            out[name].update(measure_messages(ccfg, world, repeats, **messages))
    return out


def measure_messages(ccfg, world: int, repeats: int, shapes, conv_tensors: int, p2p_sizes) -> dict:
    """Compressor ``ccfg``'s codec on the messages of the paradigms other than DDP (profile
    version 14): ``delta`` and ``conv``, its ``reduce`` (among ``world`` ranks, against a channel
    that returns the payload, as :func:`measure_codecs`) on the whole model cut as the averager
    cuts it (``shapes``: BMUF's and local SGD's delta, ``compress.delta.bucket_shapes``) and on the
    first ``conv_tensors`` parameters as one tensor (Stanza's CONV group), each ``{"payloads"``
    (every collective), ``"codec_s"`` (their sum)``}``; ``p2p``, where the compressor sends
    point to point, ``send`` and ``receive`` of an instance built with world 1 (error feedback
    included where its config asks) on a flat tensor of each of ``p2p_sizes`` elements, ``[{"numel",
    "bytes", "send_s", "receive_s"}]``, each the median of ``repeats`` after a warm-up."""
    import torch

    from workbench.compress.delta import bucket_shapes
    out = {}
    start = int(ccfg.get("start_iter", 0) or 0) + 2
    for key, parts in (("delta", bucket_shapes(shapes)), ("conv", [shapes[:conv_tensors]])):
        bks = [{"numel": sum(math.prod(s) for s in part), "shapes": [tuple(s) for s in part]} for part in parts if part]
        if bks:  # a compressor of its own: its state (residuals, PowerSGD's P and Q) is per bucket index
            payloads, codec = _reduce_timed(build_compressor(ccfg, 0, world, 0), bks, start, world, repeats)
            out[key] = {"payloads": [m for ms in payloads for m in ms], "codec_s": sum(codec)}
    if not COMPRESSORS[ccfg.name].point_to_point:
        return out
    one = build_compressor(ccfg, 0, 1, 0)
    points = []
    for n in sorted({int(n) for n in p2p_sizes if n > 0}):
        x = torch.randn(n)
        sends, receives, nbytes = [], [], 0
        for r in range(repeats + 1):
            info = BucketInfo(index=0, step=start + r, rank=0, world=1, seed=0)
            t0 = time.perf_counter()
            payload = one.send(x, info)
            t1 = time.perf_counter()
            one.receive(payload, n, info)
            t2 = time.perf_counter()
            if r:
                sends.append(t1 - t0)
                receives.append(t2 - t1)
            nbytes = payload.numel() * payload.element_size()
        points.append({"numel": n, "bytes": nbytes, "send_s": statistics.median(sends),
                       "receive_s": statistics.median(receives)})
    out["p2p"] = points
    return out


def message_codec(ccfg):
    """What the performance model needs of the compressor configured by ``ccfg`` (a
    ``compressor`` node) for a message other than DDP's buckets: its name, collective, meter
    category and wire format (:class:`workbench.perfmodel.paradigms.compressed_messages.MessageCodec`;
    the payload of one flat message of given parameter shapes is ``payload_bytes_of_shapes``)."""
    from functools import partial

    from workbench.perfmodel.paradigms.compressed_messages import MessageCodec
    cls = COMPRESSORS[ccfg.name]
    return MessageCodec(str(ccfg.name), cls.collective, cls.category, partial(_payload_of, cls, ccfg), cls.sent_bytes)


# The compressors the planner ranks beside each paradigm by default, where they can carry its messages
# (one representative of each family: a cast, a sparsifier, a sign, a low rank).
PLANNED = ("fp16", "topk", "efsignsgd", "powersgd")


def planned(*messages: Tuple[str, str]) -> List[str]:
    """The compressors of :data:`PLANNED` that can carry every ``(kind, transport)`` of
    ``messages`` (``workbench.compress.messages.can_carry``): the combinations a trainer plans."""
    from workbench.compress.messages import can_carry
    return [c for c in PLANNED if c in COMPRESSORS and all(can_carry(COMPRESSORS[c], k, t) for k, t in messages)]


def codec_for(comp, key: str = "compressor.name"):
    """The model's :func:`message_codec` of the compressor that ``key`` chooses under the run's
    ``compressor`` config ``comp`` (``same`` resolved; a schema's defaults for a compressor other
    than ``comp.name``), or None where that message goes dense."""
    from workbench.compress.messages import Message, codec_config
    node = codec_config(comp, Message("gradient", "p2p", key=key)) if comp is not None else None
    return None if node is None else message_codec(node)


def _payload_of(cls, ccfg, shapes) -> int:
    shapes = [tuple(s) for s in shapes]
    return int(cls.payload_bytes_of_shapes(ccfg, shapes, [sum(math.prod(s) for s in shapes)]))


def time_hook_loop(ccfg, model, step, meter, comm_device, make_optimizer, reps: int, *, batch, bucket_cap_mb: float,
                   **_) -> float:
    """Seconds per step of ``trainer=compressed``'s own loop on this group, its optimizer aside:
    zero_grad, forward and backward of a DDP-wrapped copy of ``model`` with this compressor's hook
    (:func:`~workbench.compress.hook.compression_hook`, its codec and metered collectives on the
    hook's thread) back to back, the ranks' mean of their median periods (``Profile.loops
    ["compressed/<name>"]``).

    Why, beside the codecs and a step's collectives timed apart: on the small CNN (3 ranks on 2
    cores) every compressor's row came out 10–25 % short when codec and collectives were priced
    from their own loops, while ResNet-18's were within 12 %: in a run the codec runs between a
    bucket's collectives, on a thread of its own, on cores the other ranks use, and what that costs
    is not the sum of the parts (docs/notes/2026-12-02-compressors-own-loop.md)."""
    import torch.distributed as dist

    from workbench.compress.hook import CompressionHookState, compression_hook
    from workbench.perfmodel.profile import ddp_loop_s
    x, y = batch
    state = CompressionHookState(build_compressor(ccfg, dist.get_rank(), dist.get_world_size(), 0), meter)

    def settle(step) -> None:
        state.passthrough = False
        state.step = int(ccfg.get("start_iter", 0) or 0)  # compressing from the first timed step
        step()  # builds the compressor's state (residuals, PowerSGD's Q)
    state.passthrough = True  # DDP rebuilds its buckets after the first step, as a run's settle_buckets
    try:
        return ddp_loop_s(model, x, y, bucket_cap_mb, meter, comm_device, reps, hook=(state, compression_hook),
                          settle=settle)
    finally:
        state.close()


def hook_loops(compressors: Dict[str, object]) -> Dict[str, object]:
    """The profile's loops of these compressors (name -> config), by the names the model looks up."""
    from functools import partial
    return {f"compressed/{name}": partial(time_hook_loop, ccfg) for name, ccfg in compressors.items()}
