"""The one profiler: everything the performance model needs to know about a model on a machine,
measured, and cached under ``experiments/profiles/`` with what it was measured on.

A :class:`Profile` holds, for one model, data shape and per-worker batch, measured with
``ranks`` processes on this machine (gloo, one process group, the run's thread share per rank):

- ``t_c_at`` / ``t_f_at``: forward+backward seconds per sample of the conv part and the FC part when
  k = 1..ranks processes compute at once (ranks that share a host slow each other down: on 2 cores
  3 ranks take about 1.5× as long as one); ``fwd_share``: the forward's share of forward+backward;
- ``u``: optimizer seconds per parameter (SGD with momentum; also what a server pays to apply);
- ``alpha``, ``beta``: latency and bandwidth of one point-to-point message between two ranks, and
  ``beta_allreduce``, the ring all-reduce's per-rank bandwidth (they differ on shared memory);
- ``buckets``: DDP's gradient buckets as they are after its rebuild at step 1 (numel and shapes),
  and when within backward DDP hands each to its hook (``ready``, a share of the backward up to
  the last one's call);
- ``loops``: loops timed in place, seconds per worker step: DDP's own (:func:`ddp_loop_s`), and
  those of the layers above (the parameter server's: ``workbench.ps.profile``), handed in by the
  caller as the codecs are;
- ``codecs``: per compressor, per bucket, the payloads its codec puts into collectives (bytes,
  collective, meter category: exact, they are the bytes the meter will count) and its encode+decode
  seconds, measured by :func:`workbench.compress.profile.measure_codecs` (handed in by the caller):
  ``codec_s`` on rank 0 alone, ``codec_shared_s`` with every rank encoding at once, as a run's
  hooks do (:meth:`Profile.codec_s`).

:func:`measure_ranks` is the in-cluster part (used by ``trainer=stanza`` before it picks n_f and by
:func:`measure`, which spawns the ranks itself). Nothing here imports a trainer: the caller passes
the optimizer factory.
"""
from __future__ import annotations

import copy
import json
import os
import platform
import statistics
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

from workbench.perfmodel.stanza import StanzaInputs

PROFILE_VERSION = 13  # 2: free-running levels, lockstep spans, collectives timed at their sizes, α the floor;
# 3: collectives timed in situ, after a lockstep backward; 4: in a free-running loop, less the lockstep span;
# 5: the loops of the layers above timed too (the parameter server's); 6: codecs timed with every rank at
# once, and each step's collectives together in the loop; 7: the loop fns get the batch and DDP's bucket
# cap (the compressors' own loops, ``workbench.compress.profile``); 8: the conv and FC levels timed from
# no gradients, as a step runs, not adding into the last call's; 9: DDP's loop through the meter's
# all-reduce hook, as ``trainer=sync`` runs it, and the training loop's own bookkeeping per step timed
# (``Profile.bookkeeping_s``); 10: the in-loop collectives priced beyond the same loop with a one-float
# all-reduce (``loops["aligned"]``), not beyond the barrier-released span, which on a VM without AVX2
# exceeded the loop with ResNet-18's all-reduces and priced them at zero; 11: ``u`` timed with every
# parameter's gradient (it had the classifier's alone), and the collectives from an idle release too;
# 12: the loops timed in interleaved passes, their median kept (``loop_passes``: every reading). Whether
# its ranks were pinned to cores (``machine["pinned"]``, absent: not) is not a version: a cached profile
# serves the runs pinned as it was (``load_or_measure``); 13: when within backward each bucket is
# ready (``buckets[i]["ready"]``; without it the model takes the share of the parameters through it)
PROFILE_READABLE = 11  # the oldest version whose fields today's model reads: 12 changed how loops are timed, not
# what a profile holds, so a round stored with its version-11 profile is still scored from it (``bench crossover``)
READY_PASSES = 5  # backward passes timed for when DDP hands each bucket to its hook, their median kept
LOOP_PASSES = 3  # a loop of short steps timed this many times, interleaved with the others, its median kept


def _median_time(fn, steps: int, device, warmup: bool = True) -> float:
    import torch
    times = []
    for i in range(steps + int(warmup)):  # a first call warms up allocators and kernels
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        if i or not warmup:
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def free_running_period(body: Callable[[int], None], reps: int) -> float:
    """This rank's median seconds between the ends of ``body(i)`` called back to back, over
    ``reps`` periods after the first few, left out while the ranks fall into the loop's skew (they
    start together, after a barrier): 3, or 1 where ``reps`` < 10 (a step of seconds, VGG-16:
    dozens of payloads, 3 periods each)."""
    warm = 3 if reps >= 10 else 1
    ends = []
    for i in range(reps + warm + 1):
        body(i)
        ends.append(time.perf_counter())
    return statistics.median(b - a for a, b in zip(ends[warm:], ends[warm + 1:]))


def mean_over_ranks(value: float, meter, comm_device, count: int) -> float:
    """Every rank's ``value`` summed and divided by ``count`` (the ranks that timed something),
    the same on every rank."""
    import torch
    import torch.distributed as dist
    per = torch.tensor([value], dtype=torch.float64, device=comm_device)
    meter.all_reduce(per, "profile", op=dist.ReduceOp.SUM)
    return per.item() / count


