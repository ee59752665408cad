"""JupyterLab itself, driven by a real browser: what a researcher sees, not what the kernel computed.

Starts a real JupyterLab server (free localhost port, temporary token, throw-away copies of the
notebooks in a temporary directory, the kernel importing this checkout's ``workbench``), drives the
system Chromium through Playwright (the pip package only; no browser is downloaded) and, for
``00_quickstart`` and ``50_tradeoff_dashboard`` at small parameters: opens the notebook, runs all
cells from the Run menu, waits for the kernel, and checks from the DOM that

- the live progress widget appeared and advanced while the run trained (00: it is the notebook that
  launches runs; 50 reads the runs 00 made instead of launching its seed set),
- every plotly figure has drawn traces,
- dragging a what-if slider redraws the figure (50),
- no cell shows an error and the browser console logged no widget error.

Run it alone: ``make lab-check`` (or ``pytest -m browser``). Screenshots go to the test's temporary
directory; with ``WORKBENCH_LAB_SCREENSHOTS=docs/img`` they are written there too: the README's and
docs/notebooks.md's pictures of JupyterLab are made by this test (``make lab-screenshots``).

Without /usr/bin/chromium (``make system-deps``) or the playwright package (dev extras) it skips,
saying which. The server is stopped and its port freed whatever happens (fixture, process group).
"""
from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest

from conftest import ROOT

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(1800)]

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
WAIT_S = 900  # a run of every cell on a loaded 2-core CI machine; the check never depends on speed
# Steps per quickstart run: enough that a run lasts several of the test's half-second looks (a rank forked
# from the forkserver trains 240 steps in about 2 s here, and the bar went from 0 to the end unseen).
STEPS = 1500
# Lab settings of the throw-away profile: every cell in the DOM (no windowing: off-screen outputs
# would not be rendered), and no news / update check (the machine may have no network).
LAB_SETTINGS = {
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false", "checkForUpdates": False},
}


def _chromium() -> str | None:
    from workbench.report import chromium
    return chromium()


def _screenshot_dirs(tmp: Path) -> list[Path]:
    extra = os.environ.get("WORKBENCH_LAB_SCREENSHOTS")
    return [tmp] + ([Path(extra) if Path(extra).is_absolute() else ROOT / extra] if extra else [])


# -- the server -----------------------------------------------------------------------------------

def _free_port() -> int:
    from workbench.launcher import free_port
    return free_port()


