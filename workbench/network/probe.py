"""One rank of the calibration probe (started in each namespace by workbench.network.calibrate):
times point-to-point transfers (rank 0 -> 1) and all-reduces for several message sizes through the
meter, and rank 0 writes the results as JSON."""
import argparse
import json
import os
import time
from datetime import timedelta

import torch
import torch.distributed as dist


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--sizes-mb", type=float, nargs="+", default=[0.25, 1, 4, 16])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=timedelta(seconds=120))
    from workbench.meter import Meter, allreduce_bytes
    rank, world = dist.get_rank(), dist.get_world_size()
    m = Meter(timeout_s=120)
    rows = []
    for mb in a.sizes_mb:
        t = torch.ones(int(mb * 2**20 / 4))
        nbytes = t.numel() * 4
        for kind in ("p2p", "allreduce"):
            times = []
            for _ in range(a.repeats):
                m.barrier()
                t0 = time.perf_counter()
                if kind == "p2p":
                    if rank == 0:
                        m.send(t, 1, "p2p")
                    elif rank == 1:
                        m.recv(t, 0, "p2p")
                    m.barrier()  # the receiver's completion ends the transfer for everyone
                    moved = nbytes
                else:
                    m.all_reduce(t, "allreduce")
                    moved = allreduce_bytes(nbytes, world)
                times.append(time.perf_counter() - t0)
            best = min(times)
            rows.append({"kind": kind, "size_mb": mb, "seconds": best, "slowest_s": max(times), "repeats": len(times),
                         "bytes_per_rank": moved,
                         "achieved_bits_per_s": moved * 8 / best})
    if rank == 0:
        with open(a.out, "w") as f:
            json.dump(rows, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