def measure_ranks(model, spec, b: int, meter, device, comm_device, steps: int,
                  make_optimizer: Callable, spans: bool = True) -> dict:
    """Measure compute, optimizer and link costs with every rank of the current group taking part.

    Compute times are measured at every concurrency k = 1..N (ranks 0..k-1 compute at once, the
    others wait), because ranks that share a host (CPU cores, memory bandwidth, one GPU) slow each
    other down. Latency and bandwidth come from a ping-pong between rank 0 and the last rank;
    all-reduce bandwidth from all ranks. The model's weights, buffers and the RNG are restored
    afterwards, so a profiled run trains exactly like an unprofiled one. All traffic is metered as
    ``profile``. Returns ``t_c_at``, ``t_f_at`` (s/sample), ``u`` (s/parameter), ``alpha`` (s),
    ``beta``, ``beta_allreduce`` (bytes/s), and with ``spans`` :func:`lockstep`'s ``span_at`` (s/batch)."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    rank, world = dist.get_rank(), dist.get_world_size()
    saved = copy.deepcopy(model.state_dict())
    rng = torch.random.get_rng_state()
    x = torch.randn(b, spec.channels, spec.image_size, spec.image_size, device=device)
    y = torch.randint(0, spec.num_classes, (b,), device=device)
    with torch.no_grad():
        a = int(model.features(x[:1]).numel())

    # Each call starts from no gradients, as a training step does (zero_grad(set_to_none=True)):
    # backward then hands its gradients over instead of adding them into .grad. The adding made
    # ResNet-18's conv pass 3–7 % slower here, side by side (docs/planner.md, "Gradients that pile up")
    def conv():
        model.zero_grad(set_to_none=True)
        h = model.features(x)
        h.backward(torch.ones_like(h))

    def fc():
        model.zero_grad(set_to_none=True)
        h = torch.randn(b, a, device=device, requires_grad=True)
        F.cross_entropy(model.classifier(h), y).backward()

    conv()  # warm-up, once: the levels below are timed without one
    fc()
    # Free-running levels: the k ranks each run back-to-back calls after one common start, so
    # their work overlaps as asynchronous workers' does (single timed calls of a few ms do not
    # overlap: each rank runs in its own scheduler slot, and the level came out near one rank alone).
    # At least 0.2 s of calls per level, the same count on every rank (all overlap to the end).
    counts = torch.tensor([max(steps, min(50, int(0.2 / max(_median_time(fn, 1, device), 1e-6)))) for fn in (conv, fc)],
                          dtype=torch.float64, device=comm_device)
    meter.all_reduce(counts, "profile", op=dist.ReduceOp.MAX)
    counts = [int(c) for c in counts.cpu().tolist()]
    levels = torch.zeros(2 * world, dtype=torch.float64)
    for k in range(1, world + 1):
        for j, fn in enumerate((conv, fc)):
            meter.barrier("profile")
            if rank < k:
                t0 = time.perf_counter()
                for _ in range(counts[j]):
                    fn()
                levels[j * world + k - 1] = (time.perf_counter() - t0) / counts[j] / b
    meter.barrier("profile")
    levels = meter.all_reduce(levels.to(comm_device), "profile").cpu() / torch.arange(1, world + 1).repeat(2)
    t_c_at, t_f_at = tuple(levels[:world].tolist()), tuple(levels[world:].tolist())
    params = [p for p in model.parameters()]
    opt = make_optimizer(params)
    # with every parameter's gradient, as a step has them: SGD skips a parameter without one, and fc()
    # above left only the classifier's, so until profile v11 ``u`` timed ResNet-18's update of 5,130
    # of its 11.2 M parameters (0.2 ms a step where the whole update is tens of ms)
    model.zero_grad(set_to_none=True)
    F.cross_entropy(model(x), y).backward()
    u = _median_time(opt.step, steps, device) / sum(p.numel() for p in params)
    model.zero_grad(set_to_none=True)
    del opt

    peer = world - 1
    reps = max(steps, 9)  # transfers are cheap to repeat, and noisier than compute
    meter.barrier("profile")

    def ping_pong(t) -> float:
        rtts = []
        for i in range(reps + 1):
            t0 = time.perf_counter()
            if rank == 0:
                meter.send(t, peer, "profile")
                meter.recv(t, peer, "profile")
            elif rank == peer:
                meter.recv(t, 0, "profile")
                meter.send(t, 0, "profile")
            if i:
                rtts.append(time.perf_counter() - t0)
        return min(rtts)

    # Latency from a one-float round trip; bandwidth from the slope between it and a message of at
    # least 4 MB (one CONV worker's activations, if larger), so the latency noise cannot swamp it.
    # Both are the link's floor, the fastest round trip: with more ranks than cores the median
    # round trip is the time a descheduled peer takes to run again (1.7 ms here, against a 65 µs
    # floor), host contention the compute levels already carry.
    rtt_small = ping_pong(torch.zeros(1, device=comm_device))
    big = torch.zeros(max(a * b, 1 << 20), device=comm_device)
    rtt_big = ping_pong(big)
    alpha = rtt_small / 2
    beta = 2 * (big.numel() - 1) * 4 / max(rtt_big - rtt_small, 0.5 * rtt_big)
    meter.barrier("profile")
    # The ring all-reduce's bandwidth the same way: one float, then 4-16 MB (the conv part's size).
    n_ar = min(max(sum(p.numel() for p in model.features.parameters()), 1 << 20), 1 << 22)
    tiny, buf = torch.zeros(1, device=comm_device), torch.zeros(n_ar, device=comm_device)
    t_tiny = _median_time(lambda: meter.all_reduce(tiny, "profile"), reps, torch.device("cpu"))
    t_ar = _median_time(lambda: meter.all_reduce(buf, "profile"), reps, torch.device("cpu"))
    beta_ar = 2 * (world - 1) / world * (n_ar - 1) * 4 / max(t_ar - t_tiny, 0.5 * t_ar) if world > 1 else float("inf")

    own = torch.tensor([u, alpha if rank == 0 else 0.0, beta if rank == 0 else 0.0, beta_ar],
                       dtype=torch.float64, device=comm_device)
    meter.all_reduce(own, "profile")
    v = own.cpu().tolist()
    span_at = lockstep(model, x, y, meter, device, comm_device, steps) if spans else ()
    model.zero_grad(set_to_none=True)
    model.load_state_dict(saved)  # batch-norm statistics and dropout's RNG as they were
    torch.random.set_rng_state(rng)
    return {"t_c_at": t_c_at, "t_f_at": t_f_at, "u": v[0] / world, "alpha": v[1], "beta": v[2],
            "beta_allreduce": v[3] / world, "span_at": span_at}


def lockstep(model, x, y, meter, device, comm_device, min_reps: int, levels: Optional[List[int]] = None,
             seconds: float = 0.3, max_reps: int = 30) -> Tuple[float, ...]:
    """What a synchronous step's compute costs when every rank must finish before any goes on,
    measured as it happens in one: ``span_at[k]``, with ranks 0..k−1 released together, the
    seconds from the first release to the *last* rank's end of zero_grad + forward + backward of
    one batch (the slowest worker sets the pace: on an oversubscribed host that is whichever rank
    the scheduler left waiting, about 2× one rank alone for 3 ranks on 2 cores where the mean
    rate is 1.5×). One host, one monotonic clock, so the ranks' timestamps compare. Medians over
    at least ``min_reps`` releases and ``seconds`` of one rank's compute per level, at most
    ``max_reps`` beyond ``min_reps``; ``levels``: those k only (default 1..N)."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    rank, world = dist.get_rank(), dist.get_world_size()

    def step():
        model.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()

    def span(k: int) -> float:
        meter.barrier("profile")
        t0 = t1 = 0.0
        if rank < k:
            t0 = time.perf_counter()
            step()
            t1 = time.perf_counter()
        # first release, last end (the max of −t0 is −min t0)
        ts = torch.tensor([-t0 if rank < k else -float("inf"), t1], dtype=torch.float64, device=comm_device)
        meter.all_reduce(ts, "profile", op=dist.ReduceOp.MAX)
        a, b_ = ts.cpu().tolist()
        return b_ + a

    one = _median_time(step, 3, device)
    # every rank must issue the same number of collectives: each rank's own timing gave its own
    # count, and 9 ranks on 2 cores disagreed and deadlocked (one rank on to DDP's broadcast, eight
    # in this barrier); the largest count, agreed on
    n = torch.tensor([max(min_reps, min(max_reps, int(seconds / max(one, 1e-6))))], dtype=torch.int64,
                     device=comm_device)
    meter.all_reduce(n, "profile", op=dist.ReduceOp.MAX)
    reps = int(n.item())
    return tuple(statistics.median(span(k) for _ in range(reps)) for k in (levels or range(1, world + 1)))


