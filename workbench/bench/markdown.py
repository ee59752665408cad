"""Where a suite's ``--write`` puts its results: the full section in a result file, a headline in
BENCHMARKS.md.

A section (its title names it, e.g. ``overhead: small_cnn/digits x4``) goes, whole, into the result
file ``experiments/results/<suite>_<host>_<date>.md`` (one per suite, host and UTC date; a rerun the
same day replaces its section there, another day starts a new file), and its headline (the command,
the first table, a link to the result file) replaces the section of the same title in BENCHMARKS.md.
Every section says where and when it was measured (machine, load average before and after, date), so
a reader can tell a quiet machine's figures from a busy one's."""
from __future__ import annotations

import os
import platform
import re
from datetime import datetime, timezone
from pathlib import Path

from workbench.bench import STARTED


def _cpu_model() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine() -> str:
    """One line: CPU, cores, memory, GPU, torch, the load average (1 min) when the suite started and
    now, and the date."""
    import torch
    try:
        mem = f", {os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GiB"
    except (ValueError, OSError, AttributeError):
        mem = ""
    dev = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    now = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    began = datetime.fromtimestamp(STARTED[0], timezone.utc)
    return (f"{_cpu_model()}, {os.cpu_count()} cores{mem}, {dev}, torch {torch.__version__}; "
            f"load average {STARTED[1][0]:.1f} before, {now:.1f} after; {began:%Y-%m-%d %H:%M} UTC")


# A title's first word -> the suite that writes it (titles are the suites' own; see their ``write`` calls).
_SUITE_OF = {"overhead": "overhead", "network": "calibrate", "staleness": "staleness", "bytes": "bytes",
             "stanza": "stanza", "compression": "compression", "bandwidth": "bandwidth", "planner": "planner",
             "simulator": "sim", "crossover": "crossover", "ranks": "pinning"}
HEADLINE_ROWS = 6  # a headline's table is cut to this many rows; the result file has them all


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def suite_of(title: str) -> str:
    """The suite a section's title belongs to: ``overhead: small_cnn/digits x4`` -> ``overhead``."""
    first = _slug(title).split("-")[0]
    return _SUITE_OF.get(first, first or "bench")


def host_of(title: str) -> str:
    """The host a section was measured on: the suite's ``--host`` label where the title ends in
    ``on <host>``, else this machine (``$WORKBENCH_BENCH_HOST``, or its CPU model and cores, e.g.
    ``amd-epyc-2c``, plus its GPU where there is one)."""
    m = re.search(r",? on ([A-Za-z0-9][A-Za-z0-9_.-]*)$", title.strip())
    if m:
        return m.group(1)
    if os.environ.get("WORKBENCH_BENCH_HOST"):
        return _slug(os.environ["WORKBENCH_BENCH_HOST"])
    cpu = re.sub(r"\((r|tm)\)|\bprocessor\b|\bcpu\b|@.*$", " ", _cpu_model().lower(), flags=re.I)
    label = "-".join(_slug(cpu).split("-")[:3]) + f"-{os.cpu_count()}c"
    try:
        import torch
        if torch.cuda.is_available():
            label += "-" + _slug(torch.cuda.get_device_name(0)).split("-")[-1]
    except ImportError:
        pass
    return label


def result_path(root: Path, title: str, day: str | None = None) -> Path:
    """``<root>/experiments/results/<suite>_<host>_<date>.md`` for a section of this title."""
    day = day or datetime.now(timezone.utc).strftime("%Y-%m-%d")
    return Path(root) / "experiments" / "results" / f"{suite_of(title)}_{host_of(title)}_{day}.md"


def _summary(paras: list, after: int, limit: int = 300) -> str:
    """The first sentences (at most ``limit`` characters) of the first note after paragraph ``after``:
    a paragraph that is neither a table, a table's caption, nor the report's path."""
    for k in range(after + 1, len(paras)):
        p = paras[k]
        if p.startswith(("|", "Report:", "Command:")) or (k + 1 < len(paras) and paras[k + 1].startswith("|")):
            continue
        out = ""
        for sentence in re.split(r"(?<=[.!?])\s+(?=[A-Z*])", " ".join(p.split())):
            if len(out) + len(sentence) > limit:
                break
            out = f"{out} {sentence}".strip()
        return out
    return ""


def headline(body: str, rows: int = HEADLINE_ROWS) -> tuple:
    """A section's headline: ``(command, table)``: its ``Command:`` paragraph, and its first table with
    the paragraph before it (the caption) and the first sentences of its notes, the table cut to
    ``rows`` rows (the caption says so)."""
    paras = [p.strip() for p in re.split(r"\n\s*\n", body.strip()) if p.strip()]
    command = paras[0] if paras and paras[0].startswith("Command:") else ""
    for i, p in enumerate(paras):
        if p.startswith("|"):
            caption = paras[i - 1] if i > 0 and paras[i - 1] != command and not paras[i - 1].startswith("|") else ""
            lines = p.splitlines()
            if len(lines) > rows + 2:
                caption = (caption + " " if caption else "") + f"(The first {rows} of {len(lines) - 2} rows.)"
                lines = lines[:rows + 2]
            caption = " ".join(x for x in (caption, _summary(paras, i)) if x)
            return command, "\n\n".join(x for x in (caption, "\n".join(lines)) if x)
    return command, ""


def _replace(text: str, title: str, block: str, beside_suite: bool = False) -> str:
    """``text`` with the section ``title`` replaced by ``block``; a new one goes after the last section
    of the same suite where ``beside_suite`` (BENCHMARKS.md's chapters), else at the end."""
    pat = re.compile(rf"<!-- bench:{re.escape(title)} -->.*?<!-- /bench:{re.escape(title)} -->", re.S)
    if pat.search(text):
        return pat.sub(lambda _: block, text)
    ends = [m.end() for m in re.finditer(r"<!-- /bench:(.*?) -->", text)
            if beside_suite and suite_of(m.group(1)) == suite_of(title)]
    if ends:
        return text[:ends[-1]] + "\n\n" + block + text[ends[-1]:]
    return text.rstrip() + "\n\n" + block + "\n"


def update_section(path: Path, title: str, body: str) -> Path:
    """Write the section ``title`` (``body``: its command, tables and notes) whole into its result file
    beside ``path`` (``experiments/results/<suite>_<host>_<today>.md``, replaced there if this title is
    already in it) and its headline, linking that file, into ``path`` (BENCHMARKS.md) between
    ``<!-- bench:title -->`` and ``<!-- /bench:title -->``, replacing the previous headline; a new
    title's headline goes after the suite's last one (its chapter), or at the end. Returns the result
    file."""
    path = Path(path)
    where = machine()
    result = result_path(path.parent, title)
    result.parent.mkdir(parents=True, exist_ok=True)
    old = result.read_text() if result.exists() else (f"# {suite_of(title)} on {host_of(title)}, "
                                                      f"{result.stem.rsplit('_', 1)[1]}\n")
    full = f"<!-- bench:{title} -->\n## {title}\n\n_Machine: {where}._\n\n{body.strip()}\n<!-- /bench:{title} -->"
    result.write_text(_replace(old, title, full))
    link = result.relative_to(path.parent).as_posix()
    command, table = headline(body)
    stamp = " · ".join(x for x in (command, f"Machine: {where}", f"Full section: [{link}]({link})") if x)
    block = "\n\n".join(x for x in (stamp, table) if x)
    block = f"<!-- bench:{title} -->\n### {title}\n{block}\n<!-- /bench:{title} -->"
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    path.write_text(_replace(text, title, block, beside_suite=True))
    return result
