"""Shared fixtures. Multi-process tests run real ranks over gloo on this machine."""
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture
def run_overrides(tmp_path):
    """Overrides that keep a test run small, quiet and inside tmp_path."""
    return [f"output_root={tmp_path}", "trainer.progress=false", "cluster.timeout_s=60"]


def launch_run(overrides, check=True):
    """Compose + launch through the public API, as a notebook would."""
    import workbench
    cfg = workbench.compose(overrides)
    return workbench.launch(cfg, progress=False, check=check)