def _collective_once(coll: str, dtype: str, nbytes: float, meter, comm_device) -> Callable[[], None]:
    """A call that issues one ``coll`` (all-reduce, or the hook's all-gather) of ``nbytes`` of
    ``dtype`` through the meter, on a buffer made once."""
    import torch
    dt = getattr(torch, dtype)
    t = torch.zeros(max(1, int(nbytes) // torch.tensor([], dtype=dt).element_size()), dtype=dt, device=comm_device)

    def once():
        if coll == "allreduce":
            meter.all_reduce(t, "profile")
        else:
            meter.all_gather_varlen(t, "profile")
    return once


def measure_collectives(items, meter, comm_device, step: Optional[Callable[[], None]] = None,
                        reps: int = 9, base_s: float = 0.0) -> Dict[str, float]:
    """Seconds of each collective at the sizes and dtypes a run will issue, every rank taking part
    (``items``: (collective, dtype, bytes), the same list on every rank), as
    ``"<collective>:<dtype>:<bytes>"`` -> seconds.

    Timed *in the loop*: with ``step`` (one batch's zero_grad+forward+backward), every rank runs
    ``step(); collective`` back to back, as a training loop does, and the collective costs the
    loop's median period less ``base_s``, the period of the same loop whose collective is one float
    (:func:`aligned_loop_s`). On a host whose ranks outnumber its cores a collective's ranks leave
    it at different times, and the next step starts as skewed: 3 ranks on 2 cores here left a
    605 KB all-reduce 2.5 ms apart, and a collective timed after a barrier-released backward (this
    function until 2026-12-01) missed that skew. Until 2026-12-03 the base was the lockstep span
    (:func:`lockstep`): on a VM without AVX2 ResNet-18's span (1.557 s) exceeded the loop with its
    44.7 MB all-reduce (1.459 s), so the all-reduce cost nothing and ``sync`` behind 1 Gbit/s was
    predicted 20 % short. The one-float loop is no cure on 3 ranks and 2 cores either: it releases
    the ranks together, and on the next VM it was the slower loop (1.675 s against 1.423 s with the
    44.7 MB all-reduce), so the cost still clips to 0 there (docs/planner.md, "Profile v10–v11").
    It is kept as the base because it is the same kind of loop as what it is subtracted from. The
    cost is far from linear in size, so the model looks these up for this host's rows instead of
    an α-β line. Without ``step``: the median of ``reps`` collectives from a common idle release
    (rank 0's time)."""
    import torch.distributed as dist
    out: Dict[str, float] = {}
    for coll, dtype, nbytes in items:
        once = _collective_once(coll, dtype, nbytes, meter, comm_device)
        if step is None:
            times = []
            for i in range(reps + 1):
                meter.barrier("profile")
                t1 = time.perf_counter()
                once()
                if i:
                    times.append(time.perf_counter() - t1)
            out[f"{coll}:{dtype}:{int(nbytes)}"] = statistics.median(times)
            continue
        meter.barrier("profile")
        # the ranks' medians agree to within noise; every rank takes the same value
        period = mean_over_ranks(free_running_period(lambda i: (step(), once()), reps), meter, comm_device,
                                 dist.get_world_size())
        out[f"{coll}:{dtype}:{int(nbytes)}"] = max(period - base_s, 0.0)
    return out


def aligned_loop_s(meter, comm_device, step: Callable[[], None], reps: int) -> float:
    """Seconds per period of ``step(); all-reduce of one float`` on every rank, the ranks' mean
    (``Profile.loops["aligned"]``): the loop of :func:`step_collectives_loop_s` with nothing to
    carry, whose collective only re-aligns the ranks each step. What a step's collectives cost is
    their loop's period beyond this one (``Profile.beyond_step_s``)."""
    return step_collectives_loop_s([("allreduce", "float32", 4)], meter, comm_device, step, reps)


def block_loop_s(meter, comm_device, step: Callable[[], None], reps: int, block: int,
                 sync: Optional[Callable[[], None]] = None) -> float:
    """Seconds per step of ``block`` free-running steps and then an all-reduce of one float (or
    ``sync``, a trainer's own block end: BMUF's ``Profile.loops["block/<block>"]``), on every rank,
    the ranks' mean over at least 3 blocks (profiles before 2026-12-05 night: ``"aligned/<block>"``): the
    compute of a protocol that re-aligns its ranks once a block (BMUF, local SGD). On a shared host
    that is neither the lockstep span (a step's worst rank, paid every step) nor the mean rank's
    rate: the scheduler's unfairness evens out over a block only in part (the small CNN's 3 ranks on
    2 cores: span 12.7 ms, the mean rank 6.3, BMUF's and local SGD's steps 10.3–11.3 ms)."""
    once = sync or _collective_once("allreduce", "float32", 4, meter, comm_device)
    import torch.distributed as dist

    def body(i: int = 0):
        for _ in range(block):
            step()
        once()
    meter.barrier("profile")
    return mean_over_ranks(free_running_period(body, max(3, reps // block)) / block, meter, comm_device,
                           dist.get_world_size())


def step_collectives_loop_s(items, meter, comm_device, step: Callable[[], None], reps: int) -> float:
    """Seconds per period of a loop of ``step()`` and then a step's whole set of collectives
    (``items``: (collective, dtype, bytes), in a step's order), the ranks' mean.

    A collective timed alone in the loop (:func:`measure_collectives`) costs the wait that
    re-aligns the ranks after their step as well as its own exchange, and a step with several
    collectives re-aligns once: on ResNet-18 (steps of a second, 3 ranks on 2 cores) each of
    PowerSGD's six small all-reduces timed alone read 34–311 ms beyond the span, 1.1 s summed,
    where its runs' steps had about 0.3 s beyond the span for their codec and collectives together
    (docs/planner.md, "A step's collectives timed together")."""
    import torch.distributed as dist
    calls = [_collective_once(c, d, nb, meter, comm_device) for c, d, nb in items]

    def body(i: int = 0):
        step()
        for once in calls:
            once()
    meter.barrier("profile")
    return mean_over_ranks(free_running_period(body, reps), meter, comm_device, dist.get_world_size())


def ddp_loop_s(model, x, y, bucket_cap_mb: float, meter, comm_device, reps: int, hook=None,
               settle: Optional[Callable[[Callable[[], None]], None]] = None) -> float:
    """Seconds per step of DDP's own loop on this group: zero_grad, forward and backward of a
    DDP-wrapped copy of ``model`` (its reducer all-reducing the buckets during backward) back to
    back, the ranks' mean of their median periods (``Profile.loops["ddp"]``). ``hook``: a
    ``(state, fn)`` comm hook to register instead of the reducer's all-reduce, and ``settle(step)``
    runs after the first step (the layers above time their own hooks this way:
    ``workbench.compress.profile``).

    Why, beside the collectives timed in the loop: on 3 ranks and 2 cores the small CNN's
    ``trainer=sync`` step was 27 % longer than the lockstep span plus the bucket's all-reduce timed
    in the loop, with a fresh profile before every round (11.5 ms against 8.4), while BMUF's and local
    SGD's plain all-reduce of the same bytes was within +0.5 % and +11 %: what is left is DDP's
    reducer itself (its hook's future, the bucket copies, the division, the all-reduce issued from
    autograd's thread) on cores the other ranks are using."""
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP
    ddp = DDP(copy.deepcopy(model), bucket_cap_mb=bucket_cap_mb)
    if hook is not None:
        ddp.register_comm_hook(*hook)

    def step(i: int = 0):
        ddp.zero_grad(set_to_none=True)
        F.cross_entropy(ddp(x), y).backward()
    step()  # the reducer rebuilds its buckets after the first step
    if settle is not None:
        settle(step)
    meter.barrier("profile")
    return mean_over_ranks(free_running_period(step, reps), meter, comm_device, dist.get_world_size())


def boundary_floats(model, spec, device) -> int:
    """Floats per sample at the model's conv/FC boundary (the activations Stanza sends)."""
    import torch
    with torch.no_grad():
        was = model.training
        model.eval()
        out = model.features(torch.zeros(1, spec.channels, spec.image_size, spec.image_size, device=device))
        model.train(was)
    return int(out[0].numel())


def stanza_inputs(model, spec, b: int, a: int, meter, device, comm_device, steps: int, make_optimizer: Callable):
    """:class:`~workbench.perfmodel.stanza.StanzaInputs` of ``model`` at CONV batch ``b`` and ``a``
    boundary floats, measured by :func:`measure_ranks` with every rank of the group taking part
    (what ``trainer=stanza`` profiles before it picks n_f)."""
    m = measure_ranks(model, spec, b, meter, device, comm_device, steps, make_optimizer, spans=False)
    counts = model.param_counts()
    return StanzaInputs(t_c=m["t_c_at"][-1], t_f=m["t_f_at"][-1], a=a, p_c=counts["features"],
                        p_f=counts["classifier"], b=b, beta=m["beta"], alpha=m["alpha"],
                        beta_allreduce=m["beta_allreduce"], u=m["u"], t_c_at=m["t_c_at"], t_f_at=m["t_f_at"])


# ---------------------------------------------------------------------------------------------
# The profile of a model on a machine

@dataclass
class Profile:
    model: str
    data: str  # data set name
    input_shape: Tuple[int, int, int]  # channels, height, width
    batch: int  # per-worker batch b the compute was timed at
    ranks: int  # processes measured at once (t_c_at has this many entries)
    t_c_at: Tuple[float, ...]  # conv forward+backward, s/sample, with k = 1.. ranks computing
    t_f_at: Tuple[float, ...]  # FC forward+backward, s/sample
    fwd_share: float  # forward / (forward + backward) of the whole model, one rank alone
    u: float  # optimizer seconds per parameter
    alpha: float  # s per message (point-to-point, this machine)
    beta: float  # bytes/s point-to-point (this machine)
    beta_allreduce: float  # bytes/s per rank of the ring all-reduce (this machine)
    boundary: int  # floats per sample at the conv/FC boundary
    params_conv: int
    params_fc: int
    param_shapes: List[Tuple[int, ...]]
    bucket_cap_mb: float
    buckets: List[dict]  # DDP buckets after the rebuild: {"numel", "shapes", "ready": its hook's call, a share of backward}
    # (``ready`` up to the last bucket's call, which is 1; absent in profiles of version 12 and older)
    span_at: Tuple[float, ...] = ()  # s per batch from a common start to the last of k ranks' backward (lockstep)
    collectives: Dict[str, float] = field(default_factory=dict)  # "<collective>:<dtype>:<bytes>" -> s, measured here
    # the same collectives from a common idle release, no step around them (the ranks' host part of the
    # exchange when a link, not the cores, re-aligns them; ``measure_collectives`` without ``step``)
    collectives_idle: Dict[str, float] = field(default_factory=dict)
    # loops timed here: name -> s per worker step; "ddp": DDP's own (``ddp_loop_s``), and those of the
    # layers that run them (``measure(loop_fns=...)``), e.g. "ps/async", "ps/sync": the parameter
    # server's, ranks − 1 workers and one server; "compressed/<c>": DDP with compressor c's hook;
    # "aligned/<B>": steps that re-align once every B (``block_loop_s``, BMUF's and local SGD's)
    loops: Dict[str, float] = field(default_factory=dict)
    loop_passes: Dict[str, List[float]] = field(default_factory=dict)  # each loop's readings, its median in ``loops``
    # compressor -> {"payloads": [[{collective, bytes, category}...] per bucket], "codec_s": [...] (rank 0
    # alone), "codec_shared_s": [...] (every rank at once, the ranks' mean)}
    codecs: Dict[str, dict] = field(default_factory=dict)
    machine: dict = field(default_factory=dict)  # where and how it was measured
    speedup: float = 1.0  # compute divided by this (planning for faster hardware)
    version: int = PROFILE_VERSION

    # -- derived -----------------------------------------------------------------------------------
    @property
    def readable(self) -> bool:
        """Whether today's model reads this profile's fields (a stored round is scored from it, not
        measured again): versions ``PROFILE_READABLE`` to ``PROFILE_VERSION``."""
        return PROFILE_READABLE <= self.version <= PROFILE_VERSION

    @property
    def params(self) -> int:
        return self.params_conv + self.params_fc

    @property
    def model_bytes(self) -> int:
        return 4 * self.params

    def t_c(self, k: int = 1) -> float:
        """Conv seconds per sample with k ranks computing at once on one host (beyond the profiled
        ranks, the host time-shares: the last level scaled by k / ranks)."""
        return _at(self.t_c_at, k) / self.speedup

    def t_f(self, k: int = 1) -> float:
        return _at(self.t_f_at, k) / self.speedup

    def compute_s(self, k: int = 1, batch: Optional[int] = None) -> float:
        """Forward+backward seconds of one worker's batch with k ranks computing at once."""
        return (batch or self.batch) * (self.t_c(k) + self.t_f(k))

    def sync_compute_s(self, k: int = 1, batch: Optional[int] = None) -> float:
        """Forward+backward of one batch as a synchronous step pays it with k ranks on one host:
        until the *last* of them is done (``span_at``; without it, :meth:`compute_s`)."""
        if not self.span_at:
            return self.compute_s(k, batch)
        return _at(self.span_at, k) * (batch or self.batch) / self.batch / self.speedup

    def host_slowdown(self, k: int) -> float:
        """How much longer host work takes on every rank at once, k ranks on one host, than on one
        rank alone (a codec in DDP's hook runs on every rank in the same phase of the step)."""
        if not self.span_at:
            return self.compute_s(k) / self.compute_s(1)
        return _at(self.span_at, k) / self.span_at[0]

    def codec_s(self, compressor: str, i: int, k: int, shares_cores: bool) -> float:
        """Bucket ``i``'s encode+decode seconds for ``compressor`` with ``k`` ranks. On ranks with
        cores of their own, the time alone. On one host, the time with every profiled rank encoding
        at once (``codec_shared_s``), scaled to k ranks as the compute slows: a codec streams its
        bucket through memory, and the ranks' codecs slow each other by their own factor, not the
        compute's (ResNet-18, 3 ranks on 2 cores: 1.2–2.7× alone against the compute's 1.4×;
        docs/planner.md, "A step's collectives timed together, and the codecs with every rank at
        once"). Profiles without it: the time alone scaled as the compute slows."""
        c = self.codecs[compressor]
        if not shares_cores:
            return c["codec_s"][i] / self.speedup
        together = c.get("codec_shared_s")
        if together and self.ranks > 1:
            return together[i] * self.host_slowdown(k) / self.host_slowdown(self.ranks) / self.speedup
        return c["codec_s"][i] * self.host_slowdown(k) / self.speedup

    def beyond_step_s(self, loop: str) -> Optional[float]:
        """What the loop ``loop`` (``Profile.loops``) takes per period beyond the same loop of the
        step with a one-float all-reduce (``loops["aligned"]``; a profile without it: beyond the
        lockstep span of the profiled ranks), at least 0; None if it was not timed."""
        if loop not in self.loops:
            return None
        base = self.loops.get("aligned")
        if base is None:
            base = self.span_at[-1] if self.span_at else self.compute_s(self.ranks) * self.speedup
        return max(0.0, self.loops[loop] - base)

    def collective_s(self, collective: str, dtype: str, nbytes: float) -> Optional[float]:
        """The measured seconds of ``collective`` of ``nbytes`` in ``dtype`` with every profiled rank
        on this host (:func:`measure_collectives`), linear between measured sizes, the smallest's
        below them, scaled by size above; None if none of that collective and dtype was measured."""
        pts = sorted((int(k.split(":")[2]), v) for k, v in self.collectives.items()
                     if k.startswith(f"{collective}:{dtype}:"))
        if not pts:
            return None
        for (n0, t0), (n1, t1) in zip(pts, pts[1:]):
            if n0 <= nbytes <= n1:
                return t0 + (t1 - t0) * (nbytes - n0) / max(n1 - n0, 1)
        return pts[0][1] if nbytes < pts[0][0] else pts[-1][1] * nbytes / pts[-1][0]

    def bookkeeping_s(self) -> float:
        """Seconds a training step spends outside the trainer's step, in the loop every trainer
        runs (``Trainer.run``: the next batch, the meter's window, the step's records), timed on
        every profiled rank at once (``Profile.loops["bookkeeping"]``); 0 in a profile without it.
        Host work: a compute speed-up leaves it as it is."""
        return self.loops.get("bookkeeping", 0.0)

    def update_s(self, params: Optional[int] = None) -> float:
        return self.u * (self.params if params is None else params) / self.speedup

    def drifted(self, ratio: float) -> "Profile":
        """This profile on the same host running ``ratio`` times slower (``ratio`` < 1: faster), as
        a VM's speed drifts within an hour (ResNet-18's 3-rank lockstep span 1.28 s at 12:16 and
        1.55 s at 13:32 on one VM, no steal in ``vmstat``; docs/planner.md): every second it
        measured times ``ratio``, every rate it measured divided by it. The host is taken to slow
        down as a whole (compute, codecs, loopback collectives, the timed loops alike), which is
        the one assumption a single number can carry; the emulated links' shapers, being the
        cluster's and not the host's, are not touched. Unlike :meth:`with_speedup` (other hardware,
        where the loops timed here no longer apply) the model reads it as the same host, loops
        included. ``ratio`` comes from :func:`host_span` (``bench planner``'s drift guard)."""
        if ratio == 1.0:
            return self
        p = copy.deepcopy(self)
        times = lambda xs: tuple(v * ratio for v in xs)  # noqa: E731
        p.t_c_at, p.t_f_at, p.span_at = times(p.t_c_at), times(p.t_f_at), times(p.span_at)
        p.u, p.alpha = p.u * ratio, p.alpha * ratio
        p.beta, p.beta_allreduce = p.beta / ratio, p.beta_allreduce / ratio
        p.collectives = {k: v * ratio for k, v in p.collectives.items()}
        p.collectives_idle = {k: v * ratio for k, v in p.collectives_idle.items()}
        p.loops = {k: v * ratio for k, v in p.loops.items()}
        p.loop_passes = {k: list(times(v)) for k, v in p.loop_passes.items()}
        for c in p.codecs.values():
            for key in ("codec_s", "codec_shared_s"):
                if key in c:
                    c[key] = list(times(c[key]))
        p.machine = {**p.machine, "drift": p.machine.get("drift", 1.0) * ratio}
        return p

    def with_speedup(self, speedup: float) -> "Profile":
        p = copy.copy(self)
        p.speedup = speedup
        return p

    # -- files -------------------------------------------------------------------------------------
    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> "Profile":
        names = {f.name for f in fields(cls)}
        d = {k: v for k, v in d.items() if k in names}
        d["input_shape"] = tuple(d["input_shape"])
        d["t_c_at"], d["t_f_at"] = tuple(d["t_c_at"]), tuple(d["t_f_at"])
        d["span_at"] = tuple(d.get("span_at", ()))
        d["param_shapes"] = [tuple(s) for s in d["param_shapes"]]
        return cls(**d)

    def save(self, path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(self.to_json(), indent=1))
        tmp.replace(path)
        return path

    @classmethod
    def load(cls, path) -> "Profile":
        return cls.from_json(json.loads(Path(path).read_text()))

    def matches(self, key: dict) -> Optional[str]:
        """Why this profile cannot stand for ``key`` (model, data shape, batch), or None."""
        for k in ("model", "input_shape", "batch"):
            mine = getattr(self, k)
            if _norm(mine) != _norm(key[k]):
                return f"it was measured for {k}={_norm(mine)}, not {_norm(key[k])}"
        return None


def _norm(v):
    return tuple(v) if isinstance(v, (list, tuple)) else v


def _at(levels: Tuple[float, ...], k: int) -> float:
    k = max(1, int(k))
    if k <= len(levels):
        return levels[k - 1]
    return levels[-1] * k / len(levels)


def machine() -> dict:
    import torch
    return {"host": platform.node(), "cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
            "torch": torch.__version__, "python": platform.python_version(), "device": "cpu",
            "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S"), "load_average": _loadavg()}


def _loadavg():
    try:
        return list(os.getloadavg())
    except OSError:  # pragma: no cover - not on Linux
        return None


def profile_key(cfg) -> dict:
    """What a profile must match to stand for ``cfg``: model, input shape, per-worker batch."""
    from workbench import data as data_mod
    spec = data_mod.DATASETS[cfg.data.name].spec(cfg.data)
    return {"model": str(cfg.model.name), "input_shape": (spec.channels, spec.image_size, spec.image_size),
            "batch": int(cfg.data.batch_size)}


def cache_path(cfg, ranks: int, root="experiments") -> Path:
    """``experiments/profiles/<host>-<model>-<C>x<H>x<W>-b<batch>-r<ranks>.json``."""
    k = profile_key(cfg)
    shape = "x".join(str(v) for v in k["input_shape"])
    return Path(root) / "profiles" / f"{platform.node()}-{k['model']}-{shape}-b{k['batch']}-r{ranks}.json"


# ---------------------------------------------------------------------------------------------
# Measuring: spawn the ranks here, profile, return rank 0's result

def _spawned(rank: int, world: int, port: int, cfg, compressors, codec_fn, loop_fns, steps: int, queue,
             span_only: bool = False) -> None:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from workbench import data as data_mod
    from workbench.dist import pin_rank, threads_per_rank, yield_gloo_loops
    from workbench.meter import AllreduceHookState, Meter, metered_allreduce_hook
    from workbench.models import build_model
    os.environ["WORKBENCH_HOST_RANKS"] = str(world)
    pinned = pin_rank(cfg.cluster, rank, world)  # as the runs' ranks are (workbench.dist.init)
    torch.set_num_threads(threads_per_rank(cfg.cluster, world))
    store = dist.TCPStore("127.0.0.1", port, world, is_master=rank == 0)
    # gloo's default timeout (30 min), not cluster.timeout_s: the other ranks wait in a broadcast
    # while rank 0 times every codec alone, which took over 120 s for VGG-16's buckets here
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world)
    if pinned is not None:
        yield_gloo_loops()
    try:
        spec = data_mod.DATASETS[cfg.data.name].spec(cfg.data)
        torch.manual_seed(cfg.seed)
        model = build_model(cfg, spec)
        b = int(cfg.data.batch_size)
        meter = Meter(cfg.cluster.timeout_s)
        cpu = torch.device("cpu")
        if span_only:  # host_span: the lockstep span alone, on a batch drawn as measure_ranks draws it
            x = torch.randn(b, spec.channels, spec.image_size, spec.image_size)
            y = torch.randint(0, spec.num_classes, (b,))
            # about 5 s of releases, at least ``steps``. More do not steady it: the small CNN's median
            # of 1,000 releases read 11.3–13.9 ms in four launches within two minutes (of 30: 11.1–
            # 13.6), so the spread is between launches (how the ranks land on the cores), not samples
            span_at = lockstep(model, x, y, meter, cpu, cpu, steps, levels=[world], seconds=5 / world, max_reps=1000)
            dist.barrier()
            if rank == 0:
                queue.put({"span_at": span_at})
            return

        def make_optimizer(ps):
            o = cfg.optim
            return torch.optim.SGD(ps, lr=o.lr, momentum=o.momentum, weight_decay=o.weight_decay, nesterov=o.nesterov)

        m = measure_ranks(model, spec, b, meter, cpu, cpu, steps, make_optimizer)
        # DDP's buckets as they are after its rebuild at the end of step 1 (record them at step 3)
        cap = float(cfg.trainer.get("bucket_cap_mb", 25.0) or 25.0)
        ddp = DDP(copy.deepcopy(model), bucket_cap_mb=cap)
        seen: List[dict] = []

        def hook(state, bucket):
            seen.append({"numel": bucket.buffer().numel(), "shapes": [tuple(p.shape) for p in bucket.parameters()],
                         "at": time.perf_counter()})
            fut = torch.futures.Future()
            fut.set_result(bucket.buffer())
            return fut

        ddp.register_comm_hook(None, hook)
        x = torch.randn(b, spec.channels, spec.image_size, spec.image_size)
        y = torch.randint(0, spec.num_classes, (b,))
        # when, within backward, DDP hands each bucket to its hook (``ready``, a share of the
        # backward up to the last bucket's call, which is 1: what follows it is the reducer's
        # finalization, which waits for the collectives): a bucket's collective cannot start
        # earlier. A share of the parameters stood for it until 2026-12-05, and ResNet-18's first
        # bucket (layer4, 65 % of the parameters) was taken to be ready at 65 % of backward, where
        # layer4's backward is about a quarter of the work (a ResNet's stages each do about as
        # much): DDP handed it over at 22-26 % (docs/planner.md, "When a bucket is ready")
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
        buckets = [{"numel": s["numel"], "shapes": s["shapes"], "ready": statistics.median(r[j] for r in ready)}
                   for j, s in enumerate(seen)]
        # the forward's share of forward+backward, rank 0 alone (the others wait at the barrier)
        share = 1 / 3
        if rank == 0:
            def fwd():
                with torch.no_grad():
                    model(x)

            def both():
                model.zero_grad(set_to_none=True)
                torch.nn.functional.cross_entropy(model(x), y).backward()
            tf, tb = _median_time(fwd, steps, cpu), _median_time(both, steps, cpu)
            share = min(0.9, max(0.05, tf / tb)) if tb > 0 else share
            codecs = codec_fn(buckets, compressors, world) if codec_fn is not None and compressors else {}
        if codec_fn is not None and compressors and world > 1:
            # again with every rank encoding at once, as the ranks' hooks do in a run: here 3 ranks
            # on 2 cores slowed a codec by more than they slow the compute (docs/planner.md)
            dist.barrier()
            together = codec_fn(buckets, compressors, world)
            got: List[Optional[dict]] = [None] * world
            dist.all_gather_object(got, {k: v["codec_s"] for k, v in together.items()})
            if rank == 0:
                for k in codecs:
                    codecs[k]["codec_shared_s"] = [statistics.mean(g[k][i] for g in got) for i in range(len(buckets))]
        # every collective a run of these paradigms issues, at its size and dtype: DDP's buckets, a
        # flat model (BMUF, local SGD), each codec's payloads
        items = [None, None]
        if rank == 0:
            found = {("allreduce", "float32", 4 * bk["numel"]) for bk in buckets}
            found.add(("allreduce", "float32", 4 * sum(p.numel() for p in model.parameters())))
            for c in codecs.values():
                found |= {(m["collective"], m.get("dtype", "float32"), m["bytes"]) for ms in c["payloads"] for m in ms}
            # and each step's whole set, in a step's order: DDP's buckets, each codec's payloads
            steps_of = {"sync": [("allreduce", "float32", 4 * bk["numel"]) for bk in buckets]}
            steps_of.update({name: [(m["collective"], m.get("dtype", "float32"), m["bytes"]) for ms in c["payloads"]
                                    for m in ms] for name, c in codecs.items()})
            items = [sorted(found), steps_of]
        dist.broadcast_object_list(items, src=0)
        def step():
            model.zero_grad(set_to_none=True)
            torch.nn.functional.cross_entropy(model(x), y).backward()
        # releases per collective: about 0.5 s of backward, at most 60 (the small CNN's few-ms steps,
        # where a median of 15 releases of one collective ranged 0.9–4.0 ms and of 60 held within
        # 3 %), at least 3 where a backward takes seconds (VGG-16: dozens of payloads); agreed on,
        # since each rank's own count once deadlocked (see lockstep)
        n = torch.tensor([max(3, min(60, int(0.5 / max(_median_time(step, 2, cpu), 1e-6))))], dtype=torch.int64)
        dist.all_reduce(n, op=dist.ReduceOp.MAX)
        reps = int(n.item())
        passes: Dict[str, List[float]] = {}
        if world > 1:
            # every loop timed in interleaved passes, its median kept: a reading of a few-ms loop
            # spans a third of a second, and a slow stretch of 20–100 steps on a shared host can
            # fill a whole one, but not one reading in each of passes seconds apart; on the Xeon VM,
            # 2 ranks, one profile's fp16 loop read 7.6 ms where bf16's (the same work) read 4.7,
            # and that round's fp16 runs took 5.1–6.3 (docs/planner.md, "A loop timed once"). A
            # loop of long steps (fewer than 10 periods in 0.5 s) spans seconds in one reading
            # already, and three would triple a large model's profile
            for _ in range(LOOP_PASSES if reps >= 10 else 1):
                # the loops a layer above times here (the parameter server's: ``workbench.ps.profile``)
                for name in sorted(loop_fns):
                    passes.setdefault(name, []).append(loop_fns[name](model, step, meter, cpu, make_optimizer, reps,
                                                                      batch=(x, y), bucket_cap_mb=cap))
                passes.setdefault("aligned", []).append(aligned_loop_s(meter, cpu, step, reps))
                # through the meter's hook, as trainer=sync runs it: its Python future cost the small
                # CNN's 3-rank loop 0.4–2 ms a step over DDP's built-in all-reduce (12.7 against 13.4 ms)
                passes.setdefault("ddp", []).append(ddp_loop_s(model, x, y, cap, meter, cpu, reps,
                                                               hook=(AllreduceHookState(meter), metered_allreduce_hook)))
                meter.pop()
                for name in sorted(items[1]):
                    passes.setdefault(f"collectives/{name}", []).append(
                        step_collectives_loop_s(items[1][name], meter, cpu, step, reps))
        loops = {name: statistics.median(v) for name, v in passes.items()}
        aligned = loops.get("aligned")
        colls = measure_collectives(items[0], meter, cpu, step, reps=reps, base_s=aligned) if world > 1 else {}
        idle = measure_collectives(items[0], meter, cpu, reps=5) if world > 1 else {}
        dist.barrier()
        if rank == 0:
            counts = model.param_counts()
            queue.put({**m, "fwd_share": share, "buckets": buckets, "codecs": codecs, "bucket_cap_mb": cap,
                       "collectives": colls, "collectives_idle": idle, "loops": loops, "loop_passes": passes,
                       "boundary": model.boundary_size(spec), "params_conv": counts["features"],
                       "params_fc": counts["classifier"], "param_shapes": [tuple(p.shape) for p in model.parameters()],
                       "threads": torch.get_num_threads(), "pinned": pinned is not None})
    except BaseException as e:  # say so at once: the parent would otherwise wait out its timeout
        queue.put({"error": f"rank {rank}: {type(e).__name__}: {e}"})
        raise
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ProfileError(RuntimeError):
    """The profile's ranks failed, or did not finish in time: what a command prints in one line."""


def _wait_for_result(queue, procs, cfg, ranks: int) -> dict:
    """Rank 0's result, or ``{"error": ...}`` as soon as a rank has died: a rank killed (by the
    kernel, a signal, ``os._exit``) puts no message, and the others would wait in gloo for their
    30 minutes. Killed ranks are named first, then what a rank said. The whole wait is bounded by
    30 minutes or ``cluster.timeout_s``: each compressor's own loop (``compress.profile``) adds
    steps, and VGG-16's profile with them can outlast the 600 s this bound once was. The ranks are
    joined (or terminated) before this returns or raises."""
    import queue as queue_mod
    wait_s = max(1800.0, float(cfg.cluster.timeout_s))
    deadline = time.monotonic() + wait_s
    res: Optional[dict] = None
    try:
        while True:
            try:
                res = queue.get(timeout=2.0)
                break
            except queue_mod.Empty:
                pass
            ended = [p.exitcode for p in procs if p.exitcode is not None]
            if any(c != 0 for c in ended) or len(ended) == len(procs):
                try:  # what a rank said before it went (it puts its message, then exits 1)
                    res = queue.get(timeout=2.0)
                except queue_mod.Empty:
                    res = {"error": "no rank said why (exit codes: "
                                    + ", ".join(f"rank {r} {p.exitcode}" for r, p in enumerate(procs)) + ")"}
                break
            if time.monotonic() > deadline:
                raise ProfileError(f"profiling {cfg.model.name} on {ranks} ranks did not finish in {wait_s:.0f} s "
                                   f"(alive: {sum(p.is_alive() for p in procs)} of {ranks} ranks)")
        if "error" in res:
            # a rank that was killed is the cause; the others' errors (gloo's "connection closed by
            # peer") follow from it, and can arrive before its exit is seen: look twice
            for _ in range(2):
                killed = [f"rank {r} exited with code {p.exitcode}" for r, p in enumerate(procs)
                          if p.exitcode not in (None, 0, 1)]
                if killed:
                    res = {"error": "; ".join(killed + [res["error"]])}
                    break
                time.sleep(1.0)
    finally:
        until = time.monotonic() + (60 if res is not None and "error" not in res else 0)  # a failed profile's ranks go now
        for p in procs:
            p.join(timeout=max(0.0, until - time.monotonic()))
            if p.is_alive():
                p.terminate()
    return res


def _run_ranks(cfg, ranks: int, compressors, codec_fn, loop_fns, steps: int, span_only: bool = False) -> dict:
    """Spawn the profile's ``ranks`` gloo processes (:func:`_spawned`) and return rank 0's result."""
    import torch.multiprocessing as mp
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=_spawned, args=(r, ranks, port, cfg, compressors, codec_fn, loop_fns, steps, queue,
                                                span_only), daemon=True)
             for r in range(ranks)]
    for p in procs:
        p.start()
    res = _wait_for_result(queue, procs, cfg, ranks)
    if "error" in res:
        raise ProfileError(f"profiling {cfg.model.name} on {ranks} ranks failed: {res['error']}")
    return res


