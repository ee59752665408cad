"""The notebooks: committed clean (no outputs, a literal ``parameters`` cell first), executed by
papermill with small injected parameters (which must take effect), the live progress bar is a
Jupyter widget that reaches the end, and the HTML report of ``python -m workbench.report`` carries
every figure with its data and plotly.js inline (and renders in headless Chromium where installed).

CI also runs every notebook with its default parameters under nbval (``make test-notebooks``:
``pytest --nbval-lax notebooks/``): each trainer notebook's last cell asserts that every variant it
launched completed, and notebook 60 asserts its own tables (Rudra's ⟨τ⟩ ≈ λ/c, every real run
completed), so that run is where they are executed.
"""
import ast
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from omegaconf import OmegaConf

from conftest import ROOT

NB_DIR = ROOT / "notebooks"
EXPECTED = ["00_quickstart", "10_parameter_server", "20_bounded_staleness", "30_stanza",
            "40_gradient_compression", "50_tradeoff_dashboard", "60_at_scale", "70_accuracy_at_scale"]
NOTEBOOKS = sorted(NB_DIR.glob("*.ipynb"))


def _code_cells(nb):
    return [c for c in nb.cells if c.cell_type == "code"]


def test_every_notebook_is_there():
    assert [p.stem for p in NOTEBOOKS] == EXPECTED


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_committed_notebook_is_clean(path):
    nb = nbformat.read(str(path), as_version=4)
    nbformat.validate(nb)
    for c in _code_cells(nb):  # no outputs at all: deterministic checks are assertions inside the cells
        assert c.outputs == [], f"{path.name}: outputs left in a cell:\n{c.source[:200]}"
        assert c.execution_count is None, f"{path.name}: execution count left in a cell"
    first = _code_cells(nb)[0]
    assert "parameters" in first.metadata.get("tags", []), f"{path.name}: first code cell is not tagged parameters"
    names = []
    for stmt in ast.parse(first.source).body:
        assert isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name), \
            f"{path.name}: parameters cell holds something other than `name = literal`: {ast.unparse(stmt)}"
        ast.literal_eval(stmt.value)  # raises on anything but a plain literal
        names.append(stmt.targets[0].id)
    import papermill as pm  # papermill's own reading of the cell (`papermill --help-notebook`) sees every one
    assert list(pm.inspect_notebook(str(path))) == names


