"""``data.download=true``: fetch a data set's files into ``data.root`` with torchvision's own
downloader, once, in the launcher before any rank starts (never in a rank).

    python -m workbench data=cifar10 model=resnet18 data.download=true     # fetched once, then read
    python -m workbench data=mnist data.download=true data.mirror=https://mirror.example.org/datasets/
    WORKBENCH_DATA_MIRROR=/shared/datasets python -m workbench data=mnist data.download=true

Sources and checksums. Without a mirror the URLs and md5 sums are the ones torchvision's own classes
carry (``MNIST.mirrors`` + ``MNIST.resources``, ``CIFAR10.url`` + ``CIFAR10.tgz_md5``), and
``torchvision.datasets.utils.download_url`` checks each file against them. ``data.mirror`` (default
``$WORKBENCH_DATA_MIRROR``) replaces only the URL: a folder (``http(s)://…``, ``file://…`` or a
local path) holding the upstream file names side by side (``train-images-idx3-ubyte.gz`` …,
``cifar-10-python.tar.gz``) and ``MD5SUMS``, what ``md5sum * > MD5SUMS`` writes there. A file
fetched from a mirror is checked against the mirror's MD5SUMS (a file it does not list is refused).
The mirror is trusted as configured: where its sum differs from torchvision's the file is not the
upstream one, and a warning line says so (an institutional copy of the real files matches; the
tests' small archives do not).

Nothing half-written: every file is downloaded, md5-checked and unpacked in a private folder
``<root>/.workbench-download-*``, and only complete files are moved into place (``os.replace``,
a rename on the same file system); any failure removes the folder, and ``data.root`` holds what it
held before. A set whose files are all present costs no network request at all.
"""
from __future__ import annotations

import os
import shutil
import sys
import tarfile
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Dict, List, Optional, Tuple

from workbench.core import ConfigError

MANIFEST = "MD5SUMS"


@dataclass(frozen=True)
class Layout:
    """Where a set's files live under ``data.root`` and how they are fetched."""
    folder: str                # under data.root: the files the loader reads
    files: Tuple[str, ...]
    unpacked: str              # where the archives unpack to, relative to the download folder

    def missing(self, root) -> List[str]:
        folder = Path(root).expanduser() / self.folder
        return [f for f in self.files if not (folder / f).is_file()]


