"""What each rank of a profile runs (:mod:`workbench.perfmodel.profile.spawn` starts them): the
compute, optimizer and link levels (``measure.measure_ranks``), DDP's buckets and when each is
ready, the forward's share, the codecs, the loops of the layers above and of DDP, and every
collective a run will issue, timed in the loop. Rank 0 returns the result; the others None.
"""
from __future__ import annotations

import copy
import statistics
import time
from typing import Callable, Dict, List, Optional

from workbench.perfmodel.profile.measure import (LOOP_PASSES, READY_PASSES, _median_time, aligned_loop_s,
                                                 ddp_loop_s, lockstep, measure_collectives, measure_ranks,
                                                 step_collectives_loop_s)


def span_only(model, spec, b: int, meter, steps: int, world: int) -> tuple:
    """``host_span``'s part: the lockstep span with all ranks released together, on a batch drawn as
    ``measure_ranks`` draws it: about 5 s of releases, at least ``steps``. More do not steady it:
    the spread is between launches (how the ranks land on the cores), not samples."""
    import torch
    cpu = torch.device("cpu")
    x = torch.randn(b, spec.channels, spec.image_size, spec.image_size)
    y = torch.randint(0, spec.num_classes, (b,))
    return lockstep(model, x, y, meter, cpu, cpu, steps, levels=[world], seconds=5 / world, max_reps=1000)


def ddp_buckets(model, x, y, cap: float) -> List[dict]:
    """DDP's buckets as they are after its rebuild at the end of step 1, and when within backward
    DDP hands each to its hook (``ready``, a share of the backward up to the last bucket's call,
    which is 1: what follows it is the reducer's finalization, which waits for the collectives): a
    bucket's collective cannot start earlier. The median of ``READY_PASSES`` backward passes."""
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP
    ddp = DDP(copy.deepcopy(model), bucket_cap_mb=cap)
    seen: List[dict] = []

    def hook(state, bucket):
        seen.append({"numel": bucket.buffer().numel(), "shapes": [tuple(p.shape) for p in bucket.parameters()],
                     "at": time.perf_counter()})
        fut = torch.futures.Future()
        fut.set_result(bucket.buffer())
        return fut

    ddp.register_comm_hook(None, hook)
    ready: List[List[float]] = []
    for i in range(2 + READY_PASSES):
        seen.clear()
        ddp.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(ddp(x), y)
        t0 = time.perf_counter()
        loss.backward()
        if i >= 2:  # after DDP's bucket rebuild at the end of step 1
            last = max(seen[-1]["at"] - t0, 1e-9)
            ready.append([min(1.0, max(0.0, (s["at"] - t0) / last)) for s in seen])
    return [{"numel": s["numel"], "shapes": s["shapes"], "ready": statistics.median(r[j] for r in ready)}
            for j, s in enumerate(seen)]


def forward_share(model, x, y, steps: int) -> float:
    """The forward's share of forward+backward, on this rank alone."""
    import torch
    cpu = torch.device("cpu")

    def fwd():
        with torch.no_grad():
            model(x)

    def both():
        model.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(x), y).backward()
    tf, tb = _median_time(fwd, steps, cpu), _median_time(both, steps, cpu)
    return min(0.9, max(0.05, tf / tb)) if tb > 0 else 1 / 3


def shared_codecs(codecs: dict, buckets, compressors, codec_fn, world: int, rank: int) -> None:
    """Each codec timed again with every rank encoding at once, as the ranks' hooks do in a run
    (ranks sharing cores slow a codec by more than they slow the compute): rank 0's ``codecs``
    gain ``codec_shared_s``, the ranks' mean per bucket."""
    import torch.distributed as dist
    dist.barrier()
    together = codec_fn(buckets, compressors, world)
    got: List[Optional[dict]] = [None] * world
    dist.all_gather_object(got, {k: v["codec_s"] for k, v in together.items()})
    if rank == 0:
        for k in codecs:
            codecs[k]["codec_shared_s"] = [statistics.mean(g[k][i] for g in got) for i in range(len(buckets))]


def collective_items(model, buckets, codecs: dict) -> list:
    """Every collective a run of these paradigms issues, at its size and dtype (DDP's buckets, a
    flat model for BMUF and local SGD, each codec's payloads), and each step's whole set in a
    step's order (DDP's buckets; each codec's payloads): ``[sorted items, {name: step's items}]``."""
    found = {("allreduce", "float32", 4 * bk["numel"]) for bk in buckets}
    found.add(("allreduce", "float32", 4 * sum(p.numel() for p in model.parameters())))
    for c in codecs.values():
        found |= {(m["collective"], m.get("dtype", "float32"), m["bytes"]) for ms in c["payloads"] for m in ms}
    steps_of = {"sync": [("allreduce", "float32", 4 * bk["numel"]) for bk in buckets]}
    steps_of.update({name: [(m["collective"], m.get("dtype", "float32"), m["bytes"]) for ms in c["payloads"]
                            for m in ms] for name, c in codecs.items()})
    return [sorted(found), steps_of]


def loop_reps(step: Callable[[], None]) -> int:
    """Releases per timed loop: about 0.5 s of backward, at most 60 (a few-ms step's median over
    fewer releases scatters), at least 3 where a backward takes seconds; agreed on by the ranks."""
    import torch
    import torch.distributed as dist
    n = torch.tensor([max(3, min(60, int(0.5 / max(_median_time(step, 2, torch.device("cpu")), 1e-6))))],
                     dtype=torch.int64)
    dist.all_reduce(n, op=dist.ReduceOp.MAX)
    return int(n.item())


def timed_loops(model, step, x, y, cap: float, meter, make_optimizer, loop_fns, steps_of: dict, reps: int,
                progress) -> Dict[str, List[float]]:
    """Every loop's readings: the layers' above (``loop_fns``), the one-float ``aligned`` loop, DDP's
    own through the meter's all-reduce hook (as ``trainer=sync`` runs it), and each step's whole set
    of collectives. Timed in interleaved passes, the median kept later: a reading of a few-ms loop
    spans a third of a second, and a slow stretch on a shared host can fill a whole one, but not
    one reading in each of passes seconds apart. A loop of long steps (fewer than 10 periods in
    0.5 s) spans seconds in one reading already, and three would triple a large model's profile."""
    import torch
    from workbench.meter import AllreduceHookState, metered_allreduce_hook
    cpu = torch.device("cpu")
    passes: Dict[str, List[float]] = {}
    for _ in range(LOOP_PASSES if reps >= 10 else 1):
        for name in sorted(loop_fns):
            with progress.stage(name):
                passes.setdefault(name, []).append(loop_fns[name](model, step, meter, cpu, make_optimizer, reps,
                                                                  batch=(x, y), bucket_cap_mb=cap))
        with progress.stage("aligned"):
            passes.setdefault("aligned", []).append(aligned_loop_s(meter, cpu, step, reps))
        with progress.stage("ddp"):
            passes.setdefault("ddp", []).append(ddp_loop_s(model, x, y, cap, meter, cpu, reps,
                                                           hook=(AllreduceHookState(meter), metered_allreduce_hook)))
        meter.pop()
        for name in sorted(steps_of):
            with progress.stage(f"collectives/{name}"):
                passes.setdefault(f"collectives/{name}", []).append(
                    step_collectives_loop_s(steps_of[name], meter, cpu, step, reps))
    return passes
