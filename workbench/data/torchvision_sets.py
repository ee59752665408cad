"""MNIST and CIFAR-10 through torchvision, from files already under ``data.root``.

Nothing is downloaded (``download=False``): when the files are missing the run fails before launch,
naming the directory and the files expected, and how to get them.
"""
from pathlib import Path

import torch

from workbench.core import ConfigError
from workbench.data import DATASETS, DatasetEntry, ResizedTensorDataset, resized_spec
from workbench.core import InputSpec

_FILES = {
    "mnist": ("MNIST/raw", ["train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                            "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"]),
    "cifar10": ("cifar-10-batches-py", [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch", "batches.meta"]),
}
_HOW = {
    "mnist": "torchvision.datasets.MNIST(root, download=True) on a machine with internet",
    "cifar10": "unpack cifar-10-python.tar.gz from https://www.cs.toronto.edu/~kriz/cifar.html",
}


def _checker(name):
    def check(cfg):
        if not cfg.root:
            raise ConfigError(f"invalid value None for data.root: data={name} needs the directory holding "
                              f"{_FILES[name][0]}/ ({_HOW[name]})")
        sub, files = _FILES[name]
        folder = Path(cfg.root).expanduser() / sub
        missing = [f for f in files if not (folder / f).exists()]
        if missing:
            raise ConfigError(f"invalid value {cfg.root!r} for data.root: {folder} lacks {', '.join(missing)} "
                              f"(get them with {_HOW[name]}); nothing is downloaded at run time")
    return check


def _load_mnist(cfg):
    from torchvision.datasets import MNIST
    root = str(Path(cfg.root).expanduser())
    out = []
    for train in (True, False):
        ds = MNIST(root, train=train, download=False)
        x = (ds.data.float().unsqueeze(1) / 255.0 - 0.1307) / 0.3081
        out.append(ResizedTensorDataset(x, ds.targets.long(), cfg.resize))
    return tuple(out)


def _load_cifar10(cfg):
    from torchvision.datasets import CIFAR10
    root = str(Path(cfg.root).expanduser())
    mean = torch.tensor([0.4914, 0.4822, 0.4465]).view(1, 3, 1, 1)
    std = torch.tensor([0.2470, 0.2435, 0.2616]).view(1, 3, 1, 1)
    out = []
    for train in (True, False):
        ds = CIFAR10(root, train=train, download=False)
        x = torch.from_numpy(ds.data).permute(0, 3, 1, 2).float() / 255.0
        out.append(ResizedTensorDataset((x - mean) / std, torch.tensor(ds.targets).long(), cfg.resize))
    return tuple(out)


DATASETS.register("mnist")(DatasetEntry(lambda cfg: resized_spec(InputSpec(1, 28, 10), cfg), _load_mnist, _checker("mnist")))
DATASETS.register("cifar10")(DatasetEntry(lambda cfg: resized_spec(InputSpec(3, 32, 10), cfg), _load_cifar10, _checker("cifar10")))
