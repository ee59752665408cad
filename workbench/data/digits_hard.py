"""``digits_hard``: scikit-learn's 8x8 digits grown into a large, hard 28x28 (or 32x32) task by
deterministic augmentation, for measuring time to accuracy (docs/accuracy.md).

Each image is one source digit, upsampled (bicubic, 8 -> 32), placed on the canvas by a random
affine map (rotation, anisotropic scale, shear, translation that may push strokes off the edge),
bent by a smooth elastic field, its ink thickened or thinned (a gamma), overlaid with a fragment of
another digit of the same pool (clutter), rescaled in contrast and covered in Gaussian noise, then
quantised to uint8. ``data.augment`` picks the strength (:data:`PRESETS`).

Hold-out: the 1 797 source digits are split as ``data=digits`` splits them (stratified, seed 0,
``data.test_fraction``); the training images are drawn only from the training sources and the test
images (clutter included) only from the held-out ones, with independent seeds.

Determinism and the cache: generation uses only a seeded ``torch.Generator`` and element-wise
sampling ops (no reductions), so its bytes do not depend on the thread count. The arrays are
written once to ``<data.root>/digits_hard/<key>.npz`` beside ``<key>.sha256`` (the SHA-256 of their
bytes); every load recomputes the hash, and a cache that fails it is generated again (one line on
stderr). Ranks that load at once take a file lock, so one generates and the others read.
"""
from __future__ import annotations

import fcntl
import hashlib
import math
import os
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Tuple

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import Dataset

from workbench.core import DataConfig, InputSpec, check, store_schema, world_size
from workbench.data import DATASETS, DatasetEntry, resized_spec

VERSION = 1  # bump when the generator's output changes: old caches then fall out of use by name
SPLIT_SEED = 0  # the same source split as data=digits
TRAIN_SEED, TEST_SEED = 11, 12
SIZES = (16, 28, 32)
CHUNK = 4096  # images generated at once (bounds memory)

# Strength presets. rot: max degrees; scale: digit height as a fraction of the canvas; aspect and
# shear: max log-aspect and shear factor; shift: max translation in canvas half-widths; elastic:
# displacement std (canvas half-widths) of a 4x4 field upsampled bicubically; gamma: max |log gamma|
# of the ink; clutter: probability and max intensity of a fragment of another digit; contrast:
# range of the digit's peak intensity; noise: std of the Gaussian pixel noise (pixels in [0, 1]).
PRESETS: Dict[str, dict] = {
    "light": dict(rot=15, scale=(0.7, 0.9), aspect=0.1, shear=0.1, shift=0.1, elastic=0.02, gamma=0.2,
                  clutter=(0.0, 0.0), contrast=(0.8, 1.0), noise=0.05),
    "medium": dict(rot=30, scale=(0.55, 0.9), aspect=0.2, shear=0.2, shift=0.2, elastic=0.04, gamma=0.4,
                   clutter=(0.5, 0.5), contrast=(0.6, 1.0), noise=0.15),
    "strong": dict(rot=40, scale=(0.45, 0.9), aspect=0.25, shear=0.3, shift=0.3, elastic=0.06, gamma=0.6,
                   clutter=(0.8, 0.7), contrast=(0.45, 1.0), noise=0.25),
}


@dataclass
class DigitsHardConfig(DataConfig):
    name: str = "digits_hard"
    image_size: int = 16  # canvas side: 16 (cheap on CPUs), 28 or 32
    augment: str = "medium"  # strength preset: light | medium | strong
    train_size: int = 100_000  # training images, drawn from the training source digits
    test_size: int = 5_000  # test images, drawn only from the held-out source digits


store_schema("data", "digits_hard", DigitsHardConfig)


# -- generation ---------------------------------------------------------------------------------
def source_split(test_fraction: float) -> Tuple[np.ndarray, np.ndarray]:
    """Indices into scikit-learn's digits of the (training, held-out) source digits: the split of
    ``data=digits`` (stratified, seed 0)."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    target = load_digits().target
    return train_test_split(np.arange(len(target)), test_size=test_fraction, random_state=SPLIT_SEED, stratify=target)


def sources(test_fraction: float) -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The (train images, test images, train labels, test labels) source digits, pixels in [0, 1]."""
    from sklearn.datasets import load_digits
    d = load_digits()
    tr, te = source_split(test_fraction)
    x = d.images.astype(np.float32) / 16.0
    return x[tr], x[te], d.target[tr], d.target[te]


def _uniform(g: torch.Generator, n: int, lo: float, hi: float) -> torch.Tensor:
    return lo + (hi - lo) * torch.rand(n, generator=g)


