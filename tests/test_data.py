"""Data sets and sharding: real digits, deterministic synthetic set, disjoint worker shards whose
union is the single-process global batch."""
import pytest
import torch

import workbench
from workbench import data as data_mod


def test_digits_is_the_real_dataset():
    cfg = workbench.compose([])
    train, test, spec = data_mod.load(cfg)
    assert (len(train), len(test)) == (1437, 360)
    assert (spec.channels, spec.image_size, spec.num_classes) == (1, 8, 10)
    x, y = train[0]
    assert x.shape == (1, 8, 8) and 0 <= int(y) < 10
    assert sorted(set(int(v) for v in test.y)) == list(range(10))


def test_resize():
    cfg = workbench.compose(["data.resize=32"])
    train, _, spec = data_mod.load(cfg)
    assert train[0][0].shape == (1, 32, 32) and spec.image_size == 32


def test_synthetic_is_deterministic():
    cfg = workbench.compose(["data=synthetic", "data.num_samples=64", "data.image_size=8"])
    a, _, _ = data_mod.load(cfg)
    b, _, _ = data_mod.load(cfg)
    assert torch.equal(a.x, b.x) and torch.equal(a.y, b.y)


@pytest.mark.parametrize("workers", [1, 2, 3, 4])
def test_shards_are_disjoint_and_union_is_global_batch(workers):
    cfg = workbench.compose(["data.batch_size=8"])
    train, _, _ = data_mod.load(cfg)
    b = 8
    for epoch in (0, 1):
        per_worker = []
        for w in range(workers):
            loader, sampler = data_mod.train_loader(train, cfg, w, workers, seed=5)
            sampler.set_epoch(epoch)
            per_worker.append([list(sampler)[k * b:(k + 1) * b] for k in range(len(loader))])
        ref_sampler = torch.utils.data.DistributedSampler(train, num_replicas=1, rank=0, shuffle=True, seed=5, drop_last=True)
        ref_sampler.set_epoch(epoch)
        ref = list(ref_sampler)
        steps = len(per_worker[0])
        assert steps == len(train) // (workers * b)
        seen = set()
        for k in range(steps):
            batch = [i for w in range(workers) for i in per_worker[w][k]]
            assert sorted(batch) == sorted(ref[k * workers * b:(k + 1) * workers * b])
            assert not seen & set(batch)
            seen |= set(batch)


def test_test_shards_cover_test_set_once():
    cfg = workbench.compose([])
    _, test, _ = data_mod.load(cfg)
    n = sum(len(data_mod.test_loader(test, cfg, w, 3).dataset) for w in range(3))
    assert n == len(test)


def test_missing_files_never_download(tmp_path):
    from workbench.config import ConfigError
    cfg = workbench.compose(["data=mnist", f"data.root={tmp_path}"])
    with pytest.raises(ConfigError, match="train-images-idx3-ubyte"):
        data_mod.load(cfg)
    assert not any(tmp_path.iterdir())  # nothing was fetched or created
