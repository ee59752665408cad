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
