"""data=digits_hard: byte-for-byte deterministic generation, a cache whose hash is checked on load
(and regenerated when it fails), the hold-out (test images only from held-out source digits, none
equal to a training image), its bad inputs, and (slow tier) a short run that learns it."""
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import workbench
from conftest import launch_run
from workbench import data as data_mod
from workbench.config import ConfigError, validate
from workbench.data import digits_hard as dh

ROOT = Path(__file__).resolve().parent.parent
SMALL = ["data=digits_hard", "data.train_size=2000", "data.test_size=300"]


def _cfg(tmp_path, *extra):
    return workbench.compose(SMALL + [f"data.root={tmp_path}", *extra])


def test_generation_is_deterministic_whatever_the_threads(tmp_path):
    cfg = _cfg(tmp_path).data
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        a = dh.build(cfg)
        torch.set_num_threads(2)
        b = dh.build(cfg)
    finally:
        torch.set_num_threads(threads)
    assert dh.content_hash(a) == dh.content_hash(b)
    assert a["x_train"].shape == (2000, 16, 16) and a["x_train"].dtype == np.uint8
    assert a["x_test"].shape == (300, 16, 16)
    assert np.bincount(a["y_train"], minlength=10).min() >= 180  # every source used equally often
    other = dh.build(_cfg(tmp_path, "data.augment=strong").data)
    assert dh.content_hash(other) != dh.content_hash(a)


def test_held_out_sources_never_feed_the_training_set(tmp_path):
    tr, te = dh.source_split(0.2)
    assert len(set(tr) & set(te)) == 0 and len(tr) + len(te) == 1797
    assert len(te) == 360  # the same split as data=digits
    a = dh.build(_cfg(tmp_path).data)
    train = {x.tobytes() for x in a["x_train"]}
    assert not any(x.tobytes() in train for x in a["x_test"])


def test_cache_is_hashed_and_regenerated_when_corrupt(tmp_path, capfd):
    cfg = _cfg(tmp_path)
    train, test, spec = data_mod.load(cfg)
    path = dh.cache_path(cfg.data)
    assert path.exists() and path.with_suffix(".sha256").read_text().strip() == dh.content_hash(dh.cached(cfg.data))
    assert (len(train), len(test), spec.image_size, spec.num_classes) == (2000, 300, 16, 10)
    x, y = train[0]
    assert x.shape == (1, 16, 16) and x.dtype == torch.float32 and -1 <= x.min() <= x.max() <= 1 and 0 <= int(y) < 10
    good = dh.cached(cfg.data)
    assert capfd.readouterr().err == ""

    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0xFF  # one byte of the training images flipped
    path.write_bytes(bytes(raw))
    again = dh.cached(cfg.data)
    err = capfd.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "fails its hash" in err[0] and str(path) in err[0]
    assert dh.content_hash(again) == dh.content_hash(good)
    assert dh.content_hash(dh.cached(cfg.data)) == dh.content_hash(good) and capfd.readouterr().err == ""


def test_default_size_dwarfs_a_large_global_batch():
    d = workbench.compose(["data=digits_hard"]).data
    assert d.train_size >= 100_000 and 4096 < 0.1 * d.train_size
    assert (d.image_size, d.augment) == (16, "medium")


BAD = [
    (["data.augment=extreme"], ["data.augment", "light, medium, strong"]),
    (["data.image_size=20"], ["data.image_size", "16, 28, 32"]),
    (["data.train_size=10"], ["data.train_size"]),
    (["data.test_size=0"], ["data.test_size"]),
    (["data.train_size=2000", "data.global_batch_size=4096"],
     ["data.global_batch_size", "4096", "data.train_size=2000"]),
    (["data.train_size=2000", "data.batch_size=600", "cluster.nproc=4"], ["data.batch_size", "2400"]),
]


@pytest.mark.parametrize("overrides, words", BAD, ids=[" ".join(o) for o, _ in BAD])
def test_bad_input_is_one_config_error(overrides, words):
    with pytest.raises(ConfigError) as e:
        validate(workbench.compose(["data=digits_hard", *overrides]))
    msg = str(e.value)
    assert "\n" not in msg and all(w in msg for w in words), msg


def test_bad_input_through_the_cli(tmp_path):
    p = subprocess.run([sys.executable, "-m", "workbench", f"output_root={tmp_path}", f"data.root={tmp_path}",
                        "data=digits_hard", "data.augment=extreme"], cwd=ROOT, capture_output=True, text=True,
                       timeout=120)
    lines = [l for l in (p.stderr + p.stdout).splitlines() if l.strip()]
    assert p.returncode == 2 and len(lines) == 1 and lines[0].startswith("workbench: error: "), lines
    assert "data.augment" in lines[0]
    assert not list(tmp_path.iterdir())  # nothing started, nothing generated


@pytest.mark.slow
def test_short_run_learns_it_and_logs_the_noise_scale(run_overrides, tmp_path):
    """200 steps at global batch 64 on 2 workers: well above chance (10 %), and every evaluation
    carries a finite, positive gradient noise scale."""
    run = launch_run(run_overrides + [f"data.root={tmp_path}", "data=digits_hard", "data.train_size=20000",
                                      "cluster.nproc=2", "data.global_batch_size=64", "trainer.max_steps=200",
                                      "trainer.eval_every=100"])
    evals = [r for r in run.records() if r["kind"] == "eval"]
    assert [r["step"] for r in evals] == [100, 200]
    assert run.summary["final_test_accuracy"] >= 0.55
    assert all(np.isfinite(r["gradient_noise_scale"]) and r["gradient_noise_scale"] > 0 for r in evals)
