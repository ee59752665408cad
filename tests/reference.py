"""Single-process SGD on the global batch: the reference every synchronous trainer must match."""
import torch
import torch.nn.functional as F

import workbench
from workbench import data as data_mod
from workbench.models import build_model
from workbench.trainers.base import build_optimizer, lr_at, seed_everything


def single_process_sgd(overrides, workers: int, steps: int, boundary=None):
    """Train ``steps`` optimizer steps of batch workers*b in one process, reading the same
    permutation the workers' DistributedSamplers split; return the final state dict. ``boundary``:
    a codec the features' output and its gradient pass through (Stanza's compressed activations)."""
    cfg = workbench.compose(overrides)
    train, _, spec = data_mod.load(cfg)
    b = data_mod.batch_size_per_worker(cfg, workers)
    seed_everything(cfg.seed)
    model = build_model(cfg, spec)
    opt = build_optimizer(model.parameters(), cfg.optim)
    sampler = torch.utils.data.DistributedSampler(train, num_replicas=1, rank=0, shuffle=True, seed=cfg.seed, drop_last=True)
    loader = torch.utils.data.DataLoader(train, batch_size=b * workers, sampler=sampler, drop_last=True)
    step, epoch = 0, 0
    while step < steps:
        sampler.set_epoch(epoch)
        for x, y in loader:
            if step >= steps:
                break
            for g in opt.param_groups:
                g["lr"] = lr_at(cfg.optim, step, steps, b * workers)
            opt.zero_grad()
            if boundary is None:
                F.cross_entropy(model(x), y).backward()
            else:
                h = model.features(x)
                got = boundary(h.detach()).requires_grad_()
                F.cross_entropy(model.classifier(got), y).backward()
                h.backward(boundary(got.grad))
            opt.step()
            step += 1
        epoch += 1
    return {k: v.detach() for k, v in model.state_dict().items()}


def assert_same_params(state_a, state_b, rtol=1e-4, atol=1e-5):
    assert state_a.keys() == state_b.keys()
    for k in state_a:
        torch.testing.assert_close(state_a[k], state_b[k], rtol=rtol, atol=atol, msg=lambda m: f"{k}: {m}")
