"""Data set registry and per-worker sharding.

A data set is a :class:`DatasetEntry`: ``spec(cfg)`` says the input shape without loading anything
(used by validation before launch), ``check(cfg)`` fails early with the path and files expected,
``fetch(cfg)`` gets missing files (``data.download=true``: :func:`fetch`, called by the launcher
before any rank starts) and ``load(cfg)`` returns ``(train, test)`` torch Datasets.

Sharding: every epoch a seeded permutation of the training set is split so that worker ``w`` of
``W`` takes every W-th sample (torch's DistributedSampler). The union of the workers' batches at
step k is then exactly the k-th global batch of a single process reading the same permutation with
batch ``W * b``, which is what makes synchronous training comparable to single-process SGD.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Tuple

import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from workbench.core import InputSpec, check as check_value
from workbench.registry import Registry


@dataclass(frozen=True)
class DatasetEntry:
    spec: Callable[..., InputSpec]
    load: Callable[..., Tuple[Dataset, Dataset]]
    check: Callable[..., None] = lambda cfg: None
    fetch: Callable[..., bool] = lambda cfg: False  # data.download=true: get missing files; True if it fetched

    def validate(self, cfg) -> None:
        """``cfg.data``'s ranges, then the set's own check (e.g. ``data.root`` holds its files)."""
        d = cfg.data
        check_value(d.batch_size >= 1, "data.batch_size", d.batch_size, "must be >= 1")
        check_value(d.resize is None or d.resize >= 1, "data.resize", d.resize, "must be >= 1 or null")
        check_value(0 < d.test_fraction < 1, "data.test_fraction", d.test_fraction, "must be in (0, 1)")
        check_value(d.num_samples >= 1, "data.num_samples", d.num_samples, "must be >= 1")
        check_value(d.num_workers >= 0, "data.num_workers", d.num_workers, "must be >= 0")
        self.check(d)


DATASETS: Registry[DatasetEntry] = Registry("data set", key="data.name", entry_points="workbench.datasets")


def resized_spec(spec: InputSpec, cfg) -> InputSpec:
    return InputSpec(spec.channels, cfg.resize or spec.image_size, spec.num_classes)


class ResizedTensorDataset(Dataset):
    """In-memory images (N, C, H, W) and labels, optionally resized once at load time."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, resize: int | None = None) -> None:
        if resize and resize != x.shape[-1]:
            x = torch.nn.functional.interpolate(x, size=(resize, resize), mode="bilinear", align_corners=False)
        self.x, self.y = x.contiguous(), y

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


def batch_size_per_worker(cfg, workers: int) -> int:
    g = cfg.data.global_batch_size
    return cfg.data.batch_size if g is None else g // workers


def global_batch_size(cfg, workers: int) -> int:
    return batch_size_per_worker(cfg, workers) * workers


def load(cfg):
    """(train, test, spec) for ``cfg.data``."""
    entry = DATASETS[cfg.data.name]
    entry.check(cfg.data)
    train, test = entry.load(cfg.data)
    return train, test, entry.spec(cfg.data)


def fetch(cfg) -> bool:
    """The launcher's pre-launch hook: with ``data.download=true`` fetch the set's missing files into
    ``data.root`` (once: files present cost nothing); never called in a rank. True if it fetched."""
    from omegaconf import OmegaConf
    if not OmegaConf.select(cfg, "data.download", default=False):
        return False
    return DATASETS[cfg.data.name].fetch(cfg.data)


def train_loader(dataset: Dataset, cfg, worker: int, workers: int, seed: int) -> Tuple[DataLoader, DistributedSampler]:
    sampler = DistributedSampler(dataset, num_replicas=workers, rank=worker, shuffle=True, seed=seed, drop_last=True)
    loader = DataLoader(dataset, batch_size=batch_size_per_worker(cfg, workers), sampler=sampler,
                        drop_last=True, num_workers=cfg.data.num_workers)
    return loader, sampler


def test_loader(dataset: Dataset, cfg, worker: int, workers: int) -> DataLoader:
    # Contiguous, unpadded shards so that summed counts over workers cover the test set exactly once.
    n = len(dataset)
    lo, hi = worker * n // workers, (worker + 1) * n // workers
    shard = torch.utils.data.Subset(dataset, range(lo, hi))
    return DataLoader(shard, batch_size=256, shuffle=False, num_workers=cfg.data.num_workers)


DATASETS.discover(__name__, __path__)
