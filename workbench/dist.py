"""Process-group set-up for one rank: backend, device, threads, timeouts.

Reads the environment the elastic agent (or torchrun) sets: RANK, WORLD_SIZE, LOCAL_RANK,
LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import List, Optional, Sequence

import torch
import torch.distributed as dist


@dataclass
class DistInfo:
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    backend: str
    device: torch.device
    threads: int
    cores: Optional[List[int]] = None  # the cores this rank's threads are pinned to (None: not pinned)

    @property
    def comm_device(self) -> torch.device:
        """Where tensors must be for a collective: the GPU under NCCL, host memory under gloo."""
        return self.device if self.backend == "nccl" else torch.device("cpu")


def choose_backend(cluster) -> str:
    if cluster.backend != "auto":
        return cluster.backend
    return "nccl" if choose_device(cluster).type == "cuda" else "gloo"


def choose_device(cluster, local_rank: int = 0) -> torch.device:
    want = cluster.device
    if want == "auto":
        want = "cuda" if torch.cuda.is_available() else "cpu"
    if want == "cuda":
        # one GPU per local rank where there are enough; otherwise ranks share them round-robin
        return torch.device("cuda", local_rank % torch.cuda.device_count())
    return torch.device("cpu")


def check_gpus_for_nccl(cluster) -> None:
    """NCCL takes a GPU per rank: this machine's ``cluster.nproc`` ranks beyond its GPUs would fail in NCCL's set-up
    ("Duplicate GPU detected") after every process has started, so refuse them before (ConfigError)."""
    if choose_backend(cluster) != "nccl":
        return
    gpus = torch.cuda.device_count()
    if cluster.nproc > gpus:
        from workbench.core import ConfigError
        raise ConfigError(f"invalid value {cluster.nproc} for cluster.nproc: NCCL takes a GPU per rank and this machine "
                          f"has {gpus}; set cluster.backend=gloo to let {cluster.nproc} ranks share them")


def host_ranks(local_world_size: int) -> int:
    """How many ranks share this machine's cores: ``WORKBENCH_HOST_RANKS`` where it is set (an
    emulated cluster's nodes all run here, but each agent sees LOCAL_WORLD_SIZE=1), else the local
    world size."""
    return int(os.environ.get("WORKBENCH_HOST_RANKS", local_world_size))


def threads_per_rank(cluster, local_world_size: int) -> int:
    if cluster.threads > 0:
        return cluster.threads
    # An emulated node's rank must share the cores with every other node's (oversubscribed OpenMP
    # threads spin against gloo's and slow DDP's overlapped all-reduce several times over).
    return max(1, (os.cpu_count() or 1) // max(1, host_ranks(local_world_size)))


def rank_cores(index: int, host_ranks: int, allowed: Sequence[int]) -> Optional[List[int]]:
    """The cores of ``allowed`` (the process's affinity) that rank ``index`` of this host's
    ``host_ranks`` is pinned to: its own ``len(allowed) // host_ranks`` of them, in order; None where
    the ranks outnumber the cores (pinned, two would share one core while another idles)."""
    cores = sorted(allowed)
    per = len(cores) // max(1, host_ranks)
    if per < 1 or not 0 <= index < host_ranks:
        return None
    return cores[index * per:(index + 1) * per]


def pin_threads(cores: Sequence[int]) -> None:
    """Every thread of this process, and every thread it starts later, on ``cores`` only.

    Why it is there, and why it is off by default (``testbed.pin``): with as many ranks as cores and
    nothing pinned, the scheduler moves a rank's threads (the training loop, the compression hook's
    thread, gloo's) between the cores, and step times spread from one launch to the next; pinned,
    they are steadier and the compressors' runs faster. A pinned rank needs its gloo device threads
    under ``SCHED_BATCH`` (:func:`yield_gloo_loops`), or its all-reduces stall for most of a
    scheduler tick (docs/notes/2026-12-05-ranks-pinned.md, docs/notes/2026-12-05-gloo-device-thread-sched-batch.md;
    the measurements: docs/notes/2026-12-06-trainers-history.md)."""
    if not hasattr(os, "sched_setaffinity"):  # not Linux: the scheduler's placement stands
        return
    for task in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(task), cores)
        except (OSError, ValueError):  # a thread that ended meanwhile
            pass


GLOO_LOOP = "gloo_tcp_loop"  # the name gloo's TCP transport gives its device thread
GLOO_LOOP_SCHED = "batch"  # the scheduling policy a pinned rank's gloo device threads get (SCHED_BATCH)
_POLICIES = {getattr(os, f"SCHED_{n.upper()}"): n for n in ("other", "batch", "idle", "fifo", "rr")
             if hasattr(os, f"SCHED_{n.upper()}")}
_pinned = False  # this process's ranks are pinned (pin_rank): its gloo groups yield their device threads


def yield_gloo_loops(expected: int = 0, wait_s: float = 2.0) -> List[int]:
    """Put every gloo device thread of this process (:data:`GLOO_LOOP`, one per process group)
    under ``SCHED_BATCH`` (:data:`GLOO_LOOP_SCHED`), at the nice it had; the threads' ids.
    ``expected``: how many there are with the newest group's. A group's device thread names itself
    once it runs, which on a loaded host can be after the group is made, so the call waits up to
    ``wait_s`` for that many.

    Why: gloo's device thread polls its sockets with epoll and takes a pair's lock with
    ``try_lock``. While the thread that runs the collective holds that lock (it sends a message
    of hundreds of KB), the device thread finds it taken, returns to epoll, whose events are
    still there, and so spins in user space. Woken on the same core as the holder (pinned ranks:
    always), as a normal thread it preempts the holder and spins until the scheduler's tick hands
    the core back. A ``SCHED_BATCH`` thread never preempts on waking ("batch and idle tasks do not
    preempt non-idle tasks", the fair scheduler's wake-up check), so it runs when the holder
    blocks, and finds the lock free; its share of a busy core stays a normal thread's. A higher
    nice instead either starves the thread's reading while the rank computes on its one core
    (nice 19) or leaves the stall (nice 10) (docs/notes/2026-12-05-gloo-device-thread-sched-batch.md; the
    traces and timings: docs/notes/2026-12-06-trainers-history.md)."""
    policy = getattr(os, f"SCHED_{GLOO_LOOP_SCHED.upper()}", None)
    if not hasattr(os, "sched_setscheduler") or policy is None:
        return []
    deadline = time.monotonic() + wait_s
    loops = gloo_loops()
    while len(loops) < expected and time.monotonic() < deadline:
        time.sleep(0.002)
        loops = gloo_loops()
    found = []
    for tid in loops:
        try:
            os.sched_setscheduler(tid, policy, os.sched_param(0))
            found.append(tid)
        except OSError:  # a thread that ended meanwhile
            pass
    return found


def gloo_loops() -> List[int]:
    """The thread ids of this process's gloo device threads (:data:`GLOO_LOOP`); none off Linux."""
    found = []
    for task in os.listdir("/proc/self/task") if os.path.isdir("/proc/self/task") else []:
        try:
            with open(f"/proc/self/task/{task}/comm") as f:
                if f.read().strip() == GLOO_LOOP:
                    found.append(int(task))
        except (OSError, ValueError):  # a thread that ended meanwhile
            pass
    return found


def gloo_loop_sched() -> Optional[List[str]]:
    """The scheduling policies of this process's gloo device threads, read back from the kernel
    (``summary.json`` → ``gloo_loop_sched``: ["batch"] where the rank is pinned, else ["other"]);
    None with none."""
    found = set()
    for tid in gloo_loops() if hasattr(os, "sched_getscheduler") else []:
        try:
            found.add(_POLICIES.get(os.sched_getscheduler(tid), "unknown"))
        except OSError:
            pass
    return sorted(found) or None


def new_group(*args, **kwargs):
    """``torch.distributed.new_group``, its gloo device thread then yielded
    (:func:`yield_gloo_loops`) where this rank is pinned, as the default group's is."""
    before = len(gloo_loops()) if _pinned else 0
    group = dist.new_group(*args, **kwargs)
    if _pinned:
        member = group != dist.GroupMember.NON_GROUP_MEMBER  # a rank outside the group gets no thread
        yield_gloo_loops(expected=before + (member and dist.get_backend(group) == "gloo"))
    return group


def pins(testbed) -> bool:
    """``testbed.pin`` of a composed config's ``testbed`` node (None: not pinned)."""
    return bool(testbed is not None and testbed.get("pin", False))


def pin_cores(testbed, index: int, host_ranks: int) -> Optional[List[int]]:
    """The cores rank ``index`` of the host's ``host_ranks`` is pinned to under ``testbed`` (see
    :func:`pins`): its :func:`rank_cores` where ``testbed.pin`` and the ranks fit the cores, else
    None (not pinned)."""
    if not pins(testbed) or not hasattr(os, "sched_getaffinity"):
        return None
    return rank_cores(index, host_ranks, os.sched_getaffinity(0))


def pin_rank(testbed, index: int, host_ranks: int) -> Optional[List[int]]:
    """Pin this rank (``index`` of the host's ``host_ranks``) to its :func:`pin_cores`; the cores,
    or None where not pinned."""
    global _pinned
    cores = pin_cores(testbed, index, host_ranks)
    if cores is not None:
        pin_threads(cores)
        _pinned = True
    return cores


def init(cluster, testbed=None) -> DistInfo:
    """Join the process group of ``cluster`` (this rank pinned as ``testbed`` says): backend,
    device, threads and timeouts set; the rank's :class:`DistInfo`."""
    rank = int(os.environ.get("RANK", 0))
    world = int(os.environ.get("WORLD_SIZE", 1))
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", 1))
    threads = threads_per_rank(cluster, local_world)
    # before gloo and the hooks start their threads, which inherit the mask. An emulated node's
    # rank (WORKBENCH_NODE, one per node) is rank k of the host's WORKBENCH_HOST_RANKS
    node = os.environ.get("WORKBENCH_NODE")
    if node is None:
        cores = pin_rank(testbed, local_rank, local_world)
    else:
        cores = pin_rank(testbed, int(node), host_ranks(local_world))
    torch.set_num_threads(threads)
    device = choose_device(cluster, local_rank)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    backend = choose_backend(cluster)
    if not dist.is_initialized():
        os.environ.setdefault("MASTER_ADDR", cluster.master_addr)
        os.environ.setdefault("MASTER_PORT", str(cluster.master_port or 29500))
        timeout = timedelta(seconds=cluster.timeout_s)
        # Under the elastic agent every rank is a client of the agent's store, which outlives a
        # restart: the keys of the failed attempt (e.g. gloo's addresses of dead ranks) are still in
        # it, so each attempt gets its own key prefix. Elsewhere (submitit, by hand) rank 0 hosts it.
        agent_store = os.environ.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true"
        store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world,
                              is_master=not agent_store and rank == 0, timeout=timeout)
        attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
        store = dist.PrefixStore(f"workbench/attempt{attempt}", store)
        dist.init_process_group(backend=backend, store=store, rank=rank, world_size=world, timeout=timeout)
    if cores is not None:
        yield_gloo_loops(expected=int(backend == "gloo"))
    return DistInfo(rank, world, local_rank, local_world, backend, device, threads, cores)


def shutdown() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()
