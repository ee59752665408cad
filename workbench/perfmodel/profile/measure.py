"""The profile's timing loops, run on every rank of a process group: compute levels, the lockstep
span, the optimizer, the links, the collectives at their sizes, and whole loops of steps
(:mod:`workbench.perfmodel.profile.spawn` starts the ranks; the layers above hand in their own
loops, which time themselves with :func:`free_running_period` and :func:`mean_over_ranks`).

Every collective goes through the meter as ``profile``. Every rank must issue the same collectives
in the same order, so each count a rank derives from its own timing is agreed on (the largest) first.
"""
from __future__ import annotations

import copy
import statistics
import time
from typing import Callable, Dict, List, Optional, Tuple

from workbench.perfmodel.profile.progress import QUIET
from workbench.perfmodel.stanza import StanzaInputs

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
                  make_optimizer: Callable, spans: bool = True, progress=QUIET) -> dict:
    """Measure compute, optimizer and link costs with every rank of the current group taking part.

    Compute times are measured at every concurrency k = 1..N (ranks 0..k-1 compute at once, the
    others wait), because ranks that share a host (CPU cores, memory bandwidth, one GPU) slow each
    other down. Latency and bandwidth come from a ping-pong between rank 0 and the last rank;
    all-reduce bandwidth from all ranks. The model's weights, buffers and the RNG are restored
    afterwards, so a profiled run trains exactly like an unprofiled one. All traffic is metered as
    ``profile``. Returns ``t_c_at``, ``t_f_at`` (s/sample), ``u`` (s/parameter), ``alpha`` (s),
    ``beta``, ``beta_allreduce`` (bytes/s), and with ``spans`` :func:`lockstep`'s ``span_at`` (s/batch).
    ``progress``: told each part as it ends (``progress.RankProgress``)."""
    import torch
    import torch.distributed as dist
    world = dist.get_world_size()
    saved = copy.deepcopy(model.state_dict())
    rng = torch.random.get_rng_state()
    x = torch.randn(b, spec.channels, spec.image_size, spec.image_size, device=device)
    y = torch.randint(0, spec.num_classes, (b,), device=device)
    with torch.no_grad():
        a = int(model.features(x[:1]).numel())
    with progress.stage("compute levels"):
        t_c_at, t_f_at = compute_levels(model, x, y, a, meter, device, comm_device, steps)
    with progress.stage("optimizer"):
        u = update_s(model, x, y, make_optimizer, steps, device)
    with progress.stage("links"):
        alpha, beta, beta_ar = link_costs(model, a * b, meter, comm_device, steps)
    rank = dist.get_rank()
    own = torch.tensor([u, alpha if rank == 0 else 0.0, beta if rank == 0 else 0.0, beta_ar],
                       dtype=torch.float64, device=comm_device)
    meter.all_reduce(own, "profile")
    v = own.cpu().tolist()
    with progress.stage("lockstep span"):
        span_at = lockstep(model, x, y, meter, device, comm_device, steps) if spans else ()
    model.zero_grad(set_to_none=True)
    model.load_state_dict(saved)  # batch-norm statistics and dropout's RNG as they were
    torch.random.set_rng_state(rng)
    return {"t_c_at": t_c_at, "t_f_at": t_f_at, "u": v[0] / world, "alpha": v[1], "beta": v[2],
            "beta_allreduce": v[3] / world, "span_at": span_at}


def compute_levels(model, x, y, a: int, meter, device, comm_device, steps: int) -> Tuple[tuple, tuple]:
    """Conv and FC forward+backward seconds per sample with k = 1..N ranks computing at once.

    Free-running levels: the k ranks each run back-to-back calls after one common start, so their
    work overlaps as asynchronous workers' does (single timed calls of a few ms do not overlap:
    each rank runs in its own scheduler slot). At least 0.2 s of calls per level, the same count on
    every rank (all overlap to the end). Each call starts from no gradients, as a training step
    does (zero_grad(set_to_none=True)): backward then hands its gradients over instead of adding
    them into .grad, which is slower (docs/notes/2026-12-02-resnet18-behind-200mbit.md)."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    rank, world = dist.get_rank(), dist.get_world_size()
    b = x.shape[0]

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
    return tuple(levels[:world].tolist()), tuple(levels[world:].tolist())


def update_s(model, x, y, make_optimizer: Callable, steps: int, device) -> float:
    """The optimizer's seconds per parameter, with every parameter's gradient, as a step has them
    (SGD skips a parameter without one)."""
    import torch.nn.functional as F
    params = [p for p in model.parameters()]
    opt = make_optimizer(params)
    model.zero_grad(set_to_none=True)
    F.cross_entropy(model(x), y).backward()
    u = _median_time(opt.step, steps, device) / sum(p.numel() for p in params)
    model.zero_grad(set_to_none=True)
    del opt
    return u


def link_costs(model, activations: int, meter, comm_device, steps: int) -> Tuple[float, float, float]:
    """α (s) and β (bytes/s) of one point-to-point message between rank 0 and the last rank, and the
    ring all-reduce's per-rank bandwidth. Latency from a one-float round trip; bandwidth from the
    slope between it and a message of at least 4 MB (``activations`` floats, one CONV worker's, if
    larger), so the latency noise cannot swamp it. Both are the link's floor, the fastest round
    trip: with more ranks than cores the median round trip is the time a descheduled peer takes to
    run again, host contention the compute levels already carry. The ring the same way: one float,
    then 4–16 MB (the conv part's size)."""
    import torch
    import torch.distributed as dist
    rank, world = dist.get_rank(), dist.get_world_size()
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

    rtt_small = ping_pong(torch.zeros(1, device=comm_device))
    big = torch.zeros(max(activations, 1 << 20), device=comm_device)
    rtt_big = ping_pong(big)
    alpha = rtt_small / 2
    beta = 2 * (big.numel() - 1) * 4 / max(rtt_big - rtt_small, 0.5 * rtt_big)
    meter.barrier("profile")
    n_ar = min(max(sum(p.numel() for p in model.features.parameters()), 1 << 20), 1 << 22)
    tiny, buf = torch.zeros(1, device=comm_device), torch.zeros(n_ar, device=comm_device)
    t_tiny = _median_time(lambda: meter.all_reduce(tiny, "profile"), reps, torch.device("cpu"))
    t_ar = _median_time(lambda: meter.all_reduce(buf, "profile"), reps, torch.device("cpu"))
    beta_ar = 2 * (world - 1) / world * (n_ar - 1) * 4 / max(t_ar - t_tiny, 0.5 * t_ar) if world > 1 else float("inf")
    return alpha, beta, beta_ar


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
    it at different times, and the next step starts as skewed, which a collective timed after a
    barrier-released backward misses. The one-float loop is the base because it is the same kind
    of loop as what it is subtracted from; where it is the slower loop the cost clips to 0
    (docs/notes/2026-12-03-profile-v10-v11.md; docs/notes/2026-12-06-perfmodel-history.md).
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
    the ranks' mean over at least 3 blocks (``Profile.loops["aligned/<block>"]`` with the one-float
    all-reduce): the compute of a protocol that re-aligns its ranks once a block (BMUF, local SGD).
    On a shared host that is neither the lockstep span (a step's worst rank, paid every step) nor
    the mean rank's rate: the scheduler's unfairness evens out over a block only in part."""
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
    (docs/notes/2026-12-02-collectives-timed-together.md)."""
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
    ``workbench.compress.codec_timing``).

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