def _set_parameters(src: Path, dst: Path, **params) -> None:
    """The copy's ``parameters`` cell with ``params`` replaced (each stays a `name = literal` line)."""
    nb = nbformat.read(str(src), as_version=4)
    cell = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
    lines = cell.source.splitlines()
    for name, value in params.items():
        i = next(i for i, l in enumerate(lines) if re.match(rf"{name}\s*=", l))
        lines[i] = f"{name} = {value!r}"
    cell.source = "\n".join(lines)
    # nbstripout leaves no kernelspec: Lab would ask which kernel (the test also answers that dialog)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    # which workbench the kernel imported: the test checks it is this checkout's
    nb.cells.append(nbformat.v4.new_code_cell('import workbench; print("WORKBENCH_FROM", workbench.__file__)'))
    nbformat.write(nb, str(dst))


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A JupyterLab server on throw-away copies of 00 and 50: yields (url_base, token, workdir)."""
    if _chromium() is None:
        pytest.skip("no Chromium on this machine (make system-deps: apt-get install chromium)")
    pytest.importorskip("playwright.sync_api", reason="playwright not installed (pip install -e '.[dev]')")
    work = tmp_path_factory.mktemp("lab")
    nbs, runs = work / "notebooks", work / "experiments"
    nbs.mkdir()
    _set_parameters(ROOT / "notebooks" / "00_quickstart.ipynb", nbs / "00_quickstart.ipynb",
                    trainers=["sync", "local_sgd"], max_steps=STEPS, eval_every=STEPS // 3, output_root=str(runs))
    _set_parameters(ROOT / "notebooks" / "50_tradeoff_dashboard.ipynb", nbs / "50_tradeoff_dashboard.ipynb",
                    runs_glob=str(runs / "runs" / "**"), min_runs=2, max_steps=20, output_root=str(runs),
                    whatif_compressors=["powersgd"])
    settings = work / "settings"
    for rel, value in LAB_SETTINGS.items():
        (settings / rel).parent.mkdir(parents=True, exist_ok=True)
        (settings / rel).write_text(json.dumps(value))
    port, token = _free_port(), secrets.token_hex(16)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
           "JUPYTER_CONFIG_DIR": str(work / "jupyter-config"), "JUPYTER_RUNTIME_DIR": str(work / "jupyter-runtime"),
           "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
           "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={work}",
           f"--LabApp.user_settings_dir={settings}", f"--LabApp.workspaces_dir={work / 'workspaces'}"]
    if os.geteuid() == 0:  # CI containers
        cmd.append("--allow-root")
    log = open(work / "server.log", "w")
    proc = subprocess.Popen(cmd, cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"JupyterLab did not start: {(work / 'server.log').read_text()[-3000:]}")
            time.sleep(0.5)
        yield base, token, work
    finally:
        _stop(proc, base, token)
        log.close()
        import socket
        with socket.socket() as s:  # nothing listens any more (a bind test would trip on TIME_WAIT)
            assert s.connect_ex(("127.0.0.1", port)) != 0, f"port {port} still served after the server stopped"


def _stop(proc: subprocess.Popen, base: str, token: str) -> None:
    # Kernels run in sessions of their own: shut them down through the server first (that also ends
    # a run they started), then the server's whole process group.
    try:
        req = urllib.request.Request(f"{base}/api/kernels?token={token}")
        with urllib.request.urlopen(req, timeout=5) as r:
            for k in json.load(r):
                urllib.request.urlopen(urllib.request.Request(f"{base}/api/kernels/{k['id']}?token={token}",
                                                              method="DELETE"), timeout=30).close()
    except OSError:
        pass
    for sig, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(wait)
            break
        except subprocess.TimeoutExpired:
            continue


@pytest.fixture(scope="module")
def browser(lab):
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=_chromium(), args=CHROMIUM_ARGS, headless=True)
        try:
            yield b
        finally:
            b.close()


# -- driving JupyterLab ---------------------------------------------------------------------------

PANEL = ".jp-NotebookPanel:not(.lm-mod-hidden)"  # the notebook in front


class Notebook:
    """One notebook open in a fresh page; collects the console's errors."""

    def __init__(self, browser, lab, name: str) -> None:
        base, token, self.work = lab
        self.page = browser.new_page(viewport={"width": 1400, "height": 1000})
        self.page.set_default_timeout(120_000)
        self.console: list[str] = []
        self.page.on("console", lambda m: self.console.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.console.append(f"pageerror: {e}"))
        # a workspace of its own, reset: Lab would otherwise reopen the previous test's notebook beside it
        self.page.goto(f"{base}/lab/workspaces/{name}/tree/notebooks/{name}.ipynb?reset&token={token}")
        self.page.wait_for_selector(".jp-NotebookPanel .jp-Notebook .jp-CodeCell", timeout=180_000)
        self.api, self.name = (base, token), name
        self.wait_kernel()

    def wait_kernel(self, timeout_s: float = 180) -> None:
        """Until the server says this notebook's kernel is idle (the page's indicator also reads
        "idle" before any kernel exists)."""
        base, token = self.api
        deadline = time.monotonic() + timeout_s
        while True:
            dialog = self.page.locator(".jp-Dialog", has_text="Select Kernel")
            if dialog.count():
                dialog.locator("button.jp-mod-accept").click()
            with urllib.request.urlopen(f"{base}/api/sessions?token={token}", timeout=10) as r:
                ks = [s["kernel"] for s in json.load(r) if s.get("path", "").endswith(f"{self.name}.ipynb") and s.get("kernel")]
            if ks and ks[0].get("execution_state") == "idle" and self.kernel_status() == "idle":
                return
            assert time.monotonic() < deadline, f"no idle kernel after {timeout_s} s: {ks}"
            time.sleep(0.5)

    def kernel_status(self) -> str:
        return self.page.evaluate("""() => {
            const el = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook-ExecutionIndicator');
            return el ? (el.getAttribute('data-status') || '') : '';
        }""")

    def prompts(self) -> list[str]:
        return self.page.eval_on_selector_all(f"{PANEL} .jp-CodeCell .jp-InputArea-prompt", "els => els.map(e => e.textContent.trim())")

    def run_all(self) -> None:
        """Run ▸ Run All Cells, from the menu bar, as a person would."""
        self.page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).click()
        self.page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^Run All Cells$")).click()

    def running(self) -> bool:
        return self.kernel_status() != "idle" or any("*" in p for p in self.prompts())

    def done(self) -> bool:
        ps = self.prompts()
        return bool(ps) and all(re.fullmatch(r"\[\d+\]:", p) for p in ps) and self.kernel_status() == "idle"

    def progress_bars(self) -> list[tuple[int, int]]:
        """(n, total) of every tqdm widget on the page, read from its text ("37/240 [00:03<...")."""
        texts = self.page.eval_on_selector_all(f"{PANEL} .jp-OutputArea-output .widget-hbox", "els => els.map(e => e.innerText)")
        out = []
        for t in texts:
            m = re.search(r"(\d+)/(\d+)\s*\[", t)
            if m:
                out.append((int(m.group(1)), int(m.group(2))))
        return out

    def screenshot(self, name: str, locator=None) -> None:
        for d in _screenshot_dirs(self.work):
            d.mkdir(parents=True, exist_ok=True)
            (locator or self.page).screenshot(path=str(d / name))

    def check_no_errors(self) -> None:
        errors = self.page.eval_on_selector_all(
            f"{PANEL} .jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr'], "
            f"{PANEL} .jp-RenderedText[data-mime-type='application/vnd.jupyter.error']",
            "els => els.map(e => e.innerText)")
        tracebacks = [e for e in errors if "Traceback" in e or re.search(r"^\w+(Error|Exception)\b", e, re.M)]
        assert not tracebacks, "a cell shows an error:\n" + "\n---\n".join(t[-1500:] for t in tracebacks)
        body = self.page.inner_text(f"{PANEL} .jp-Notebook")
        for bad in ("Error displaying widget", "Error rendering output item", "Loading widget..."):
            assert bad not in body, f"{bad!r} on the page"
        widget_errors = [m for m in self.console if re.search(r"widget|plotly|model not found|comm", m, re.I)]
        assert not widget_errors, f"widget errors in the browser console: {widget_errors}"

    def check_kernel_package(self) -> None:
        m = re.search(r"WORKBENCH_FROM (\S+)", self.page.inner_text(f"{PANEL} .jp-Notebook"))
        assert m and Path(m.group(1)).resolve().is_relative_to(ROOT.resolve()), \
            f"the kernel imported another workbench: {m and m.group(1)}"

    def figures(self) -> list[dict]:
        """Every plotly figure on the page: drawn traces (SVG) and the traces plotly holds."""
        return self.page.eval_on_selector_all(f"{PANEL} .js-plotly-plot", """els => els.map(e => ({
            drawn: e.querySelectorAll('g.trace, path.point, g.point').length,
            traces: (e.data || []).length,
            data: JSON.stringify((e.data || []).map(t => [t.x, t.y])),
        }))""")


