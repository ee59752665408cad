"""The named campaigns (``experiments/campaigns/*.yaml``): every file parses and its argv is accepted by
its suite's own parser (nothing is run); ``campaign --list`` lists them; an unknown name is one line
naming the valid ones, exit 2."""
import subprocess
import sys
from pathlib import Path

import pytest

from workbench.bench import campaign
from workbench.bench.__main__ import SUITES

ROOT = Path(__file__).resolve().parent.parent
FILES = sorted((ROOT / "experiments" / "campaigns").glob("*.yaml"))


def test_there_are_campaigns():
    assert len(FILES) >= 10


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_campaign_parses_and_its_suite_accepts_its_argv(path):
    c = campaign.load(path, SUITES)
    ns = campaign.parse(c, SUITES)
    assert ns is not None
    if "--write" in c.argv:
        assert ns.write is True


def test_a_bad_argv_is_refused_by_the_suite(tmp_path):
    (tmp_path / "bad.yaml").write_text("suite: planner\nargv: [--no-such-option]\nanswers: x\nduration: y\n")
    c = campaign.campaigns(SUITES, tmp_path)["bad"]
    with pytest.raises(SystemExit) as e:
        campaign.parse(c, SUITES)
    assert e.value.code == 2


def test_a_malformed_file_names_its_key(tmp_path):
    (tmp_path / "x.yaml").write_text("suite: nosuch\nargv: []\nanswers: x\nduration: y\n")
    with pytest.raises(ValueError, match="invalid suite 'nosuch'; choose from overhead"):
        campaign.campaigns(SUITES, tmp_path)


def run(*args):
    return subprocess.run([sys.executable, "-m", "workbench.bench", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)


def test_list_and_print():
    p = run("campaign", "--list")
    assert p.returncode == 0, p.stderr
    for f in FILES:
        assert f.stem in p.stdout
    p = run("campaign", "planner-xeon-pinned", "--print")
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip().startswith("sudo .venv/bin/python -m workbench.bench planner --workers 2 --pin")


def test_unknown_campaign_is_one_line_and_exit_2():
    p = run("campaign", "no-such-campaign")
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    assert lines[0].startswith("workbench: error: unknown campaign 'no-such-campaign'; choose from ")
    assert "planner-xeon-pinned" in lines[0] and "crossover-small-cnn" in lines[0]
    assert not p.stdout


def test_help_leads_with_an_example():
    p = run("--help")
    assert p.returncode == 0
    head = p.stdout.strip().splitlines()[:5]
    assert any("python -m workbench.bench campaign" in line for line in head), head
