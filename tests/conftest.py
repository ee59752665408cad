"""Shared fixtures. Multi-process tests run real ranks over gloo on this machine.

Tiers (markers registered in pyproject.toml): ``make test`` runs ``-m "not slow"`` (the fast tier);
``make test-all`` runs everything and the notebooks under nbval. A test marked ``root``,
``browser`` or ``gpu`` skips with the reason when this machine lacks what it needs, so both tiers
run anywhere; CI runs as root and installs Chromium (``make system-deps``).

The make targets run the tests in parallel processes (pytest-xdist, ``--dist loadgroup``). Tests that
must not overlap share a group and so one process, in order: the ``root`` tests (network namespaces:
several check that none is left behind) and the notebooks (50 reads the runs 00 leaves).
"""
import os
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("OMP_NUM_THREADS", "1")


def _missing(marker: str):
    """Why a test with this marker cannot run here, or None."""
    if marker == "root":
        if os.geteuid() != 0:
            return "needs root (network namespaces and tc): run as root, as CI does"
        if shutil.which("ip") is None or shutil.which("tc") is None:
            return "needs iproute2 (ip, tc): make system-deps"
    elif marker == "browser":
        from workbench.report import chromium
        if chromium() is None:
            return "needs Chromium: make system-deps (apt-get install chromium)"
    elif marker == "gpu":
        import torch
        if not torch.cuda.is_available():
            return "needs a CUDA GPU (torch.cuda.is_available() is False)"
    return None


def _xdist_group(item):
    """The group of tests that run in one process, in collection order, or None."""
    if item.get_closest_marker("root") is not None:
        return "netns"
    if item.path.suffix == ".ipynb":
        return "notebooks"
    return None


@pytest.hookimpl(tryfirst=True)  # before xdist's, which reads the groups
def pytest_collection_modifyitems(config, items):
    reasons = {}
    grouped = config.pluginmanager.hasplugin("xdist")
    for item in items:
        group = _xdist_group(item) if grouped else None
        if group:
            item.add_marker(pytest.mark.xdist_group(group))
        for marker in ("root", "browser", "gpu"):
            if item.get_closest_marker(marker) is not None:
                if marker not in reasons:
                    reasons[marker] = _missing(marker)
                if reasons[marker]:
                    item.add_marker(pytest.mark.skip(reason=reasons[marker]))


@pytest.fixture
def run_overrides(tmp_path):
    """Overrides that keep a test run small, quiet and inside tmp_path."""
    return [f"output_root={tmp_path}", "trainer.progress=false", "cluster.timeout_s=60"]


def launch_run(overrides, check=True):
    """Compose + launch through the public API, as a notebook would."""
    import workbench
    cfg = workbench.compose(overrides)
    return workbench.launch(cfg, progress=False, check=check)
