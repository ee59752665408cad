"""A deterministic synthetic image set for benchmarks: each class has a fixed random template and a
sample is its template plus Gaussian noise, so a model can learn it and every run sees the same
bytes (seeded by data shape only, not the run seed)."""
import torch

from workbench.data import DATASETS, DatasetEntry, ResizedTensorDataset, resized_spec
from workbench.core import InputSpec


def _spec(cfg) -> InputSpec:
    return resized_spec(InputSpec(cfg.channels, cfg.image_size, cfg.num_classes), cfg)


def make(n: int, cfg, seed: int):
    g = torch.Generator().manual_seed(1234)
    templates = torch.randn(cfg.num_classes, cfg.channels, cfg.image_size, cfg.image_size, generator=g)
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, cfg.num_classes, (n,), generator=g)
    x = templates[y] + 1.5 * torch.randn(n, cfg.channels, cfg.image_size, cfg.image_size, generator=g)
    return ResizedTensorDataset(x, y, cfg.resize)


def _load(cfg):
    return make(cfg.num_samples, cfg, seed=1), make(max(1, cfg.num_samples // 4), cfg, seed=2)


DATASETS.register("synthetic")(DatasetEntry(_spec, _load))
