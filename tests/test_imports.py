"""The package's import graph has no cycle: no module imports a module above it, also not inside a
function (a circle dodged by a function-level import still ties the two layers together).

The graph is built from the source with ``ast``: every ``import``/``from … import`` anywhere in a
module (functions, ``if TYPE_CHECKING`` blocks included), relative imports resolved, and
``from workbench import x`` read as an import of ``workbench.x`` when ``x`` is a submodule. Importing
``a.b.c`` is an edge to ``a.b.c`` only: its parent packages' ``__init__`` run too, but registries
fill themselves by discovery (pkgutil, not an ``import`` statement), so a package ``__init__`` never
depends on its members.
"""
from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, List, Set

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "workbench"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> Dict[str, Path]:
    return {module_name(p): p for p in sorted(PKG.rglob("*.py"))}


def imports_of(name: str, path: Path, known: Set[str]) -> Set[str]:
    """The workbench modules that ``name`` imports anywhere in its source."""
    is_pkg = path.name == "__init__.py"
    out: Set[str] = set()

    def add(mod: str) -> None:
        while mod and mod not in known:  # `import workbench.x.Thing`-like spellings: the longest module prefix
            mod = mod.rpartition(".")[0]
        if mod and mod != name:
            out.add(mod)

    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name == "workbench" or a.name.startswith("workbench."):
                    add(a.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_pkg else name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if not (mod == "workbench" or mod.startswith("workbench.")):
                continue
            for a in node.names:
                sub = f"{mod}.{a.name}"
                add(sub if sub in known else mod)
    return out


def graph() -> Dict[str, Set[str]]:
    mods = modules()
    known = set(mods)
    return {name: imports_of(name, path, known) for name, path in mods.items()}


def cycles(g: Dict[str, Set[str]]) -> List[List[str]]:
    """One cycle per strongly connected component with more than one module (Tarjan), each as a path."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on: Set[str] = set()
    comps: List[List[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(g.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return [_path_in(g, set(c)) for c in comps]


def _path_in(g: Dict[str, Set[str]], comp: Set[str]) -> List[str]:
    """A concrete cycle through the component's first module (breadth-first back to it)."""
    start = min(comp)
    prev = {start: None}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(g[v] & comp):
                if w == start:
                    path = [v]
                    while prev[path[-1]] is not None:
                        path.append(prev[path[-1]])
                    return list(reversed(path)) + [start]
                if w not in prev:
                    prev[w] = v
                    nxt.append(w)
        frontier = nxt
    return sorted(comp)  # pragma: no cover - a component always has a cycle


def test_graph_sees_function_level_and_relative_imports(tmp_path):
    # the reader itself, on a hand-made package: a function-level import, a relative one, a submodule via `from pkg import x`
    known = {"workbench", "workbench.a", "workbench.b", "workbench.sub", "workbench.sub.c"}
    src = tmp_path / "workbench" / "sub"
    src.mkdir(parents=True)
    (src / "c.py").write_text("from .. import a\ndef f():\n    from workbench import b, sub\n    import workbench.sub.c\n")
    assert imports_of("workbench.sub.c", src / "c.py", known) == {"workbench.a", "workbench.b", "workbench.sub"}


def test_cycle_finder_reports_a_path():
    g = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(g) == [["a", "b", "c", "a"]]


def test_no_import_cycles():
    found = cycles(graph())
    assert not found, "import cycles in workbench/ (a module imports one above it):\n" + "\n".join(
        " -> ".join(c) for c in found)


def test_core_is_a_leaf():
    assert graph()["workbench.core"] == set()


# The floors of DESIGN.md, lowest first: a module imports only from its own floor and those below.
# Each entry is a module or a package prefix; the longest match places a module.
FLOORS = {
    "foundations": ("workbench.core", "workbench.registry", "workbench.spec", "workbench.meter", "workbench.dist",
                    "workbench.checkpoint", "workbench.models", "workbench.data", "workbench.network",
                    "workbench.runs", "workbench.runs.store", "workbench.runs.handle"),
    "models of cost": ("workbench.perfmodel",),
    "running": ("workbench.launcher", "workbench.starters", "workbench.worker", "workbench.trainers",
                "workbench.ps", "workbench.compress", "workbench.sim"),
    "analysis": ("workbench.analysis", "workbench.widgets", "workbench.runs.table"),
}
PLACED = ("workbench.spec", "workbench.runs")  # held to their floors so far (a prefix: its modules too)


def floor_of(module: str):
    """The index in :data:`FLOORS` of ``module``'s floor (the longest entry that is it or a package
    above it), None where no entry places it."""
    best, floor = "", None
    for i, entries in enumerate(FLOORS.values()):
        for e in entries:
            if (module == e or module.startswith(e + ".")) and len(e) > len(best):
                best, floor = e, i
    return floor


def test_placed_modules_import_nothing_above_their_floor():
    g = graph()
    names = list(FLOORS)
    up = [f"{m} ({names[floor_of(m)]}) imports {d} ({names[floor_of(d)]})" for m in sorted(g)
          if any(m == p or m.startswith(p + ".") for p in PLACED)
          for d in sorted(g[m]) if floor_of(d) is not None and floor_of(d) > floor_of(m)]
    assert not up, "imports up a floor:\n" + "\n".join(up)
    assert floor_of("workbench.runs.store") == 0 and floor_of("workbench.runs.table") == 3
    assert g["workbench.runs"] == set()  # the package's __init__ imports none of its floors


def test_no_cycle_through_discovery():
    """A registry imports its package's modules by discovery, not by an ``import`` statement: count
    that as the package importing each member, and a member importing something that imports the
    registry back (``config`` validates through the registries; ``launcher`` calls the starters) is
    a cycle too. A member's own import of its registry is the registration itself, not a layer."""
    g = graph()
    discovering = {"workbench.trainers": {"base", "bookkeeping"}, "workbench.compress": {"base", "hook", "error_feedback", "bench"},
                   "workbench.models": set(), "workbench.data": set(), "workbench.starters": set()}
    for pkg, skip in discovering.items():
        for m in g:
            parent, _, leaf = m.rpartition(".")
            if parent == pkg and leaf not in skip:
                g[pkg].add(m)
                g[m].discard(pkg)
    found = cycles(g)
    assert not found, "import cycles through registry discovery:\n" + "\n".join(" -> ".join(c) for c in found)
