"""Measuring a profile: spawn its ranks on this machine (gloo), let each run
:mod:`workbench.perfmodel.profile.ranks`, return rank 0's result as a
:class:`~workbench.perfmodel.profile.schema.Profile`, cached by :func:`load_or_measure`.

The parent waits for rank 0's result on a queue, on which rank 0 also reports each stage it has
timed (:mod:`.progress`); a rank that dies fails the profile within seconds, naming it.
"""
from __future__ import annotations

import os
import time
from typing import Callable, Dict, Optional

from workbench.perfmodel.profile import ranks as R
from workbench.perfmodel.profile.measure import LOOP_PASSES, measure_collectives, measure_ranks
from workbench.perfmodel.profile.progress import QUIET, RankProgress, reporter
from workbench.perfmodel.profile.schema import PROFILE_VERSION, Profile, cache_path, machine, profile_key


class ProfileError(RuntimeError):
    """The profile's ranks failed, or did not finish in time: what a command prints in one line."""


def _init_rank(rank: int, world: int, port: int, cfg):
    """This rank's process group, pinned and threaded as the runs' ranks are (``workbench.dist.init``).
    gloo's default timeout (30 min), not ``cluster.timeout_s``: the other ranks wait in a broadcast
    while rank 0 times every codec alone, which takes minutes for a large model's buckets."""
    import torch
    import torch.distributed as dist

    from workbench.dist import pin_rank, threads_per_rank, yield_gloo_loops
    os.environ["WORKBENCH_HOST_RANKS"] = str(world)
    pinned = pin_rank(cfg.testbed, rank, world)
    torch.set_num_threads(threads_per_rank(cfg.cluster, world))
    store = dist.TCPStore("127.0.0.1", port, world, is_master=False)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world)
    if pinned is not None:
        yield_gloo_loops(expected=1)
    return pinned


def _spawned(rank: int, world: int, port: int, cfg, compressors, codec_fn, loop_fns, steps: int, queue,
             span_only: bool = False) -> None:
    """One rank of the profile: rank 0 puts the result (or any rank its error) on ``queue``."""
    import torch.distributed as dist
    pinned = _init_rank(rank, world, port, cfg)
    try:
        res = _profile_rank(rank, world, cfg, compressors, codec_fn, loop_fns, steps, queue, span_only)
        if rank == 0:
            queue.put({**res, "pinned": pinned is not None} if not span_only else res)
    except BaseException as e:  # say so at once: the parent would otherwise wait out its timeout
        queue.put({"error": f"rank {rank}: {type(e).__name__}: {e}"})
        raise
    finally:
        dist.destroy_process_group()


def _stages(world: int, codecs: int, loop_fns, passes: int) -> int:
    """The stages rank 0 reports (:func:`_profile_rank`) with ``codecs`` compressors' codecs, for
    the progress's total: the levels (``measure_ranks``), the buckets, the forward's share, the
    codecs (alone, and with every rank), and on more than one rank each pass of the loops and the
    collectives twice."""
    stages = 4 + 2 + (1 + (world > 1) if codecs else 0)
    if world > 1:
        stages += passes * (len(loop_fns) + 2 + 1 + codecs) + 2
    return stages


