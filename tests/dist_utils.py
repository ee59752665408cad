"""Run a function on W real processes joined in a gloo process group (for unit tests of
communication code without the full launcher). Exceptions in any rank fail the test."""
import os
import socket
import traceback
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _entry(rank, world, port, fn, args, q, timeout_s):
    try:
        torch.set_num_threads(1)
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                                timeout=timedelta(seconds=timeout_s))
        out = fn(rank, world, *args)
        q.put((rank, "ok", out))
    except BaseException:
        q.put((rank, "error", traceback.format_exc()))
    finally:
        if dist.is_initialized():
            try:
                dist.destroy_process_group()
            except Exception:
                pass


def _context():
    """A forkserver that has imported torch once: each rank is then a fork of it, not a new
    interpreter importing torch again (about 3 s of CPU per rank on this machine)."""
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["torch", "torch.distributed", "numpy"])
    return ctx


def run_ranks(fn, world: int, *args, timeout_s: float = 30.0, join_timeout: float = 120.0):
    """Run ``fn(rank, world, *args)`` on ``world`` processes; return the results ordered by rank.
    ``fn`` must be a module-level (picklable) function."""
    ctx = _context()
    q = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=_entry, args=(r, world, port, fn, args, q, timeout_s)) for r in range(world)]
    for p in procs:
        p.start()
    results = {}
    try:
        for _ in range(world):
            rank, status, out = q.get(timeout=join_timeout)
            if status != "ok":
                raise AssertionError(f"rank {rank} failed:\n{out}")
            results[rank] = out
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
    return [results[r] for r in range(world)]
