"""The yardstick for the default job end to end: the torchrun DDP script a user writes by hand.

The same work as ``python -m workbench`` (the default job): the small CNN on scikit-learn's digits
(same 80/20 split), 4 ranks, 16 samples per rank, SGD lr 0.05 momentum 0.9 weight decay 1e-4,
20 epochs, then one evaluation on the test set. It imports nothing from workbench, so its start-up
is what a hand-written script pays; ``python -m workbench.bench overhead --e2e`` times the two side
by side.

    torchrun --standalone --nproc-per-node 4 -m workbench.bench.plain_e2e
"""
import gc
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

EPOCHS, BATCH, LR = 20, 16, 0.05


def main() -> None:
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // int(os.environ["LOCAL_WORLD_SIZE"])))
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    d = load_digits()
    x = torch.from_numpy((d.images / 16.0 - 0.5) / 0.5).float().unsqueeze(1)
    xtr, xte, ytr, yte = train_test_split(x, torch.from_numpy(d.target), test_size=0.2, random_state=0, stratify=d.target)
    train = TensorDataset(xtr, ytr)
    torch.manual_seed(0)
    model = DDP(nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.AdaptiveAvgPool2d(4), nn.Flatten(), nn.Linear(64 * 16, 128), nn.ReLU(), nn.Linear(128, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9, weight_decay=1e-4)
    sampler = DistributedSampler(train, num_replicas=world, rank=rank, shuffle=True, seed=0, drop_last=True)
    loader = DataLoader(train, batch_size=BATCH, sampler=sampler, drop_last=True)
    for epoch in range(EPOCHS):
        sampler.set_epoch(epoch)
        for xb, yb in loader:
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(model(xb), yb).backward()
            opt.step()
    lo, hi = rank * len(yte) // world, (rank + 1) * len(yte) // world
    with torch.no_grad():
        correct = torch.tensor([(model(xte[lo:hi]).argmax(1) == yte[lo:hi]).sum().item(), hi - lo], dtype=torch.float64)
    dist.all_reduce(correct)
    if rank == 0:
        print(f"test accuracy {correct[0].item() / correct[1].item():.4f}")
    # Tear down together, and free DDP (its reducer holds the gloo group) while the interpreter is
    # alive: left to interpreter finalisation, gloo's threads were destroyed joinable and a rank
    # aborted ("terminate called without an active exception") in about 1 run in 6 on one VM.
    # The workbench's ranks never reach finalisation: multiprocessing ends them with os._exit.
    dist.barrier()
    del model, opt
    gc.collect()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
