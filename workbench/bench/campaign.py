"""Named campaigns: a long suite invocation kept as a file and run by its name.

    python -m workbench.bench campaign --list                    # every campaign: name, suite, what it answers, how long
    python -m workbench.bench campaign planner-xeon-pinned       # run one (as root where it says so)
    python -m workbench.bench campaign planner-xeon-pinned --print   # the command it runs, nothing run

A campaign is ``experiments/campaigns/<name>.yaml``, kept in git::

    suite: planner                       # a suite of ``python -m workbench.bench``
    argv: [--workers, "2", --pin, ...]   # its arguments, exactly as on the command line
    answers: one line on the question it answers
    duration: roughly how long, on which machine
    root: true                           # needs the emulated network (run it with sudo)

Running a campaign is running ``python -m workbench.bench <suite> <argv...>``: the suite's own
options, resume and rounds apply unchanged; a campaign adds only the name.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DIR = ROOT / "experiments" / "campaigns"


@dataclass(frozen=True)
class Campaign:
    name: str
    suite: str
    argv: tuple
    answers: str
    duration: str
    root: bool

    def command(self) -> str:
        head = "sudo .venv/bin/python" if self.root else "python"
        return f"{head} -m workbench.bench {self.suite} {shlex.join(self.argv)}".strip()


def load(path: Path, suites) -> Campaign:
    """One campaign file; ValueError with the file and the key where it is malformed."""
    import yaml
    try:
        data = yaml.safe_load(Path(path).read_text()) or {}
    except yaml.YAMLError as e:
        raise ValueError(f"{path}: not YAML ({' '.join(str(e).split())})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a mapping of suite, argv, answers, duration, root")
    unknown = set(data) - {"suite", "argv", "answers", "duration", "root"}
    if unknown:
        raise ValueError(f"{path}: unknown key {sorted(unknown)[0]!r}; keys: suite, argv, answers, duration, root")
    if data.get("suite") not in suites:
        raise ValueError(f"{path}: invalid suite {data.get('suite')!r}; choose from {', '.join(suites)}")
    argv = data.get("argv") or []
    if not isinstance(argv, list) or not all(isinstance(x, (str, int, float)) for x in argv):
        raise ValueError(f"{path}: argv must be a list of strings")
    for key in ("answers", "duration"):
        if not isinstance(data.get(key), str) or not data[key].strip():
            raise ValueError(f"{path}: {key} must be one line of text")
    return Campaign(Path(path).stem, data["suite"], tuple(str(x) for x in argv), data["answers"].strip(),
                    data["duration"].strip(), bool(data.get("root", False)))


def campaigns(suites, directory: Path = DIR) -> dict:
    """``{name: Campaign}`` of every file in ``directory``, sorted by name."""
    return {p.stem: load(p, suites) for p in sorted(Path(directory).glob("*.yaml"))}


class _Parsed(Exception):
    def __init__(self, namespace):
        self.namespace = namespace


@contextlib.contextmanager
def _parse_only():
    """Within: the first ``ArgumentParser.parse_args`` that succeeds raises ``_Parsed`` with its result,
    so a suite's ``main`` stops right after its own parser accepted the arguments."""
    original = argparse.ArgumentParser.parse_args

    def parse(self, args=None, namespace=None):
        raise _Parsed(original(self, args, namespace))
    argparse.ArgumentParser.parse_args = parse
    try:
        yield
    finally:
        argparse.ArgumentParser.parse_args = original


def parse(c: Campaign, suites) -> argparse.Namespace:
    """The suite's own parser run on the campaign's argv, nothing else run; SystemExit(2) where it
    refuses them (argparse prints the reason)."""
    mod = importlib.import_module(suites[c.suite])
    with _parse_only():
        try:
            mod.main(list(c.argv))
        except _Parsed as done:
            return done.namespace
    raise RuntimeError(f"{c.suite}'s main returned without parsing its arguments")


def main(argv, suites) -> int:
    p = argparse.ArgumentParser(prog="python -m workbench.bench campaign", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("name", nargs="?", help="a campaign: a file experiments/campaigns/<name>.yaml")
    p.add_argument("--list", action="store_true", help="list the campaigns and exit")
    p.add_argument("--print", action="store_true", help="print the campaign's command and exit")
    a = p.parse_args(argv)
    try:
        known = campaigns(suites)
    except ValueError as e:
        print(f"workbench: error: {e}", file=sys.stderr)
        return 2
    if a.list or not a.name:
        if not a.list:
            print(f"workbench: error: name a campaign; choose from {', '.join(known)}", file=sys.stderr)
            return 2
        width = max((len(n) for n in known), default=0)
        for c in known.values():
            print(f"{c.name:<{width}}  {c.suite:<10} {c.duration}{' (root)' if c.root else ''}\n{'':<{width}}  {c.answers}")
        return 0
    if a.name not in known:
        print(f"workbench: error: unknown campaign {a.name!r}; choose from {', '.join(known)}", file=sys.stderr)
        return 2
    c = known[a.name]
    if a.print:
        print(c.command())
        return 0
    if c.root and hasattr(os, "geteuid") and os.geteuid() != 0:
        print(f"workbench: error: campaign {c.name!r} needs root (the emulated network): sudo .venv/bin/python "
              f"-m workbench.bench campaign {c.name}", file=sys.stderr)
        return 2
    print(f"== campaign {c.name}: {c.command()}", file=sys.stderr, flush=True)
    importlib.import_module(suites[c.suite]).main(list(c.argv))
    return 0
