"""A plain, hand-written DDP training script: the yardstick for trainer=sync's overhead.

Same model, data and sharding as the workbench (it imports the model and data registries), but its
own minimal loop: no meter, no hook, no logging, no evaluation. Prints rank 0's per-step times
(seconds between consecutive step ends, data loading included, as the workbench measures) as JSON.

    torchrun --standalone --nproc-per-node 4 -m workbench.bench.plain_ddp --steps 200 --model small_cnn --data digits
"""
import argparse
import gc
import json
import os
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--model", default="small_cnn")
    p.add_argument("--data", default="digits")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--out", default=None, help="write the step times here (JSON)")
    p.add_argument("overrides", nargs="*", help="extra workbench config overrides for model/data")
    a = p.parse_args()

    local_world = int(os.environ["LOCAL_WORLD_SIZE"])
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // local_world))
    dist.init_process_group("gloo", timeout=timedelta(seconds=120))
    rank, world = dist.get_rank(), dist.get_world_size()

    import workbench
    from workbench import data as data_mod
    from workbench.models import build_model
    cfg = workbench.compose([f"model={a.model}", f"data={a.data}", f"data.batch_size={a.batch_size}", *a.overrides])
    train, _, spec = data_mod.load(cfg)
    torch.manual_seed(0)
    model = DDP(build_model(cfg, spec))
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9, weight_decay=1e-4)
    sampler = torch.utils.data.DistributedSampler(train, num_replicas=world, rank=rank, shuffle=True, seed=0, drop_last=True)
    loader = torch.utils.data.DataLoader(train, batch_size=a.batch_size, sampler=sampler, drop_last=True)

    times, step, epoch = [], 0, 0
    t_prev = time.perf_counter()
    while step < a.steps:
        sampler.set_epoch(epoch)
        for x, y in loader:
            if step >= a.steps:
                break
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(model(x), y).backward()
            opt.step()
            step += 1
            now = time.perf_counter()
            times.append(now - t_prev)
            t_prev = now
        epoch += 1
    if rank == 0 and a.out:
        with open(a.out, "w") as f:
            json.dump(times, f)
    # Tear down together and free DDP (its reducer holds the gloo group) before interpreter
    # finalisation, which otherwise destroyed gloo's threads joinable and aborted a rank now and then;
    # see plain_e2e.py.
    dist.barrier()
    del model, opt
    gc.collect()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