def _profile_rank(rank: int, world: int, cfg, compressors, codec_fn, loop_fns, steps: int, queue,
                  span_only: bool) -> Optional[dict]:
    """What a rank measures, in the order every rank must issue its collectives; rank 0's result."""
    import torch
    import torch.distributed as dist

    from workbench import data as data_mod
    from workbench.meter import Meter
    from workbench.models import build_model
    spec = data_mod.DATASETS[cfg.data.name].spec(cfg.data)
    torch.manual_seed(cfg.seed)
    model = build_model(cfg, spec)
    b = int(cfg.data.batch_size)
    meter = Meter(cfg.cluster.timeout_s)
    cpu = torch.device("cpu")
    if span_only:  # host_span: the lockstep span alone
        span_at = R.span_only(model, spec, b, meter, steps, world)
        dist.barrier()
        return {"span_at": span_at}
    codec_fn = codec_fn if compressors else None
    n_codecs = len(compressors) if codec_fn is not None else 0
    progress = RankProgress(queue if rank == 0 else None, _stages(world, n_codecs, loop_fns, LOOP_PASSES))

    def make_optimizer(ps):
        o = cfg.optim
        return torch.optim.SGD(ps, lr=o.lr, momentum=o.momentum, weight_decay=o.weight_decay, nesterov=o.nesterov)

    m = measure_ranks(model, spec, b, meter, cpu, cpu, steps, make_optimizer, progress=progress)
    cap = float(cfg.trainer.get("bucket_cap_mb", 25.0) or 25.0)
    x = torch.randn(b, spec.channels, spec.image_size, spec.image_size)
    y = torch.randint(0, spec.num_classes, (b,))
    with progress.stage("DDP's buckets"):
        buckets = R.ddp_buckets(model, x, y, cap)
    share, codecs = 1 / 3, {}
    if rank == 0:  # the forward's share and the codecs alone: rank 0 (the others wait at the barrier)
        with progress.stage("forward share"):
            share = R.forward_share(model, x, y, steps)
        if codec_fn is not None:
            with progress.stage("codecs alone"):
                codecs = codec_fn(buckets, compressors, world, messages=_message_sizes(model, spec, b))
    if codec_fn is not None and world > 1:
        with progress.stage("codecs with every rank"):
            R.shared_codecs(codecs, buckets, compressors, codec_fn, world, rank)
    items = R.collective_items(model, buckets, codecs) if rank == 0 else [None, None]
    dist.broadcast_object_list(items, src=0)
    timed = _timed_collectives(model, x, y, cap, meter, make_optimizer, loop_fns, items, world, progress)
    dist.barrier()
    if rank != 0:
        return None
    counts = model.param_counts()
    return {**m, "fwd_share": share, "buckets": buckets, "codecs": codecs, "bucket_cap_mb": cap, **timed,
            "boundary": model.boundary_size(spec), "params_conv": counts["features"],
            "params_fc": counts["classifier"], "param_shapes": [tuple(p.shape) for p in model.parameters()],
            "threads": torch.get_num_threads()}