def _affine(g: torch.Generator, n: int, p: dict, scale: Tuple[float, float], shift: Tuple[float, float]) -> torch.Tensor:
    """(n, 2, 3) maps from canvas to source coordinates (affine_grid's theta): the inverse of
    scale . shear . rotation, then a translation of up to ``shift`` (min, max radius)."""
    rot = _uniform(g, n, -p["rot"], p["rot"]) * math.pi / 180
    s = _uniform(g, n, *scale)
    a = torch.exp(_uniform(g, n, -p["aspect"], p["aspect"]))
    sh = _uniform(g, n, -p["shear"], p["shear"])
    radius = _uniform(g, n, *shift)
    angle = _uniform(g, n, 0.0, 2 * math.pi)
    c, si = torch.cos(rot), torch.sin(rot)
    # forward map M = R . Sh . diag(s*a, s/a); canvas -> source is M^-1
    m = torch.stack([torch.stack([c, -si], -1), torch.stack([si, c], -1)], -2)
    one, zero = torch.ones(n), torch.zeros(n)
    m = m @ torch.stack([torch.stack([one, sh], -1), torch.stack([zero, one], -1)], -2)
    m = m @ torch.diag_embed(torch.stack([s * a, s / a], -1))
    inv = torch.linalg.inv(m)
    t = torch.stack([radius * torch.cos(angle), radius * torch.sin(angle)], -1)
    return torch.cat([inv, -(inv @ t.unsqueeze(-1))], -1)


def _warp(img: torch.Tensor, theta: torch.Tensor, size: int, field: torch.Tensor | None) -> torch.Tensor:
    grid = F.affine_grid(theta, [len(img), 1, size, size], align_corners=False)
    if field is not None:
        grid = grid + field
    return F.grid_sample(img, grid, mode="bilinear", padding_mode="zeros", align_corners=False)


def _chunk(g: torch.Generator, src: torch.Tensor, idx: torch.Tensor, size: int, p: dict) -> torch.Tensor:
    """``len(idx)`` augmented images (n, size, size) in [0, 1] of the upsampled sources ``src[idx]``."""
    n = len(idx)
    theta = _affine(g, n, p, p["scale"], (0.0, p["shift"]))
    field = torch.randn(n, 2, 4, 4, generator=g) * p["elastic"]
    field = F.interpolate(field, size=(size, size), mode="bicubic", align_corners=False).permute(0, 2, 3, 1)
    x = _warp(src[idx], theta, size, field).clamp_(0, 1)
    x = x ** torch.exp(_uniform(g, n, -p["gamma"], p["gamma"])).view(n, 1, 1, 1)
    x = x * _uniform(g, n, *p["contrast"]).view(n, 1, 1, 1)
    # clutter: another digit of the pool, mostly off-canvas so that only a fragment shows
    other = torch.randint(0, len(src), (n,), generator=g)
    ctheta = _affine(g, n, p, p["scale"], (0.75, 1.1))
    strength = _uniform(g, n, 0.3, 1.0) * p["clutter"][1] * (torch.rand(n, generator=g) < p["clutter"][0])
    clutter = _warp(src[other], ctheta, size, None).clamp_(0, 1) * strength.view(n, 1, 1, 1)
    x = torch.maximum(x, clutter)
    x = x + p["noise"] * torch.randn(x.shape, generator=g)
    return torch.round(x.clamp_(0, 1) * 255).to(torch.uint8).squeeze(1)


def generate(images: np.ndarray, labels: np.ndarray, n: int, size: int, augment: str, seed: int
             ) -> Tuple[np.ndarray, np.ndarray]:
    """``n`` augmented images (uint8, n x size x size) of ``images`` (8x8, [0, 1]) and their labels:
    every source used ``n // len(images)`` or one more times, in a seeded order."""
    p = PRESETS[augment]
    g = torch.Generator().manual_seed(seed)
    src = torch.from_numpy(np.ascontiguousarray(images)).unsqueeze(1)
    src = F.interpolate(src, size=(32, 32), mode="bicubic", align_corners=False).clamp_(0, 1)
    idx = (torch.arange(n) % len(src))[torch.randperm(n, generator=g)]
    x = torch.cat([_chunk(g, src, idx[i:i + CHUNK], size, p) for i in range(0, n, CHUNK)]) if n else \
        torch.zeros(0, size, size, dtype=torch.uint8)
    return x.numpy(), np.asarray(labels, dtype=np.int64)[idx.numpy()]


def build(cfg) -> Dict[str, np.ndarray]:
    """The whole set for ``cfg`` (train and test arrays), generated in memory."""
    xtr, xte, ytr, yte = sources(cfg.test_fraction)
    x_train, y_train = generate(xtr, ytr, cfg.train_size, cfg.image_size, cfg.augment, TRAIN_SEED)
    x_test, y_test = generate(xte, yte, cfg.test_size, cfg.image_size, cfg.augment, TEST_SEED)
    return {"x_train": x_train, "y_train": y_train, "x_test": x_test, "y_test": y_test}