def _run_and_watch(nb: Notebook, shot_at=None) -> list[tuple[int, int]]:
    """Run all; sample the progress widgets every half second until every cell has run."""
    nb.run_all()
    seen, shot = [], False
    deadline = time.monotonic() + WAIT_S
    time.sleep(2)
    quiet = 0
    while quiet < 4:  # a cell that raises stops Run All: idle with cells left unrun is also the end
        assert time.monotonic() < deadline, f"not done after {WAIT_S} s; prompts {nb.prompts()}"
        quiet = quiet + 1 if not nb.running() else 0
        bars = nb.progress_bars()
        seen.extend(b for b in bars if b not in seen)
        if shot_at and not shot and any(0 < n < t for n, t in bars):
            nb.page.locator(f"{PANEL} .widget-hprogress, {PANEL} .widget-progress").last.scroll_into_view_if_needed()
            time.sleep(0.5)
            nb.screenshot(shot_at)
            shot = True
        time.sleep(0.5)
    if not nb.done():
        nb.check_no_errors()  # the error, if a cell shows one
        pytest.fail(f"Run All stopped before the end; prompts {nb.prompts()}")
    return seen


# -- the checks -----------------------------------------------------------------------------------

def test_quickstart_in_jupyterlab(browser, lab):
    nb = Notebook(browser, lab, "00_quickstart")
    t0 = time.monotonic()
    seen = _run_and_watch(nb, shot_at="lab_progress.png")
    nb.check_no_errors()
    nb.check_kernel_package()
    # (a) a bar per run, seen part-way (it advanced while the ranks trained), and at the end full
    totals = {t for _, t in seen}
    assert totals == {STEPS}, f"progress widgets seen: {seen}"
    assert any(0 < n < STEPS for n, _ in seen), f"never saw a progress bar part-way: {seen}"
    final = nb.progress_bars()
    assert len(final) == 2 and all(n == t for n, t in final), f"bars at the end: {final}"
    # (b) every figure drew its traces
    figs = nb.figures()
    assert len(figs) == 5 and all(f["drawn"] > 0 and f["traces"] > 0 for f in figs), figs
    nb.page.locator(f"{PANEL} .js-plotly-plot").first.scroll_into_view_if_needed()
    nb.screenshot("lab_quickstart_figures.png")
    print(f"00_quickstart in JupyterLab: {time.monotonic() - t0:.0f} s")
    nb.page.close()


