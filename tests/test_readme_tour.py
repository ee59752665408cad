"""The README's five-minute tour runs as pasted: its fenced bash block after ``<!-- tour -->`` (a run, a
plan, a notebook, the dashboard), line by line with ``python`` the interpreter running the tests, in a
temporary copy of the tree so that its runs, profile and reports land there. Each step leaves what the
README says it does."""
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"


def tour() -> list:
    """The tour's command lines, as pasted (comments kept: bash drops them)."""
    m = re.search(r"<!-- tour -->\s*```bash\n(.*?)```", README.read_text(), re.S)
    assert m, "README.md has no ```bash block after <!-- tour -->"
    return [line for line in m.group(1).splitlines() if line.strip()]


def test_the_tour_is_a_run_a_plan_a_notebook_and_the_dashboard():
    lines = tour()
    assert len(lines) == 4, lines
    assert lines[0].startswith("python -m workbench ")
    assert lines[1].startswith("python -m workbench.plan ")
    assert lines[2].startswith("python -m workbench.report notebooks/00_quickstart.ipynb")
    assert lines[3].startswith("python -m workbench.report notebooks/50_tradeoff_dashboard.ipynb")
    assert len(README.read_text().splitlines()) <= 200


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_the_tour_runs_as_pasted(tmp_path):
    tree = tmp_path / "tree"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".ipynb_checkpoints")
    for part in ("workbench", "conf", "notebooks"):
        shutil.copytree(ROOT / part, tree / part, ignore=ignore)
    shutil.copy(ROOT / "pyproject.toml", tree / "pyproject.toml")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "python"  # a script, not a link: a venv's interpreter finds its packages by its own path
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    wrapper.chmod(0o755)
    env = {**os.environ, "PYTHONPATH": str(tree), "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    env.pop("WORKBENCH_CONF", None)
    outputs = []
    for line in tour():
        p = subprocess.run(["bash", "-c", line], cwd=tree, env=env, capture_output=True, text=True, timeout=900)
        assert p.returncode == 0, f"{line}\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}"
        outputs.append(p.stdout + p.stderr)
    summaries = [json.loads(s.read_text()) for s in (tree / "experiments" / "runs").rglob("summary.json")]
    assert len(summaries) >= 3 and all(s["status"] == "completed" for s in summaries), summaries
    assert "completed after 40 steps" in outputs[0]
    assert "2 ranks, 1gbit:" in outputs[1] and "2 ranks, 10gbit:" in outputs[1] and "ps/sync" in outputs[1]
    reports = sorted(p.name for p in (tree / "experiments" / "reports").rglob("*.html") if p.name != "index.html")
    assert any("00_quickstart" in r for r in reports) and any("50_tradeoff_dashboard" in r for r in reports), reports
