"""On a machine with CUDA: the GPU check (every trainer a few steps, NCCL on one GPU and gloo ranks
sharing it) passes. Skipped with the reason elsewhere; ``make gpu-check`` prints the full table."""
import subprocess
import sys

import pytest

from conftest import ROOT


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_gpu_check_passes_for_every_trainer(tmp_path):
    p = subprocess.run([sys.executable, "-m", "workbench.bench.gpu_check", "--steps", "4"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=880, env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "FAIL" not in p.stdout and " passed;" in p.stdout
