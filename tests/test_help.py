"""``python -m workbench --help`` speaks to users (conf/hydra/help/workbench.yaml): the first lines
name the tool and where to start, the config groups listed are the ones a user picks from (every
group folder under conf/, never the schemas under schema/), and the page ends with the config."""
import subprocess
import sys

import yaml

import workbench
from conftest import ROOT


def test_help_names_the_tool_lists_user_groups_and_ends_with_the_config():
    p = subprocess.run([sys.executable, "-m", "workbench", "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    text = p.stdout
    lines = text.splitlines()
    assert lines[0].startswith("workbench: "), lines[:3]
    head = "\n".join(lines[:8])
    assert "python -m workbench`" in head and "python -m workbench.plan" in head and "make lab" in head
    assert "powered by Hydra" not in text and "__main__" not in text
    assert "schema/" not in text and "hydra/" not in text

    groups_part, config_part = text.split("== Config: override any key (key=value) ==")
    listed = {line.split(":")[0]: line.split(": ", 1)[1].split(", ")
              for line in groups_part.split("(group=option) ==")[1].strip().splitlines()}
    conf = ROOT / "conf"
    folders = {str(d.relative_to(conf)): sorted(f.stem for f in d.glob("*.yaml"))
               for d in conf.rglob("*") if d.is_dir() and any(d.glob("*.yaml"))
               and d.relative_to(conf).parts[0] != "hydra"}
    assert listed == folders  # every user group with its options, and nothing else

    cfg = yaml.safe_load(config_part)  # everything after the header is the composed config
    assert set(cfg) == set(workbench.compose([])) and cfg["output_root"] == "experiments"
    assert cfg["trainer"]["name"] == "sync"
