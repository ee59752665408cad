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


@pytest.mark.timeout(300)
def test_gpu_check_script_runs_its_matrix_on_cpu_ranks(tmp_path):
    """The script itself, here without a GPU (--cpu): a trainer that needs more ranks than the
    1-rank setting gives (a parameter server's server, Stanza's FC rank) runs with its fewest."""
    p = subprocess.run([sys.executable, "-m", "workbench.bench.gpu_check", "--cpu", "--steps", "2",
                        "--trainers", "ps", "stanza"], cwd=tmp_path, capture_output=True, text=True, timeout=280,
                       env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    lines = [ln.split() for ln in p.stdout.splitlines() if ln.startswith("PASS")]
    assert [(ln[1], ln[2]) for ln in lines] == [("ps", "2"), ("ps", "3"), ("stanza", "2"), ("stanza", "3")]
    assert (tmp_path / "experiments/bench/gpu_check.md").read_text().count("| PASS |") == 4
