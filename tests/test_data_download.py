"""``data.download=true`` (workbench/data/download.py) against a real HTTP mirror in this process
(127.0.0.1): small MNIST and CIFAR-10 archives in the real layouts (MNIST's four gzipped idx files;
cifar-10-python.tar.gz with cifar-10-batches-py/), their md5 sums in the mirror's MD5SUMS. Only the
URL points elsewhere: torchvision's downloader fetches and checks them as it would the real ones.
"""
import gzip
import hashlib
import http.server
import io
import pickle
import struct
import subprocess
import sys
import tarfile
import threading
from pathlib import Path

import numpy as np
import pytest

import workbench
from conftest import ROOT, launch_run
from workbench import data as data_mod
from workbench.config import ConfigError, validate

N_TRAIN, N_TEST = 60, 16


def _idx(arr: np.ndarray) -> bytes:
    magic = 0x0800 | arr.ndim  # unsigned bytes, ndim dimensions (LeCun's idx format)
    return gzip.compress(struct.pack(">I", magic) + b"".join(struct.pack(">I", d) for d in arr.shape) + arr.tobytes())


def mnist_files(rng) -> dict:
    out = {}
    for prefix, n in (("train", N_TRAIN), ("t10k", N_TEST)):
        out[f"{prefix}-images-idx3-ubyte.gz"] = _idx(rng.integers(0, 256, (n, 28, 28), dtype=np.uint8))
        out[f"{prefix}-labels-idx1-ubyte.gz"] = _idx((np.arange(n) % 10).astype(np.uint8))
    return out