def test_nbstripout_verify_passes():
    exe = shutil.which("nbstripout", path=str(Path(sys.executable).parent)) or shutil.which("nbstripout")
    if exe is None:
        pytest.skip("nbstripout is not installed (pip install -e .[dev])")
    r = subprocess.run([exe, "--verify", *map(str, NOTEBOOKS)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


# -- the report command, the parameters it injects, the live bar, the HTML --------------------------

@pytest.fixture(scope="module")
def quickstart_report(tmp_path_factory):
    """``python -m workbench.report`` on the quickstart with injected parameters (one sync run)."""
    tmp = tmp_path_factory.mktemp("report")
    cmd = [sys.executable, "-m", "workbench.report", str(NB_DIR / "00_quickstart.ipynb"), "--out", str(tmp / "reports"),
           "-p", "trainers", "[sync]", "-p", "nproc", "1", "-p", "max_steps", "12", "-p", "eval_every", "6",
           "-p", "output_root", str(tmp / "exp"), "-p", "target_accuracy", "0.5"]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    nbs = list((tmp / "reports").glob("*/*_00_quickstart.ipynb"))
    htmls = list((tmp / "reports").glob("*/*_00_quickstart.html"))
    assert len(nbs) == 1 and len(htmls) == 1
    return {"dir": tmp, "nb": nbformat.read(str(nbs[0]), as_version=4), "html": htmls[0]}


@pytest.mark.slow
def test_injected_parameters_take_effect(quickstart_report):
    run_dirs = list((quickstart_report["dir"] / "exp" / "runs").glob("*/*"))
    assert len(run_dirs) == 1  # trainers=[sync]: one run, not one per registered trainer
    cfg = OmegaConf.load(run_dirs[0] / "config.yaml")
    assert cfg.cluster.nproc == 1 and cfg.trainer.max_steps == 12 and cfg.trainer.eval_every == 6
    assert cfg.trainer.name == "sync"
    cells = _code_cells(quickstart_report["nb"])
    assert "NBVAL_CHECK_OUTPUT" in cells[-1].source and not any(o.output_type == "error" for c in cells for o in c.outputs)


@pytest.mark.slow
def test_live_progress_is_a_widget_that_reaches_the_end(quickstart_report):
    nb = quickstart_report["nb"]
    views = [o for c in _code_cells(nb) for o in c.outputs
             if "application/vnd.jupyter.widget-view+json" in o.get("data", {})]
    assert any(o["data"]["text/plain"].startswith("sync small_cnn/digits x1") for o in views)
    state = nb.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    bars = [m["state"] for m in state.values() if m["model_name"] == "FloatProgressModel"]
    assert any(b["max"] == 12 and b["value"] == 12 for b in bars), bars


def _figure_calls(html: str):
    return re.findall(r'Plotly\.newPlot\(\s*"([^"]+)",\s*(\[.*?\]),\s*\{', html, flags=re.S)


@pytest.mark.slow
def test_report_html_holds_every_figure_with_data(quickstart_report):
    from bs4 import BeautifulSoup
    html = quickstart_report["html"].read_text()
    soup = BeautifulSoup(html, "html.parser")
    divs = [d["id"] for d in soup.select("div.plotly-graph-div")]
    calls = dict(_figure_calls(html))
    assert len(divs) == 5 and set(divs) == set(calls)
    for div in divs:
        traces = json.loads(calls[div])
        assert traces and any(len(t.get("x", [])) or len(t.get("y", [])) for t in traces), div
    # plotly.js itself is inline (the report opens offline), not fetched
    assert any("plotly.js" in (s.string or "")[:2000] and len(s.string or "") > 1_000_000 for s in soup.find_all("script"))
    assert not [s["src"] for s in soup.find_all("script", src=True) if "plotly" in s["src"]]
    index = (quickstart_report["dir"] / "reports" / "index.html").read_text()
    assert quickstart_report["html"].name in index


from workbench.report import chromium as _chromium  # noqa: E402


@pytest.mark.slow
@pytest.mark.browser
def test_report_renders_in_headless_chromium(quickstart_report, tmp_path):
    """Every figure div gets plotly's SVG with drawn traces once the page's scripts have run."""
    from bs4 import BeautifulSoup
    r = subprocess.run([_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=20000",
                        f"--user-data-dir={tmp_path}", "--dump-dom", quickstart_report["html"].as_uri()],
                       capture_output=True, text=True, timeout=180)
    soup = BeautifulSoup(r.stdout, "html.parser")
    divs = soup.select("div.plotly-graph-div")
    assert len(divs) == 5, r.stderr[-2000:]
    for d in divs:
        assert d.select("svg.main-svg"), f"figure {d.get('id')} did not render"
        assert d.select("g.trace, path.point, g.point"), f"figure {d.get('id')} has an empty plot area"


@pytest.mark.slow
def test_notebook_70_renders_the_committed_accuracy_tables(tmp_path):
    """The accuracy campaigns' tables kept in git (experiments/accuracy-runs/<t>.json) render in notebook
    70 without a run directory: each table with its claim and verdict, and its figure."""
    kept = sorted(p.stem for p in (ROOT / "experiments" / "accuracy-runs").glob("*.json"))
    assert "e" in kept, kept
    cmd = [sys.executable, "-m", "workbench.report", str(NB_DIR / "70_accuracy_at_scale.ipynb"), "--out", str(tmp_path),
           "-p", "tiny", "False", "-p", "runs_glob", "experiments/accuracy-runs/*.json", "-p", "only", ",".join(kept)]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    nb = nbformat.read(str(next(tmp_path.glob("*/*_70_accuracy_at_scale.ipynb"))), as_version=4)
    text = "".join(o.get("text", "") + str(o.get("data", {}).get("text/markdown", "")) for c in _code_cells(nb) for o in c.outputs)
    for t in kept:
        assert f"### ({t})" in text and "Claim:" in text
    assert "uncompressed sync" in text  # table (e)'s rows
