"""Run notebooks unattended with papermill and save, for each, the executed notebook and a
standalone HTML report (plotly.js inlined: it opens offline) under ``experiments/reports/``.

    python -m workbench.report notebooks/00_quickstart.ipynb -p nproc 2
    python -m workbench.report notebooks/30_stanza.ipynb -p model vgg16 -p nproc 6 -p data synthetic
    python -m workbench.report --all                       # every notebooks/*.ipynb, default parameters
    python -m workbench.report --all -p max_steps 30 --out /tmp/reports --no-input
    python -m workbench.report notebooks/50_tradeoff_dashboard.ipynb --no-input \
        -p runs_glob 'experiments/bench/staleness-4w/runs/**' --screenshot docs/img/dashboard.png

Parameter values are read as YAML (``-p nproc 4`` is an int, ``-p trainers '[sync, ps]'`` a list,
``-p model vgg16`` a string), as papermill's own ``-p`` does. A notebook runs with its own folder as
working directory, as in JupyterLab (its ``output_root``/``runs_glob`` parameters are relative to the
project root wherever it runs). Output: ``<out>/<date>/<time>_<notebook>.ipynb`` and ``.html`` plus ``<out>/index.html``
linking every report written there. ``--screenshot PNG`` also renders the (last) report in headless
Chromium and saves a PNG of it (the README's dashboard picture is made this way). Exit status: 0 if every notebook ran, 1 if any cell failed (its
partial notebook and HTML are still written, with the error). The kernel is driven by
:mod:`workbench.notebook_client`, whose waits for a message are bounded polls.
"""
from __future__ import annotations

import argparse
import html
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import yaml

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
REPORTS = ROOT / "experiments" / "reports"


def to_html(notebook: Path, html_path: Path, no_input: bool = False) -> Path:
    """The executed notebook as one HTML file (nbconvert's lab template; figures' plotly.js is in
    the notebook's own outputs, so nothing is fetched to draw them)."""
    import nbformat
    from nbconvert import HTMLExporter
    nb = nbformat.read(str(notebook), as_version=4)
    exporter = HTMLExporter(template_name="lab", exclude_input=no_input, exclude_input_prompt=no_input,
                            exclude_output_prompt=no_input)
    body, _ = exporter.from_notebook_node(nb)
    html_path.write_text(body, encoding="utf-8")
    return html_path


def run_notebook(notebook: Path, parameters: Optional[Dict] = None, out_dir: Path = REPORTS,
                 no_input: bool = False, timeout_s: Optional[int] = None, stamp: Optional[datetime] = None) -> Dict:
    """Execute ``notebook`` with ``parameters`` injected after its ``parameters`` cell; write the
    executed ``.ipynb`` and the ``.html``. Returns a row: notebook, status, error, seconds, paths."""
    import papermill as pm
    from workbench.notebook_client import KernelManager
    notebook = Path(notebook).resolve()
    stamp = stamp or datetime.now()
    day = Path(out_dir) / stamp.strftime("%Y-%m-%d")
    day.mkdir(parents=True, exist_ok=True)
    stem = f"{stamp.strftime('%H-%M-%S')}_{notebook.stem}"
    out_nb, out_html = day / f"{stem}.ipynb", day / f"{stem}.html"
    t0 = time.time()
    status, error = "completed", ""
    try:
        pm.execute_notebook(str(notebook), str(out_nb), parameters=parameters or {}, cwd=str(notebook.parent),
                            execution_timeout=timeout_s, progress_bar=False, report_mode=False,
                            kernel_manager_class=KernelManager)
    except pm.PapermillExecutionError as e:
        status, error = "failed", f"cell {e.exec_count}: {e.ename}: {e.evalue}"
    if out_nb.exists():
        to_html(out_nb, out_html, no_input)
    return {"notebook": notebook.name, "status": status, "error": error, "seconds": round(time.time() - t0, 1),
            "ipynb": str(out_nb), "html": str(out_html) if out_html.exists() else None}


def write_index(out_dir: Path) -> Path:
    """``<out>/index.html``: a link to every HTML report under ``out_dir``, newest first."""
    out_dir = Path(out_dir)
    pages = sorted((p for p in out_dir.glob("*/*.html")), reverse=True)
    items = "\n".join(f'<li><a href="{html.escape(str(p.relative_to(out_dir)))}">{html.escape(str(p.relative_to(out_dir)))}</a></li>'
                      for p in pages)
    index = out_dir / "index.html"
    index.write_text(f"<!doctype html><html><head><meta charset='utf-8'><title>workbench reports</title></head>"
                     f"<body><h1>workbench reports</h1><ul>\n{items}\n</ul></body></html>\n", encoding="utf-8")
    return index


def chromium() -> Optional[str]:
    """The system's Chromium (or Chrome) executable, if any (``make system-deps`` installs one)."""
    import shutil
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome", "chromium-headless-shell"):
        if shutil.which(name):
            return shutil.which(name)
    return None


def screenshot(html_path: Path, png: Path, width: int = 1280, height: int = 2600) -> Path:
    """Render ``html_path`` in headless Chromium (scripts run, so plotly draws) and save a PNG."""
    import subprocess
    import tempfile
    exe = chromium()
    if exe is None:
        raise RuntimeError("--screenshot needs Chromium: sudo make system-deps (or apt-get install chromium)")
    png = Path(png).resolve()
    png.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run([exe, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                        f"--user-data-dir={profile}", f"--window-size={width},{height}", "--virtual-time-budget=20000",
                        f"--screenshot={png}", Path(html_path).resolve().as_uri()],
                       check=True, capture_output=True, timeout=300)
    return png


def parse_parameters(pairs: Sequence[Sequence[str]]) -> Dict:
    return {name: yaml.safe_load(value) for name, value in pairs or []}


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m workbench.report", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("notebooks", nargs="*", type=Path, help="notebooks to run")
    ap.add_argument("--all", action="store_true", help=f"run every notebook in {NOTEBOOKS}")
    ap.add_argument("-p", "--parameter", nargs=2, action="append", metavar=("NAME", "VALUE"), default=[],
                    help="a parameter (YAML value) injected into every notebook")
    ap.add_argument("--out", type=Path, default=REPORTS, help="report directory (default: experiments/reports)")
    ap.add_argument("--no-input", action="store_true", help="HTML without the code cells")
    ap.add_argument("--timeout", type=int, default=None, help="seconds per cell (default: none)")
    ap.add_argument("--screenshot", type=Path, metavar="PNG", help="save a headless-Chromium PNG of the last report")
    args = ap.parse_args(argv)
    if args.screenshot and chromium() is None:
        ap.error("--screenshot needs Chromium: sudo make system-deps (or apt-get install chromium)")
    books = list(args.notebooks) + (sorted(NOTEBOOKS.glob("*.ipynb")) if args.all else [])
    if not books:
        ap.error("give notebooks or --all")
    for b in books:
        if not b.is_file():
            ap.error(f"no such notebook: {b}")
    params = parse_parameters(args.parameter)
    stamp = datetime.now()
    rows = []
    for b in books:
        print(f"running {b} {params or ''}", flush=True)
        row = run_notebook(b, params, args.out, args.no_input, args.timeout, stamp)
        rows.append(row)
        print(f"  {row['status']} in {row['seconds']} s -> {row['html']}" + (f"\n  {row['error']}" if row["error"] else ""),
              flush=True)
    index = write_index(args.out)
    print(f"index: {index}")
    if args.screenshot and rows[-1]["html"]:
        print(f"screenshot: {screenshot(Path(rows[-1]['html']), args.screenshot)}")
    return 0 if all(r["status"] == "completed" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