def test_dashboard_in_jupyterlab(browser, lab):
    if not list((lab[2] / "experiments" / "runs").rglob("summary.json")):
        pytest.skip("needs the runs 00_quickstart made (run the whole module)")
    nb = Notebook(browser, lab, "50_tradeoff_dashboard")
    t0 = time.monotonic()
    _run_and_watch(nb)
    nb.check_no_errors()
    nb.check_kernel_package()
    figs = nb.figures()
    # 6 dashboard panels + the run explorer's panel + the what-if explorer's figure; where a sync run
    # reached the target, the time-to-target what-if and a run beside its predicted accuracy curve
    from workbench import analysis as an
    runs, _ = an.select(*an.load(str(lab[2] / "experiments" / "runs" / "**")), "")
    expected = 8 + 2 * (an.reference_run(runs, 0.85) is not None and len(runs) > 1)
    assert len(figs) == expected and all(f["drawn"] > 0 and f["traces"] > 0 for f in figs), figs
    nb.page.locator(f"{PANEL} .js-plotly-plot").first.scroll_into_view_if_needed()
    nb.screenshot("lab_dashboard.png")

    # (c) drag the what-if explorer's "ranks" slider: the kernel redraws the figure
    cell = nb.page.locator(f"{PANEL} .jp-CodeCell", has_text="wb.WhatIfExplorer(")
    slider = cell.locator(".widget-slider", has=nb.page.locator(".widget-label", has_text=re.compile(r"^ranks$")))
    readout = slider.locator(".widget-readout")
    before_value = readout.inner_text()
    before = cell.locator(".js-plotly-plot").evaluate("e => JSON.stringify(e.data.map(t => [t.x, t.y]))")
    note_before = cell.locator(".widget-html-content").first.inner_text()
    handle = slider.locator(".noUi-handle")
    handle.scroll_into_view_if_needed()
    box = handle.bounding_box()
    x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
    nb.page.mouse.move(x, y)
    nb.page.mouse.down()
    nb.page.mouse.move(x + 60, y, steps=10)
    nb.page.mouse.up()
    deadline = time.monotonic() + 120
    while True:
        after = cell.locator(".js-plotly-plot").evaluate("e => JSON.stringify(e.data.map(t => [t.x, t.y]))")
        if after != before and cell.locator(".js-plotly-plot g.trace").count():
            break
        assert time.monotonic() < deadline, f"the what-if figure did not change (ranks {before_value} -> {readout.inner_text()})"
        time.sleep(0.5)
    assert readout.inner_text() != before_value
    assert cell.locator(".widget-html-content").first.inner_text() != note_before
    cell.scroll_into_view_if_needed()
    nb.screenshot("lab_whatif.png", cell)
    nb.check_no_errors()
    print(f"50_tradeoff_dashboard in JupyterLab: {time.monotonic() - t0:.0f} s")
    nb.page.close()
