"""Keep BENCHMARKS.md up to date: each benchmark owns one section, replaced in place."""
from __future__ import annotations

import re
from datetime import date
from pathlib import Path


def update_section(path: Path, title: str, body: str) -> None:
    """Replace (or append) the section ``<!-- bench:title -->`` … ``<!-- /bench:title -->``."""
    path = Path(path)
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    block = (f"<!-- bench:{title} -->\n### {title}\n\n_Measured {date.today().isoformat()} by the command "
             f"below; regenerate it the same way._\n\n{body.strip()}\n<!-- /bench:{title} -->")
    pat = re.compile(rf"<!-- bench:{re.escape(title)} -->.*?<!-- /bench:{re.escape(title)} -->", re.S)
    text = pat.sub(lambda _: block, text) if pat.search(text) else text.rstrip() + "\n\n" + block + "\n"
    path.write_text(text)
