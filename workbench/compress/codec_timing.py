"""What the performance model needs to know about each compressor, measured: the payloads its
codec puts into collectives on each DDP bucket, its encode+decode time, and the loop of DDP with
its hook (:func:`hook_loops`, on every rank of the profile's group). The profiler
(:mod:`workbench.perfmodel.profile`) calls :func:`measure_codecs` on rank 0 through the hook it is
handed, so the model's layer never imports the compressors (imports run down: compress uses
perfmodel, not the reverse).
"""
from __future__ import annotations

import statistics
import time
from typing import Dict, List

from workbench.compress import BucketInfo, build_compressor


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


def measure_codecs(buckets: List[dict], compressors: Dict[str, object], world: int, repeats: int = 3) -> Dict[str, dict]:
    """Per compressor: each bucket's payloads and encode+decode seconds (median of ``repeats``
    steps at a step late enough that every compressor compresses, e.g. after PowerSGD's start)."""
    import torch
    out = {}
    for name, ccfg in compressors.items():
        comp = build_compressor(ccfg, 0, world, 0)
        start = int(ccfg.get("start_iter", 0) or 0) + 2
        per_step = []
        payloads = None
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
            if r:  # the first step warms up (and builds PowerSGD's Q)
                per_step.append(times)
            payloads = step_payloads
        codec = [statistics.median(t[i] for t in per_step) for i in range(len(buckets))]
        out[name] = {"collective": comp.collective,
                     "payloads": payloads, "codec_s": codec}
    return out


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