def host_span(cfg, ranks: int, steps: int = 15) -> float:
    """How fast this host is now, in the profile's own terms: :func:`lockstep`'s span with all
    ``ranks`` released together (``span_at[-1]``) for ``cfg``'s model and batch, the median of at
    least ``steps`` releases, in fresh processes, nothing else measured (ResNet-18 on 3 ranks: about
    half a minute; the small CNN: seconds). Against a profile's it is how much slower the host has
    become since that profile (:meth:`Profile.drifted`): ``bench planner`` takes it before and
    after each (round, bandwidth)'s runs. At 5 releases ResNet-18's read 1.57–1.87 s within three
    minutes here, as much as the drift it is to correct; hence 15, and the one level."""
    return float(_run_ranks(cfg, ranks, {}, None, {}, steps, span_only=True)["span_at"][-1])


def measure(cfg, ranks: int, compressors: Optional[Dict[str, object]] = None, steps: int = 3,
            codec_fn: Optional[Callable] = None, loop_fns: Optional[Dict[str, Callable]] = None) -> Profile:
    """Spawn ``ranks`` gloo processes on this machine and measure the profile of ``cfg``'s model,
    data shape and per-worker batch. ``compressors``: name -> compressor config, whose codecs
    ``codec_fn(buckets, compressors, world)`` measures on rank 0 (the caller passes
    :func:`workbench.compress.profile.measure_codecs`: this layer does not import the compressors).
    ``loop_fns``: name -> ``fn(model, step, meter, comm_device, make_optimizer, reps, batch=(x, y),
    bucket_cap_mb=...)``, a loop a layer above runs, timed on every rank in seconds per worker step
    (``Profile.loops``; the caller passes :data:`workbench.ps.profile.LOOPS`, the parameter server's,
    and :func:`workbench.compress.profile.hook_loops`, each compressor's DDP hook).
    Seconds for the small models; a minute or more for VGG-16 on a loaded CPU."""
    from workbench.dist import GLOO_LOOP_SCHED
    res = _run_ranks(cfg, ranks, compressors or {}, codec_fn, loop_fns or {}, steps)
    key = profile_key(cfg)
    threads = res.pop("threads")
    pinned = res.pop("pinned")
    return Profile(model=key["model"], data=str(cfg.data.name), input_shape=key["input_shape"], batch=key["batch"],
                   ranks=ranks, t_c_at=tuple(res["t_c_at"]), t_f_at=tuple(res["t_f_at"]), fwd_share=res["fwd_share"],
                   u=res["u"], alpha=res["alpha"], beta=res["beta"], beta_allreduce=res["beta_allreduce"],
                   span_at=tuple(res["span_at"]), collectives=res["collectives"],
                   collectives_idle=res["collectives_idle"], loops=res["loops"], loop_passes=res["loop_passes"],
                   boundary=res["boundary"], params_conv=res["params_conv"], params_fc=res["params_fc"],
                   param_shapes=[tuple(s) for s in res["param_shapes"]], bucket_cap_mb=res["bucket_cap_mb"],
                   buckets=[{"numel": b["numel"], "shapes": [list(s) for s in b["shapes"]], "ready": b["ready"]}
                            for b in res["buckets"]],
                   codecs=res["codecs"],
                   machine={**machine(), "ranks": ranks, "threads_per_rank": threads, "pinned": pinned,
                            **({"gloo_loop_sched": GLOO_LOOP_SCHED} if pinned else {})})


