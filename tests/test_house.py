"""The house rules a reader relies on (docs/architecture.md): sizes a newcomer can hold in mind,
docs in the present tense apart from the investigation log, and an architecture page that matches
the tree. Each test names what broke the rule."""
import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "workbench"
MODULE_LINES, FUNCTION_LINES, LONG_FUNCTIONS = 450, 80, 3
# a date or a session's stop number; a link to a notes file (docs/notes/<date>-<topic>.md) is where history lives
HISTORY = re.compile(r"\b20\d\d-\d\d-\d\d\b|\bstop \d+\b|\bsittings?\b", re.I)
NOTES_LINK = re.compile(r"docs/notes/20\d\d-\d\d-\d\d-[\w.-]+\.md|notes/20\d\d-\d\d-\d\d-[\w.-]+\.md")


def _modules():
    return sorted(PACKAGE.rglob("*.py"))


def test_no_module_is_longer_than_a_newcomer_can_hold():
    long = {str(p.relative_to(ROOT)): n for p in _modules() if (n := len(p.read_text().splitlines())) > MODULE_LINES}
    assert not long, f"modules over {MODULE_LINES} lines: {long}"


def test_at_most_three_long_functions_each_with_its_reason():
    long = []
    for p in _modules():
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > FUNCTION_LINES:
                    doc = ast.get_docstring(node) or ""
                    assert "one piece" in doc, f"{p.relative_to(ROOT)}:{node.name} is {n} lines without saying why"
                    long.append((str(p.relative_to(ROOT)), node.name, n))
    assert len(long) <= LONG_FUNCTIONS, f"functions over {FUNCTION_LINES} lines: {long}"


def test_code_and_config_carry_no_history():
    found = []
    for p in [*_modules(), *sorted((ROOT / "conf").rglob("*.yaml"))]:
        for i, line in enumerate(p.read_text().splitlines(), 1):
            if HISTORY.search(NOTES_LINK.sub("", line)):
                found.append(f"{p.relative_to(ROOT)}:{i}: {line.strip()}")
    assert not found, "dates, stops or sittings in code (move the story to docs/notes/):\n" + "\n".join(found)


def test_pages_stay_short():
    limits = {ROOT / "README.md": 200, ROOT / "BENCHMARKS.md": 300,
              **{p: 400 for p in sorted((ROOT / "docs").glob("*.md"))}}
    over = {str(p.relative_to(ROOT)): n for p, lim in limits.items() if (n := len(p.read_text().splitlines())) > lim}
    assert not over, f"pages over their limit (README 200, BENCHMARKS 300, docs/*.md 400): {over}"


def test_the_architecture_page_names_every_folder_of_the_package():
    page = (ROOT / "docs" / "architecture.md").read_text()
    folders = sorted(p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists())
    missing = [f for f in folders if f"{f}/" not in page]
    assert not missing, f"docs/architecture.md does not describe workbench/{missing}"
    modules = sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__")
    missing = [m for m in modules if not re.search(rf"\b{m}\b", page)]
    assert not missing, f"docs/architecture.md does not name the modules {missing}"
