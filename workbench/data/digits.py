"""The 1 797 handwritten 8x8 digits that scikit-learn ships (UCI optical digits): real data, no
download. A stratified, seeded 80/20 split gives 1 437 training and 360 test images."""
import numpy as np
import torch

from workbench.data import DATASETS, DatasetEntry, ResizedTensorDataset, resized_spec
from workbench.core import InputSpec

SPLIT_SEED = 0  # fixed, so the test set is the same for every run and every run seed


def _spec(cfg) -> InputSpec:
    return resized_spec(InputSpec(1, 8, 10), cfg)


def _load(cfg):
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    d = load_digits()
    x = (d.images.astype(np.float32) / 16.0 - 0.5) / 0.5  # pixel values 0..16 -> [-1, 1]
    xtr, xte, ytr, yte = train_test_split(x, d.target, test_size=cfg.test_fraction,
                                          random_state=SPLIT_SEED, stratify=d.target)
    t = lambda a: torch.from_numpy(np.ascontiguousarray(a)).unsqueeze(1)
    return (ResizedTensorDataset(t(xtr), torch.from_numpy(ytr).long(), cfg.resize),
            ResizedTensorDataset(t(xte), torch.from_numpy(yte).long(), cfg.resize))


DATASETS.register("digits")(DatasetEntry(_spec, _load))