LAYOUTS: Dict[str, Layout] = {
    "mnist": Layout("MNIST/raw", ("train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                                  "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"), ""),
    "cifar10": Layout("cifar-10-batches-py", tuple(f"data_batch_{i}" for i in range(1, 6)) + ("test_batch", "batches.meta"),
                      "cifar-10-batches-py"),
}


def upstream(name: str) -> List[Tuple[str, str, List[str]]]:
    """``[(file name, md5, [urls])]`` as torchvision's dataset classes define them."""
    from torchvision.datasets import CIFAR10, MNIST
    if name == "mnist":
        return [(f, md5, [m + f for m in MNIST.mirrors]) for f, md5 in MNIST.resources]
    return [(CIFAR10.filename, CIFAR10.tgz_md5, [CIFAR10.url])]


def mirror_base(mirror: str) -> str:
    """The mirror as a URL ending in ``/`` (a plain path becomes a ``file://`` URL)."""
    base = mirror if "://" in mirror else Path(mirror).expanduser().resolve().as_uri()
    return base if base.endswith("/") else base + "/"


def check_mirror(mirror: Optional[str]) -> None:
    """Validation before launch: a URL of a scheme urllib reads, or an existing folder."""
    if not mirror:
        return
    scheme = mirror.split("://", 1)[0] if "://" in mirror else None
    ok = scheme in ("http", "https", "file") if scheme else Path(mirror).expanduser().is_dir()
    if not ok:
        raise ConfigError(f"invalid value {mirror!r} for data.mirror: an http(s):// or file:// URL or an existing "
                          f"folder holding the files and {MANIFEST} (md5sum * > {MANIFEST}), or null for torchvision's sources")


def read_manifest(base: str, mirror: str) -> Dict[str, str]:
    """The mirror's MD5SUMS as ``{file name: md5}`` (``md5sum`` output, text or binary mode)."""
    try:
        with urllib.request.urlopen(base + MANIFEST, timeout=60) as r:
            text = r.read().decode("utf-8", "replace")
    except (urllib.error.URLError, OSError, ValueError) as e:
        raise ConfigError(f"invalid value {mirror!r} for data.mirror: cannot read {base}{MANIFEST} ({_why(e)}); a mirror "
                          f"holds the files and {MANIFEST} (md5sum * > {MANIFEST})") from None
    sums = {}
    for line in text.splitlines():
        parts = line.strip().split(None, 1)
        if len(parts) == 2 and len(parts[0]) == 32:
            sums[parts[1].lstrip("*").strip()] = parts[0].lower()
    return sums


def sources(name: str, mirror: Optional[str]) -> List[Tuple[str, str, List[str]]]:
    """What to fetch: torchvision's URLs and sums, or the mirror's URLs and its MD5SUMS."""
    files = upstream(name)
    if not mirror:
        return files
    base = mirror_base(mirror)
    sums = read_manifest(base, mirror)
    for f, _, _ in files:
        if f not in sums:
            raise ConfigError(f"invalid value {mirror!r} for data.mirror: {base}{MANIFEST} does not list {f}")
    other = [f for f, md5, _ in files if sums[f] != md5]
    if other:
        print(f"workbench: warning: data.mirror's MD5SUMS differs from torchvision's for {', '.join(other)}: not the "
              "upstream files; they are checked against the mirror's sums", file=sys.stderr, flush=True)
    return [(f, sums[f], [base + f]) for f, _, _ in files]


def _why(e: BaseException) -> str:
    text = " ".join(str(getattr(e, "reason", None) or e).split())
    return f"{type(e).__name__}: {text}"[:300]


def _check_tar(path: Path) -> None:
    """Refuse an archive member that would land outside the download folder, or is not a plain
    file or folder (torchvision's extractor does not filter)."""
    with tarfile.open(path) as tar:
        for m in tar.getmembers():
            p = PurePosixPath(m.name)
            if p.is_absolute() or ".." in p.parts or not (m.isfile() or m.isdir()):
                raise ValueError(f"unsafe archive member {m.name!r}")


def _get(url: str, f: str, md5: str, tmp: Path) -> None:
    """``url`` to ``tmp/f``, md5-checked: torchvision's download_url, or for a ``file://`` mirror (a
    shared folder, which its downloader does not read) a copy checked by its check_integrity."""
    from torchvision.datasets.utils import check_integrity, download_url
    if not url.startswith("file:"):
        return download_url(url, str(tmp), filename=f, md5=md5)
    shutil.copyfile(urllib.request.url2pathname(urllib.parse.urlparse(url).path), tmp / f)
    if not check_integrity(str(tmp / f), md5):
        raise RuntimeError("File not found or corrupted.")


def _fetch_one(f: str, md5: str, urls: List[str], tmp: Path) -> None:
    """One file into ``tmp`` (md5-checked), then unpacked there."""
    from torchvision.datasets.utils import calculate_md5, extract_archive
    errors = []
    for url in urls:
        try:
            _get(url, f, md5, tmp)
        except Exception as e:  # noqa: BLE001 - any failure of a source is that source's: try the next
            got = tmp / f
            why = f"md5 {calculate_md5(got)}, expected {md5}" if got.is_file() else _why(e)
            errors.append(f"{url}: {why}")
            continue
        break
    else:
        raise ConfigError(f"invalid value True for data.download: could not fetch {f} ({'; '.join(errors)})")
    try:
        if tarfile.is_tarfile(tmp / f):
            _check_tar(tmp / f)
        extract_archive(str(tmp / f), str(tmp), remove_finished=True)
    except Exception as e:  # noqa: BLE001 - any unpacking failure is the archive's
        raise ConfigError(f"invalid value True for data.download: {f} from {urls[0]} does not unpack ({_why(e)})") from None


def fetch(name: str, root: str, mirror: Optional[str] = None) -> bool:
    """Fetch the files of ``name`` missing under ``root``; False (and no request) when none is.
    Raises ConfigError (one line) when a source cannot be read or a file fails its md5 sum."""
    layout = LAYOUTS[name]
    if not layout.missing(root):
        return False
    root_p = Path(root).expanduser()
    created = not root_p.exists()
    try:
        root_p.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".workbench-download-", dir=root_p))
    except OSError as e:
        raise ConfigError(f"invalid value {root!r} for data.root: cannot write there ({_why(e)})") from None
    done = False
    try:
        print(f"workbench: data.download: fetching {name} from {mirror_base(mirror) if mirror else 'its upstream source'} "
              f"into {root_p}", file=sys.stderr, flush=True)
        files = sources(name, mirror)
        for f, md5, urls in files:
            _fetch_one(f, md5, urls, tmp)
        unpacked = tmp / layout.unpacked
        lacking = [f for f in layout.files if not (unpacked / f).is_file()]
        if lacking:
            raise ConfigError(f"invalid value True for data.download: the {name} archives lack {', '.join(lacking)}")
        target = root_p / layout.folder
        target.mkdir(parents=True, exist_ok=True)
        for f in layout.missing(root):
            os.replace(unpacked / f, target / f)
        done = True
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if created and not done:
            try:
                root_p.rmdir()  # the folder this call made, empty again: data.root is as it was
            except OSError:
                pass
    return True