def content_hash(arrays: Dict[str, np.ndarray]) -> str:
    """SHA-256 over the arrays' names, shapes, dtypes and bytes, in name order."""
    h = hashlib.sha256()
    for k in sorted(arrays):
        a = np.ascontiguousarray(arrays[k])
        h.update(f"{k}:{a.dtype.str}:{a.shape};".encode())
        h.update(a.tobytes())
    return h.hexdigest()


# -- the cache -----------------------------------------------------------------------------------
def cache_path(cfg) -> Path:
    key = (f"v{VERSION}-{cfg.augment}-{cfg.image_size}px-{cfg.train_size}-{cfg.test_size}"
           f"-tf{cfg.test_fraction:g}")
    return Path(cfg.root or "data").expanduser() / "digits_hard" / f"{key}.npz"


def _read(path: Path) -> Dict[str, np.ndarray] | None:
    """The cached arrays if the file and its hash file exist and agree; else None (saying why if the
    file is there)."""
    sidecar = path.with_suffix(".sha256")
    if not path.exists():
        return None
    try:
        with np.load(path) as z:
            arrays = {k: z[k] for k in z.files}
        ok = sidecar.exists() and content_hash(arrays) == sidecar.read_text().split()[0]
    except (OSError, ValueError, KeyError, IndexError, zipfile.BadZipFile):
        ok = False
    if not ok:
        print(f"workbench: digits_hard: cache {path} fails its hash; generating it again", file=sys.stderr)
        return None
    return arrays


def _write(path: Path, arrays: Dict[str, np.ndarray]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        np.savez(f, **arrays)
    path.with_suffix(".sha256").write_text(content_hash(arrays) + "\n")
    os.replace(tmp, path)


def cached(cfg) -> Dict[str, np.ndarray]:
    """The set for ``cfg`` from its cache, generated (and cached) first where missing or corrupt."""
    path = cache_path(cfg)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one rank generates, the others wait and read
        arrays = _read(path)
        if arrays is None:
            arrays = build(cfg)
            _write(path, arrays)
    return arrays


class Uint8Images(Dataset):
    """uint8 images (N, H, W) held as they are cached, scaled to [-1, 1] floats (1, H, W) per item
    (a quarter of the memory of float copies), optionally resized once at load time."""

    def __init__(self, x: np.ndarray, y: np.ndarray, resize: int | None = None) -> None:
        self.x, self.y = torch.from_numpy(x), torch.from_numpy(y).long()
        self.resize = resize if resize and resize != x.shape[-1] else None

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i):
        img = (self.x[i].unsqueeze(0).float() / 255.0 - 0.5) / 0.5
        if self.resize:
            img = F.interpolate(img.unsqueeze(0), size=(self.resize, self.resize), mode="bilinear",
                                align_corners=False).squeeze(0)
        return img, self.y[i]


# -- the registry entry --------------------------------------------------------------------------
def _spec(cfg) -> InputSpec:
    return resized_spec(InputSpec(1, cfg.image_size, 10), cfg)


def _load(cfg):
    a = cached(cfg)
    return (Uint8Images(a["x_train"], a["y_train"], cfg.resize), Uint8Images(a["x_test"], a["y_test"], cfg.resize))


def _check(cfg) -> None:
    check(cfg.augment in PRESETS, "data.augment", cfg.augment, f"choose from {', '.join(PRESETS)}")
    check(cfg.image_size in SIZES, "data.image_size", cfg.image_size, f"choose from {', '.join(map(str, SIZES))}")
    check(1_000 <= cfg.train_size <= 2_000_000, "data.train_size", cfg.train_size, "must be in [1000, 2000000]")
    check(100 <= cfg.test_size <= 200_000, "data.test_size", cfg.test_size, "must be in [100, 200000]")


@dataclass(frozen=True)
class _Entry(DatasetEntry):
    def validate(self, cfg) -> None:
        """The shared ranges and :func:`_check`, then the global batch against the training set."""
        super().validate(cfg)
        d = cfg.data
        batch = d.global_batch_size if d.global_batch_size is not None else d.batch_size * world_size(cfg)
        key = "data.global_batch_size" if d.global_batch_size is not None else "data.batch_size"
        check(batch <= d.train_size, key, d.global_batch_size if d.global_batch_size is not None else d.batch_size,
              f"a global batch of {batch} exceeds data.train_size={d.train_size}; lower it or raise data.train_size")


DATASETS.register("digits_hard")(_Entry(_spec, _load, _check))
