"""MNIST and CIFAR-10 through torchvision, from files under ``data.root``.

Nothing is downloaded unless ``data.download=true``: then the launcher fetches the missing files once
before any rank starts (:mod:`workbench.data.download`: torchvision's downloader, md5-checked, from
torchvision's sources or ``data.mirror``). Without it, missing files stop the run before launch with
the directory, the files expected, and the flag that fetches them.

CIFAR-10's batches are read as torchvision's ``CIFAR10`` reads them (pickled ``data`` and
``labels``), without its md5 check of every file in every rank: a fetched archive was checked once,
against its source's sum, before it was unpacked.
"""
import pickle
from pathlib import Path

import numpy as np
import torch

from workbench.core import ConfigError, InputSpec
from workbench.data import DATASETS, DatasetEntry, ResizedTensorDataset, resized_spec
from workbench.data.download import LAYOUTS, check_mirror, fetch

_HOW = {
    "mnist": "torchvision.datasets.MNIST(root, download=True) on a machine with internet",
    "cifar10": "unpack cifar-10-python.tar.gz from https://www.cs.toronto.edu/~kriz/cifar.html",
}


def _require(name, cfg, fetching=False):
    """ConfigError naming data.root, the files missing and data.download, unless ``fetching``."""
    if not cfg.root:
        raise ConfigError(f"invalid value None for data.root: data={name} needs the directory holding "
                          f"{LAYOUTS[name].folder}/ (data.download=true fetches it there; or {_HOW[name]})")
    missing = LAYOUTS[name].missing(cfg.root)
    if missing and not fetching:
        folder = Path(cfg.root).expanduser() / LAYOUTS[name].folder
        raise ConfigError(f"invalid value {cfg.root!r} for data.root: {folder} lacks {', '.join(missing)}; "
                          f"add data.download=true to fetch them there once before launch (or {_HOW[name]})")


def _checker(name):
    def check(cfg):
        download = bool(cfg.get("download", False))
        if download:
            check_mirror(cfg.get("mirror"))
        _require(name, cfg, fetching=download)
    return check


def _fetcher(name):
    def fetch_set(cfg):
        return fetch(name, cfg.root, cfg.get("mirror"))
    return fetch_set


def _load_mnist(cfg):
    from torchvision.datasets import MNIST
    _require("mnist", cfg)
    root = str(Path(cfg.root).expanduser())
    out = []
    for train in (True, False):
        ds = MNIST(root, train=train, download=False)
        x = (ds.data.float().unsqueeze(1) / 255.0 - 0.1307) / 0.3081
        out.append(ResizedTensorDataset(x, ds.targets.long(), cfg.resize))
    return tuple(out)


def _cifar_batches(folder: Path, names):
    xs, ys = [], []
    for n in names:
        with open(folder / n, "rb") as f:
            entry = pickle.load(f, encoding="latin1")
        xs.append(entry["data"])
        ys.extend(entry["labels"])
    return np.vstack(xs).reshape(-1, 3, 32, 32), ys


def _load_cifar10(cfg):
    _require("cifar10", cfg)
    folder = Path(cfg.root).expanduser() / LAYOUTS["cifar10"].folder
    mean = torch.tensor([0.4914, 0.4822, 0.4465]).view(1, 3, 1, 1)
    std = torch.tensor([0.2470, 0.2435, 0.2616]).view(1, 3, 1, 1)
    out = []
    for names in ([f"data_batch_{i}" for i in range(1, 6)], ["test_batch"]):
        data, labels = _cifar_batches(folder, names)
        x = torch.from_numpy(data).float() / 255.0
        out.append(ResizedTensorDataset((x - mean) / std, torch.tensor(labels).long(), cfg.resize))
    return tuple(out)


DATASETS.register("mnist")(DatasetEntry(lambda cfg: resized_spec(InputSpec(1, 28, 10), cfg), _load_mnist,
                                        _checker("mnist"), _fetcher("mnist")))
DATASETS.register("cifar10")(DatasetEntry(lambda cfg: resized_spec(InputSpec(3, 32, 10), cfg), _load_cifar10,
                                          _checker("cifar10"), _fetcher("cifar10")))