def _message_sizes(model, spec, b: int) -> dict:
    """The messages other paradigms compress, for ``codec_fn(messages=…)``: the parameters' shapes
    (BMUF's delta, a parameter server's shards: one server's whole model and a quarter of it, the
    sizes between and below read by interpolation), the conv part's tensors (Stanza's CONV group)
    and one batch's activations at the conv/FC boundary (Stanza's point-to-point message)."""
    shapes = [tuple(p.shape) for p in model.parameters()]
    total = sum(p.numel() for p in model.parameters())
    return {"shapes": shapes, "conv_tensors": len(list(model.features.parameters())),
            "p2p_sizes": [total, total // 4, b * model.boundary_size(spec)]}


def _timed_collectives(model, x, y, cap: float, meter, make_optimizer, loop_fns, items, world: int,
                       progress=QUIET) -> dict:
    """The loops (``ranks.timed_loops``, their medians) and every collective at its size, in the
    loop beyond the ``aligned`` loop and from an idle release; nothing on one rank."""
    import statistics

    import torch
    cpu = torch.device("cpu")
    if world <= 1:
        return {"collectives": {}, "collectives_idle": {}, "loops": {}, "loop_passes": {}}

    def step():
        model.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(x), y).backward()
    reps = R.loop_reps(step)
    if reps < 10:  # one pass of long steps
        progress.plan(progress.total - (LOOP_PASSES - 1) * (len(loop_fns) + 2 + len(items[1])))
    passes = R.timed_loops(model, step, x, y, cap, meter, make_optimizer, loop_fns, items[1], reps, progress)
    loops = {name: statistics.median(v) for name, v in passes.items()}
    with progress.stage("collectives in the loop"):
        colls = measure_collectives(items[0], meter, cpu, step, reps=reps, base_s=loops.get("aligned"))
    with progress.stage("collectives from idle"):
        idle = measure_collectives(items[0], meter, cpu, reps=5)
    return {"collectives": colls, "collectives_idle": idle, "loops": loops, "loop_passes": passes}


def _next_result(queue, on_progress) -> Optional[dict]:
    """The next message that is not progress (handed to ``on_progress``), or None after 2 s."""
    import queue as queue_mod
    try:
        msg = queue.get(timeout=2.0)
    except queue_mod.Empty:
        return None
    while "progress" in msg:
        if on_progress is not None:
            on_progress(msg["progress"])
        try:
            msg = queue.get_nowait()
        except queue_mod.Empty:
            return None
    return msg


def _why_failed(queue, procs, on_progress) -> dict:
    """What a rank said before it went (it puts its message, then exits 1), else the exit codes."""
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        res = _next_result(queue, on_progress)
        if res is not None:
            return res
    return {"error": "no rank said why (exit codes: "
                     + ", ".join(f"rank {r} {p.exitcode}" for r, p in enumerate(procs)) + ")"}


def _name_the_killed(res: dict, procs) -> dict:
    """A rank that was killed is the cause; the others' errors (gloo's "connection closed by peer")
    follow from it, and can arrive before its exit is seen: look twice."""
    for _ in range(2):
        killed = [f"rank {r} exited with code {p.exitcode}" for r, p in enumerate(procs)
                  if p.exitcode not in (None, 0, 1)]
        if killed:
            return {"error": "; ".join(killed + [res["error"]])}
        time.sleep(1.0)
    return res


def _wait_for_result(queue, procs, cfg, ranks: int, on_progress=None) -> dict:
    """Rank 0's result, or ``{"error": ...}`` as soon as a rank has died: a rank killed (by the
    kernel, a signal, ``os._exit``) puts no message, and the others would wait in gloo for their
    30 minutes. Killed ranks are named first, then what a rank said. Progress events go to
    ``on_progress`` meanwhile. The whole wait is bounded by 30 minutes or ``cluster.timeout_s``
    (each compressor's own loop adds steps, and a large model's profile with them takes many
    minutes). The ranks are joined (or terminated) before this returns or raises."""
    wait_s = max(1800.0, float(cfg.cluster.timeout_s))
    deadline = time.monotonic() + wait_s
    res: Optional[dict] = None
    try:
        while res is None:
            res = _next_result(queue, on_progress)
            if res is not None:
                break
            ended = [p.exitcode for p in procs if p.exitcode is not None]
            if any(c != 0 for c in ended) or len(ended) == len(procs):
                res = _why_failed(queue, procs, on_progress)
                break
            if time.monotonic() > deadline:
                raise ProfileError(f"profiling {cfg.model.name} on {ranks} ranks did not finish in {wait_s:.0f} s "
                                   f"(alive: {sum(p.is_alive() for p in procs)} of {ranks} ranks)")
        if "error" in res:
            res = _name_the_killed(res, procs)
    finally:
        until = time.monotonic() + (60 if res is not None and "error" not in res else 0)  # a failed profile's ranks go now
        for p in procs:
            p.join(timeout=max(0.0, until - time.monotonic()))
            if p.is_alive():
                p.terminate()
    return res


def _run_ranks(cfg, ranks: int, compressors, codec_fn, loop_fns, steps: int, span_only: bool = False,
               on_progress=None) -> dict:
    """Spawn the profile's ``ranks`` gloo processes (:func:`_spawned`) and return rank 0's result.
    The parent holds the rendezvous store on a port the kernel gives it at bind, so no other
    process can take the port between its choice and the ranks' start."""
    import torch.distributed as dist
    import torch.multiprocessing as mp
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    store = dist.TCPStore("127.0.0.1", 0, ranks, is_master=True, wait_for_workers=False)
    port = store.port
    procs = [ctx.Process(target=_spawned, args=(r, ranks, port, cfg, compressors, codec_fn, loop_fns, steps, queue,
                                                span_only), daemon=True)
             for r in range(ranks)]
    for p in procs:
        p.start()
    res = _wait_for_result(queue, procs, cfg, ranks, on_progress)
    if "error" in res:
        raise ProfileError(f"profiling {cfg.model.name} on {ranks} ranks failed: {res['error']}")
    return res


def host_span(cfg, ranks: int, steps: int = 15) -> float:
    """How fast this host is now, in the profile's own terms: ``measure.lockstep``'s span with all
    ``ranks`` released together (``span_at[-1]``) for ``cfg``'s model and batch, the median of at
    least ``steps`` releases, in fresh processes, nothing else measured (ResNet-18 on 3 ranks: about
    half a minute; the small CNN: seconds). Against a profile's it is how much slower the host has
    become since that profile (:meth:`Profile.drifted`): ``bench planner`` takes it before and
    after each (round, bandwidth)'s runs. Fewer releases read as much spread as the drift it is to
    correct; hence 15, and the one level."""
    return float(_run_ranks(cfg, ranks, {}, None, {}, steps, span_only=True)["span_at"][-1])


def measure(cfg, ranks: int, compressors: Optional[Dict[str, object]] = None, steps: int = 3,
            codec_fn: Optional[Callable] = None, loop_fns: Optional[Dict[str, Callable]] = None,
            progress: Optional[Callable[[dict], None]] = None) -> Profile:
    """Spawn ``ranks`` gloo processes on this machine and measure the profile of ``cfg``'s model,
    data shape and per-worker batch. ``compressors``: name -> compressor config, whose codecs
    ``codec_fn(buckets, compressors, world)`` measures on rank 0 (the caller passes
    :func:`workbench.compress.codec_timing.measure_codecs`: this layer does not import the
    compressors). ``loop_fns``: name -> ``fn(model, step, meter, comm_device, make_optimizer, reps,
    batch=(x, y), bucket_cap_mb=...)``, a loop a layer above runs, timed on every rank in seconds
    per worker step (``Profile.loops``; the caller passes :data:`workbench.ps.exchange_timing.LOOPS`,
    the parameter server's, and :func:`workbench.compress.codec_timing.hook_loops`, each
    compressor's DDP hook). ``progress``: called with each stage's event as rank 0 reports it
    (:mod:`.progress`). Seconds for the small models; minutes for the large ones on a loaded CPU."""
    from workbench.dist import GLOO_LOOP_SCHED
    res = _run_ranks(cfg, ranks, compressors or {}, codec_fn, loop_fns or {}, steps, on_progress=progress)
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


def _cached(path, cfg, ranks: int, compressors, loop_fns) -> Optional[Profile]:
    """The profile at ``path`` if it serves ``cfg``: today's version, these compressors' codecs and
    these loops, and pinned as the runs will be (and pinned after gloo's device threads yielded,
    ``workbench.dist.yield_gloo_loops``, where it is pinned)."""
    from workbench.dist import GLOO_LOOP_SCHED, pin_cores
    prof = Profile.load(path)
    want = pin_cores(cfg.testbed, 0, ranks) is not None
    pinned = bool(prof.machine.get("pinned")) == want \
        and (not want or prof.machine.get("gloo_loop_sched") == GLOO_LOOP_SCHED)
    if prof.version == PROFILE_VERSION and set(compressors or {}) <= set(prof.codecs) and pinned \
            and (ranks < 2 or set(loop_fns or {}) <= set(prof.loops)):
        return prof
    return None


def load_or_measure(cfg, ranks: int, compressors: Optional[Dict[str, object]] = None, root="experiments",
                    refresh: bool = False, log: Callable[[str], None] = print,
                    codec_fn: Optional[Callable] = None, loop_fns: Optional[Dict[str, Callable]] = None) -> Profile:
    """The cached profile of ``cfg`` on this machine with ``ranks`` processes (and at least these
    compressors' codecs and these loops), measuring and caching it when missing, its progress
    reported as it goes (:func:`.progress.reporter`: a bar, or a line per stage through ``log``)."""
    path = cache_path(cfg, ranks, root)
    if path.exists() and not refresh:
        prof = _cached(path, cfg, ranks, compressors, loop_fns)
        if prof is not None:
            return prof
    log(f"profiling {cfg.model.name} (batch {cfg.data.batch_size}) with {ranks} ranks on this machine ...")
    show = reporter(f"profiling {cfg.model.name}", log)
    try:
        prof = measure(cfg, ranks, compressors, codec_fn=codec_fn, loop_fns=loop_fns, progress=show)
    finally:
        show(None)
    prof.save(path)
    log(f"profile cached: {path}")
    return prof
