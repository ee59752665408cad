"""environment.yml and pyproject.toml agree: conda supplies Python and pip only, and pip installs
this project (so pyproject.toml stays the one list of Python dependencies)."""
import re
import tomllib
from pathlib import Path

import yaml
from packaging.specifiers import SpecifierSet

ROOT = Path(__file__).resolve().parent.parent


def test_environment_yml_installs_the_project_through_pip():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    deps = env["dependencies"]
    conda = [d for d in deps if isinstance(d, str)]
    pip_sections = [d["pip"] for d in deps if isinstance(d, dict) and "pip" in d]
    assert len(pip_sections) == 1
    pip = pip_sections[0]
    assert pip == ["-e .[dev]"], "pip section must install the project itself, nothing else"
    assert "dev" in project["optional-dependencies"]
    names = {re.split(r"[=<>! ]", c)[0] for c in conda}
    assert names == {"python", "pip"}, f"conda packages besides python/pip duplicate pyproject.toml: {names}"
    py = next(c for c in conda if c.startswith("python"))
    version = py.split("=", 1)[1]
    assert SpecifierSet(project["requires-python"]).contains(version + ".0")


def test_pyproject_lists_the_design_card_packages():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = {re.split(r"[=<>!;\[ ]", d)[0].lower() for d in project["dependencies"]}
    for pkg in ("torch", "torchvision", "hydra-core", "jupyterlab", "ipywidgets", "plotly", "papermill",
                "pandas", "scikit-learn", "tensorboard", "tqdm"):
        assert pkg in names, pkg
    dev = {re.split(r"[=<>!;\[ ]", d)[0].lower() for d in project["optional-dependencies"]["dev"]}
    assert {"pytest", "nbval"} <= dev


def test_declared_package_data_exists():
    """A file pyproject ships as package data (py.typed) is in the package, not only in the list."""
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    for pkg, files in data.items():
        for f in files:
            assert list((ROOT / pkg.replace(".", "/")).glob(f)), f"{pkg}: {f} is declared but missing"


def _declared(project: dict, extra: str, seen: set) -> set:
    """Distribution names (normalised) a ``pip install .[extra]`` asks for, following workbench[...]."""
    names = set()
    reqs = project["dependencies"] + project["optional-dependencies"][extra] if extra == "dev" else \
        project["optional-dependencies"][extra]
    for req in reqs:
        name = re.split(r"[\[=<>!~; ]", req, maxsplit=1)[0].lower().replace("_", "-")
        if name == project["name"]:
            for sub in re.search(r"\[(.*)\]", req).group(1).split(","):
                if sub not in seen:
                    seen.add(sub)
                    names |= _declared(project, sub, seen)
        else:
            names.add(name)
    return names


def test_every_test_import_is_declared_in_the_dev_extras():
    """Each third-party module a test imports (at the top or inside a function) comes from a
    distribution that ``pip install -e .[dev]`` installs by name, not by luck of a transitive pin."""
    import ast
    import sys
    from importlib.metadata import packages_distributions
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = _declared(project, "dev", {"dev"})
    local = {p.stem for p in (ROOT / "tests").glob("*.py")} | {"workbench"}
    dists = packages_distributions()
    missing = {}
    for f in (ROOT / "tests").glob("*.py"):
        for node in ast.walk(ast.parse(f.read_text())):
            mods = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 else []
            for m in mods:
                top = m.split(".")[0]
                if top in sys.stdlib_module_names or top in local:
                    continue
                names = {d.lower().replace("_", "-") for d in dists.get(top, [top])}
                if not names & declared:
                    missing.setdefault(top, set()).add(f.name)
    assert not missing, f"imported by tests but not declared in pyproject's dev extras: {missing}"