def load_or_measure(cfg, ranks: int, compressors: Optional[Dict[str, object]] = None, root="experiments",
                    refresh: bool = False, log: Callable[[str], None] = print,
                    codec_fn: Optional[Callable] = None, loop_fns: Optional[Dict[str, Callable]] = None) -> Profile:
    """The cached profile of ``cfg`` on this machine with ``ranks`` processes (and at least these
    compressors' codecs and these loops), measuring and caching it when missing."""
    path = cache_path(cfg, ranks, root)
    if path.exists() and not refresh:
        prof = Profile.load(path)
        # a profile measured pinned does not hold for runs that are not (cluster.pin=false), nor the reverse
        from workbench.dist import GLOO_LOOP_SCHED, pin_cores
        want = pin_cores(cfg.cluster, 0, ranks) is not None
        # and pinned before its gloo device threads yielded (workbench.dist.yield_gloo_loops) is not pinned now
        pinned = bool(prof.machine.get("pinned")) == want \
            and (not want or prof.machine.get("gloo_loop_sched") == GLOO_LOOP_SCHED)
        if prof.version == PROFILE_VERSION and set(compressors or {}) <= set(prof.codecs) and pinned \
                and (ranks < 2 or set(loop_fns or {}) <= set(prof.loops)):
            return prof
    log(f"profiling {cfg.model.name} (batch {cfg.data.batch_size}) with {ranks} ranks on this machine ...")
    prof = measure(cfg, ranks, compressors, codec_fn=codec_fn, loop_fns=loop_fns)
    prof.save(path)
    log(f"profile cached: {path}")
    return prof
