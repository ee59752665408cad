"""``docs/extending.md`` holds: its example compressor (``gather16``) and trainer (``naive``), taken
from the page's own code blocks, added both ways it describes: one module + one YAML in a temporary
copy of the tree, and a throw-away package whose entry points name the modules (a dist-info on the
path, as ``pip install`` would leave). Each way, in fresh processes: a real 2-process run of each,
its ``summary.json`` paradigm, the bytes suite's analytic count equal to the measured bytes, the
planner's variants, and the registry-parametrised tests of ``tests/test_compress.py`` on the new
compressor."""
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "extending.md"

CHECK = r'''
import json, sys
import workbench
from workbench import plan
from workbench.bench import bytes as B
from workbench.compress import COMPRESSORS
out = {"bytes_runs": [label for label, _, _ in B.runs_for(2, list(COMPRESSORS))],
       "plan": [v.label for v in plan.variants([], 2)[0]]}
for ov in (["trainer=naive"], ["trainer=compressed", "compressor=gather16"]):
    cfg = workbench.compose(ov + ["cluster.nproc=2", "trainer.max_steps=4", "trainer.eval_every=100000",
                                  "trainer.progress=false", "cluster.timeout_s=120", "output_root=" + sys.argv[1]])
    run = workbench.launch(cfg, progress=False)
    out[ov[-1]] = {"status": run.summary["status"], "paradigm": run.summary["paradigm"],
                   "sent": B.per_step(run)["sent"], "analytic": B.analytic_sent(run)}
print("RESULT " + json.dumps(out))
'''


def blocks() -> dict:
    """``{path: text}`` of the page's code blocks whose first line is ``# file: <path>``."""
    out = {}
    for body in re.findall(r"```\w*\n(.*?)```", DOC.read_text(), re.S):
        first, _, rest = body.partition("\n")
        m = re.match(r"# file: (\S+)", first)
        if m:
            out[m.group(1)] = rest if first.strip().endswith(m.group(1)) else body
    return out


def run_checks(tmp_path: Path, pythonpath: str, cwd: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": pythonpath}
    env.pop("WORKBENCH_CONF", None)
    p = subprocess.run([sys.executable, "-c", CHECK, str(tmp_path / "runs")], cwd=cwd, env=env,
                       capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    got = json.loads(p.stdout.split("RESULT ", 1)[1])
    t = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_compress.py",
                        "-k", "gather16"], cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    assert t.returncode == 0, t.stdout[-3000:]
    got["tests"] = t.stdout
    return got


def check(got: dict) -> None:
    assert "naive all-reduce" in got["bytes_runs"] and "compressed: gather16" in got["bytes_runs"]
    assert "naive" in got["plan"] and "compressed/gather16" in got["plan"]
    for key, paradigm in (("trainer=naive", "naive"), ("compressor=gather16", "compressed/gather16")):
        r = got[key]
        assert r["status"] == "completed" and r["paradigm"] == paradigm
        assert round(r["sent"]) == round(r["analytic"]) > 0, r  # exact, to the byte
    n = re.search(r"(\d+) passed", got["tests"])
    assert n and int(n.group(1)) >= 4, got["tests"]  # config file, payload bytes, error feedback, validation


def test_the_page_has_both_examples_complete():
    b = blocks()
    assert {"workbench/compress/gather16.py", "conf/compressor/gather16.yaml", "workbench/trainers/naive.py",
            "conf/trainer/naive.yaml", "pyproject.toml"} <= set(b)
    assert "store_option" in b["wbextra/gather16.py"] and "store_option" in b["wbextra/naive.py"]


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_in_tree_one_module_and_one_yaml(tmp_path):
    tree = tmp_path / "tree"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for part in ("workbench", "conf", "tests"):
        shutil.copytree(ROOT / part, tree / part, ignore=ignore)
    shutil.copy(ROOT / "pyproject.toml", tree / "pyproject.toml")
    for path, text in blocks().items():
        if path.startswith(("workbench/", "conf/")):
            (tree / path).write_text(text)
    check(run_checks(tmp_path, str(tree), tree))


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_third_party_package_by_entry_points(tmp_path):
    b = blocks()
    site = tmp_path / "site"
    pkg = site / "wbextra"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    for mod, src in (("gather16", "workbench/compress/gather16.py"), ("naive", "workbench/trainers/naive.py")):
        line = [l for l in b[f"wbextra/{mod}.py"].splitlines() if l and not l.startswith("#")][0]
        text = re.sub(r"^(register_compressor_schema|store_schema)\(.*$", line, b[src], count=1, flags=re.M)
        assert text != b[src]
        (pkg / f"{mod}.py").write_text(text)
    # what `pip install` of the page's pyproject.toml leaves: a dist-info with the entry points
    dist = site / "wbextra-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: wbextra\nVersion: 0.1\n")
    toml = b["pyproject.toml"]
    eps = "".join(f"[{g}]\n{body.strip()}\n\n".replace('"', "") for g, body in
                  re.findall(r'\[project\.entry-points\."([\w.]+)"\]\n(.*?)(?=\n\[|\Z)', toml, re.S))
    (dist / "entry_points.txt").write_text(eps)
    assert "[workbench.trainers]\nnaive = wbextra.naive" in eps
    check(run_checks(tmp_path, f"{site}{os.pathsep}{ROOT}", ROOT))
    assert not (ROOT / "workbench" / "trainers" / "naive.py").exists()  # nothing was written into the tree
