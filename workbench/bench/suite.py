"""What every benchmark suite leaves behind: CSV tables, a Markdown report, a standalone plotly HTML
report under ``experiments/bench/<suite>/``, and (with ``--write``) its section of BENCHMARKS.md.

A suite hands over ``Table`` objects (rows of plain dicts) and plotly figures; the formatting lives
here once so that every suite's report reads the same.
"""
from __future__ import annotations

import csv
import html
from dataclasses import dataclass, field
from pathlib import Path

from workbench.bench.markdown import machine, update_section

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Table:
    name: str                      # file stem of its CSV
    caption: str
    rows: list
    cols: list = field(default_factory=list)   # default: the keys of the first row

    def columns(self) -> list:
        return self.cols or (list(self.rows[0]) if self.rows else [])

    def markdown(self) -> str:
        cols = self.columns()
        lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
        lines += ["| " + " | ".join(_fmt(r.get(c)) for c in cols) + " |" for r in self.rows]
        return "\n".join(lines)


def within(rows: list, col: str, limit_pct: float = 20.0, skip=lambda r: False) -> str:
    """'k of n rows within ±limit %' from a column of '+x %' strings: counts in prose come from the
    table they describe, never typed by hand."""
    vals = [r.get(col) for r in rows if not skip(r) and isinstance(r.get(col), str) and r.get(col).endswith("%")]
    ok = [v for v in vals if abs(float(v.rstrip(" %"))) <= limit_pct]
    return f"{len(ok)} of {len(vals)} rows within ±{limit_pct:g} % ({col})"


def merge_repeats(rounds: list, key, timed: list) -> list:
    """One row per ``key`` from interleaved rounds of the same runs: every number is the median over
    the rounds that have it, and each ``timed`` column gains ``<col> spread``, the rounds' min–max, so
    a table shows how far one run may move, and ``repeats`` says in how many rounds the first
    ``timed`` column has a value (e.g. reached the target). ``key``: a column name, or a function of
    a row. A single round is returned as it is (nothing to merge)."""
    import statistics
    if len(rounds) == 1:
        return list(rounds[0])
    keyf = key if callable(key) else (lambda r: r.get(key))
    groups: dict = {}
    for rows in rounds:
        for r in rows:
            groups.setdefault(keyf(r), []).append(r)
    out = []
    for rows in groups.values():
        merged = dict(rows[0])
        for col in dict.fromkeys(c for r in rows for c in r):
            vals = [r[col] for r in rows if isinstance(r.get(col), (int, float)) and not isinstance(r.get(col), bool)]
            if vals:
                med = statistics.median(vals)
                merged[col] = type(vals[0])(med) if isinstance(vals[0], int) and med == int(med) else round(med, 4)
            if col in timed:
                merged[f"{col} spread"] = f"{_fmt(float(min(vals)))}–{_fmt(float(max(vals)))}" if vals else None
            elif not vals and len({str(r.get(col)) for r in rows}) > 1:  # text that differs: say so
                merged[col] = " / ".join(dict.fromkeys(str(r.get(col)) for r in rows))
        merged = {k: v for c in merged if not c.endswith(" spread")
                  for k, v in ((c, merged[c]), (f"{c} spread", merged.get(f"{c} spread"))) if k in merged}
        got = [r for r in rows if isinstance(r.get(timed[0]), (int, float))] if timed else rows
        merged["repeats"] = f"{len(got)}/{len(rows)}"
        out.append(merged)
    return out


def data_overrides(model: str, batch: int, samples: int = 256) -> list:
    """The suites' data: the set the model declares (``bench_data`` of its registry entry: the digits
    for the models made for 8×8 inputs, CIFAR-size synthetic data, 3×32×32 and 10 classes, for the
    others); ``samples`` training samples where the set is synthetic."""
    from workbench.models import MODELS
    data = MODELS[model].bench_data
    return [f"data={data}", *([f"data.num_samples={samples}"] if data == "synthetic" else []), f"data.batch_size={batch}"]


def progress(row: dict) -> None:
    """Print one finished run's row as a Markdown table line, so that a long suite shows progress."""
    print(Table("progress", "", [row]).markdown().splitlines()[-1], flush=True)