def cifar_archive(rng) -> tuple:
    """cifar-10-python.tar.gz bytes and the (data, labels) of its test batch."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        def add(name, obj):
            raw = pickle.dumps(obj, protocol=2)
            info = tarfile.TarInfo(f"cifar-10-batches-py/{name}")
            info.size = len(raw)
            tar.addfile(info, io.BytesIO(raw))
        for i in range(1, 6):
            add(f"data_batch_{i}", {"data": rng.integers(0, 256, (N_TRAIN // 5, 3072), dtype=np.uint8),
                                    "labels": [int(v) for v in rng.integers(0, 10, N_TRAIN // 5)]})
        test = {"data": rng.integers(0, 256, (N_TEST, 3072), dtype=np.uint8), "labels": list(range(10)) + [0] * (N_TEST - 10)}
        add("test_batch", test)
        add("batches.meta", {"label_names": [f"class{i}" for i in range(10)]})
    return buf.getvalue(), test


class Mirror:
    """A folder served over HTTP on 127.0.0.1 with its MD5SUMS; ``requests`` lists the paths asked for."""

    def __init__(self, folder: Path, files: dict) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        for name, raw in files.items():
            (folder / name).write_bytes(raw)
        (folder / "MD5SUMS").write_text("".join(f"{hashlib.md5(raw).hexdigest()}  {name}\n" for name, raw in files.items()))
        self.folder, self.requests = folder, []
        mirror = self

        class Handler(http.server.SimpleHTTPRequestHandler):
            def __init__(self, *a, **kw):
                super().__init__(*a, directory=str(folder), **kw)

            def log_message(self, fmt, *args):
                mirror.requests.append(self.path)

        class Server(http.server.ThreadingHTTPServer):
            def handle_error(self, request, client_address):
                if not isinstance(sys.exc_info()[1], ConnectionError):  # torchvision's redirect probe hangs up early
                    super().handle_error(request, client_address)

        self.server = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def mirror(tmp_path):
    rng = np.random.default_rng(0)
    tgz, test = cifar_archive(rng)
    m = Mirror(tmp_path / "mirror", {**mnist_files(rng), "cifar-10-python.tar.gz": tgz})
    m.cifar_test = test
    yield m
    m.close()


def test_missing_data_error_names_the_flag(tmp_path):
    with pytest.raises(ConfigError, match=r"lacks data_batch_1.*data\.download=true"):
        validate(workbench.compose(["data=cifar10", f"data.root={tmp_path}"]))
    with pytest.raises(ConfigError, match="data.mirror"):
        validate(workbench.compose(["data=mnist", f"data.root={tmp_path}", "data.download=true",
                                    f"data.mirror={tmp_path / 'no_such_folder'}"]))
    validate(workbench.compose(["data=mnist", f"data.root={tmp_path}", "data.download=true"]))  # fetched at launch
    assert not any(tmp_path.iterdir())  # validation fetches nothing


def test_mnist_download_then_a_run_then_a_second_run_fetches_nothing(mirror, run_overrides, tmp_path):
    root = tmp_path / "data"
    overrides = run_overrides + ["data=mnist", f"data.root={root}", "data.download=true", f"data.mirror={mirror.url}",
                                 "cluster.nproc=1", "data.batch_size=8", "trainer.max_steps=3", "trainer.eval_every=3"]
    run = launch_run(overrides)
    assert run.summary["status"] == "completed" and run.summary["steps"] == 3
    assert sorted(p.name for p in (root / "MNIST" / "raw").iterdir()) == sorted(
        ["train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"])
    assert [p.name for p in root.iterdir()] == ["MNIST"]  # no archive, no download folder left
    assert set(mirror.requests) == {"/MD5SUMS"} | {f"/{n}" for n in mnist_files(np.random.default_rng(0))}
    seen = len(mirror.requests)
    run2 = launch_run(overrides)
    assert run2.summary["status"] == "completed"
    assert len(mirror.requests) == seen  # the files are there: the mirror saw no request


def test_cifar10_download_then_the_data_loads(mirror, tmp_path):
    root = tmp_path / "data"
    cfg = workbench.compose(["data=cifar10", f"data.root={root}", "data.download=true", f"data.mirror={mirror.url}"])
    validate(cfg)
    assert data_mod.fetch(cfg) is True  # the launcher's pre-launch hook
    seen = len(mirror.requests)
    train, test, spec = data_mod.load(cfg)
    assert (len(train), len(test), spec.channels, spec.image_size) == (N_TRAIN, N_TEST, 3, 32)
    x, y = test[3]
    want = mirror.cifar_test["data"][3].reshape(3, 32, 32)[0, 0, 0] / 255.0
    assert float(x[0, 0, 0]) * 0.2470 + 0.4914 == pytest.approx(want, abs=1e-5)
    assert int(y) == 3
    assert data_mod.fetch(cfg) is False and len(mirror.requests) == seen and set(mirror.requests) == {"/MD5SUMS", "/cifar-10-python.tar.gz"}


def test_a_corrupt_archive_is_refused_in_one_line_and_nothing_is_written(mirror, tmp_path):
    tgz = mirror.folder / "cifar-10-python.tar.gz"
    raw = bytearray(tgz.read_bytes())
    raw[len(raw) // 2] ^= 0xFF  # served bytes no longer match the MD5SUMS the mirror lists
    tgz.write_bytes(bytes(raw))
    root, out = tmp_path / "data", tmp_path / "out"
    p = subprocess.run([sys.executable, "-m", "workbench", "data=cifar10", f"data.root={root}", "data.download=true",
                        f"data.mirror={mirror.url}", f"output_root={out}", "trainer.max_steps=1", "trainer.progress=false"],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert p.returncode == 2, p.stderr[-2000:]
    errors = [line for line in p.stderr.splitlines() if line.startswith("workbench: error:")]
    assert len(errors) == 1 and errors[0] == p.stderr.strip().splitlines()[-1], p.stderr[-2000:]
    assert "data.download" in errors[0] and "cifar-10-python.tar.gz" in errors[0] and "md5" in errors[0]
    assert "Traceback" not in p.stderr
    assert not root.exists()  # nothing half-written: data.root did not exist before, and does not now
    assert not out.exists() or not any(out.rglob("config.yaml"))  # no run directory left


def test_a_local_folder_works_as_a_mirror(mirror, tmp_path):
    """``data.mirror=/shared/datasets``: a plain path (copied, md5-checked against its MD5SUMS)."""
    root = tmp_path / "data"
    cfg = workbench.compose(["data=mnist", f"data.root={root}", "data.download=true", f"data.mirror={mirror.folder}"])
    validate(cfg)
    assert data_mod.fetch(cfg) is True and mirror.requests == []
    train, test, _ = data_mod.load(cfg)
    assert (len(train), len(test)) == (N_TRAIN, N_TEST)
