"""What the package cites is in the repository: every "docs/papers.md §N" a docstring, comment, config,
notebook or test names is a section of docs/papers.md, and nothing cites a specification file that is not
in the repository."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCES = [p for d in ("workbench", "tests", "conf", "docs", "notebooks") for p in (ROOT / d).rglob("*")
           if p.suffix in (".py", ".yaml", ".md", ".ipynb") and ".ipynb_checkpoints" not in p.parts] + [
    ROOT / "README.md", ROOT / "BENCHMARKS.md"]


def test_cited_paper_sections_exist():
    sections = set(re.findall(r"^## (\d+)\. ", (ROOT / "docs" / "papers.md").read_text(), re.M))
    assert sections == {"1", "2", "3", "4"}
    cited = {}
    for p in SOURCES:
        for n in re.findall(r"docs/papers\.md §(\d+)", p.read_text(errors="replace")):
            cited.setdefault(n, []).append(p.name)
    assert cited and set(cited) <= sections, cited


def test_no_citation_of_a_file_outside_the_repository():
    offenders = [p.relative_to(ROOT) for p in SOURCES if p.name != "test_docs.py" and "PAPERS.md" in p.read_text(errors="replace")]
    assert not offenders, offenders