def samples_per_s(run, skip: int = 2):
    """Global batch over the median step time after the first ``skip`` steps (warm-up, DDP's bucket
    rebuild, PowerSGD's start); ``None`` when the run has no such step."""
    times = sorted(r["step_time"] for r in run.records() if r.get("kind") == "train" and r["step"] > skip)
    return run.summary["global_batch"] / times[len(times) // 2] if times else None


def _fmt(v) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.3g}"
    return str(v)


def parser(suite: str, doc: str, tiny: str):
    """A suite's argument parser with the options every suite shares: ``--tiny`` (``tiny`` says what
    the smoke version runs), ``--out`` and ``--write``."""
    import argparse
    p = argparse.ArgumentParser(prog=f"python -m workbench.bench {suite}", description=doc,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tiny", action="store_true", help=f"{tiny}: the CI smoke version")
    p.add_argument("--out", default=str(ROOT / "experiments" / "bench"), help="reports go to <out>/<suite>/")
    p.add_argument("--write", action="store_true", help="update the suite's section of BENCHMARKS.md")
    return p


def check_host(label: str) -> None:
    """``--host``: a label for the machine a suite's rounds are taken on, which names a section of
    BENCHMARKS.md and a report directory; one ConfigError before anything runs where it cannot."""
    import re

    from workbench.core import ConfigError
    if label and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", label):
        raise ConfigError(f"invalid value {label!r} for --host: letters, digits, '.', '_' and '-' (e.g. xeon-spr)")


def check_pinned(machines: dict, pin: bool, path: Path, kind: str = "") -> None:
    """Stored measurements whose profile's ranks were pinned the other way (``machines``: each stored
    measurement's name -> its profile's ``machine``, whose ``pinned`` is absent where not; ``kind``
    what the names are, e.g. "rounds") are not resumed into: one ConfigError naming them, before
    anything runs."""
    from workbench.core import ConfigError
    other = [k for k, m in machines.items() if bool(m.get("pinned")) != pin]
    if other:
        raise ConfigError(f"invalid value {pin!r} for --pin: {path} holds {kind + ' ' if kind else ''}{', '.join(other)} taken "
                          f"{'unpinned' if pin else 'pinned'}; measure into another --rounds")


def write(suite: str, title: str, command: str, tables: list, figures: list = (), notes: str = "",
          out_root: Path | str = ROOT / "experiments" / "bench", benchmarks_md: Path | None = None) -> Path:
    """Write the suite's report; return its directory. ``benchmarks_md``: also replace the suite's
    section of that file (BENCHMARKS.md) with the tables, the notes and the command."""
    out = Path(out_root) / suite
    out.mkdir(parents=True, exist_ok=True)
    for t in tables:
        with open(out / f"{t.name}.csv", "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=t.columns(), extrasaction="ignore")
            w.writeheader()
            w.writerows(t.rows)
    body = f"Command: `{command}`\n\n"
    body += "\n\n".join(f"{t.caption}\n\n{t.markdown()}" for t in tables)
    if notes:
        body += "\n\n" + notes.strip()
    (out / "report.md").write_text(f"# {title}\n\nMachine: {machine()}.\n\n{body}\n")
    parts = [f"<h1>{html.escape(title)}</h1><p><code>{html.escape(command)}</code></p>"
             f"<p>{html.escape(machine())}</p>"]
    for i, fig in enumerate(figures):
        parts.append(fig.to_html(full_html=False, include_plotlyjs="inline" if i == 0 else False))
    for t in tables:
        parts.append(f"<h2>{html.escape(t.caption)}</h2>" + _html_table(t))
    if notes:
        parts.append(f"<pre>{html.escape(notes.strip())}</pre>")
    (out / "report.html").write_text("<!doctype html><html><head><meta charset='utf-8'>"
                                     f"<title>{html.escape(title)}</title></head><body>{''.join(parts)}</body></html>")
    if benchmarks_md is not None:
                update_section(benchmarks_md, title, body + f"\n\nReport: `{out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}/report.html`.\n")
    return out


def _html_table(t: Table) -> str:
    cols = t.columns()
    head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
    rows = "".join("<tr>" + "".join(f"<td>{html.escape(_fmt(r.get(c)))}</td>" for c in cols) + "</tr>" for r in t.rows)
    return f"<table border='1' cellspacing='0' cellpadding='3'><tr>{head}</tr>{rows}</table>"
