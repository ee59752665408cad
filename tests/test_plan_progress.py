"""The planner's command line for a newcomer: ``--help`` leads with commands to paste, and
``--verify`` says which paradigm it runs, i/N, with the time left (one line each where stderr is no
terminal, as in a log or CI).

    PYTHONPATH=. .venv/bin/python -m pytest -q tests/test_plan_progress.py
"""
import json

import pytest

from perfmodel_fixtures import synthetic_profile


def test_help_leads_with_examples(capsys):
    from workbench.plan import main
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    examples = out.index("examples:")
    assert examples < out.index("positional arguments")
    assert "python -m workbench.plan model=vgg16 data.resize=32 cluster.nproc=8 --bandwidth 1gbit,10gbit" in out
    assert "python -m workbench.plan cluster.nproc=3 --verify" in out


def test_progress_lines_count_runs_and_estimate_the_rest():
    import time

    from workbench.plan.verification import Progress
    lines = []
    p = Progress(3, log=lines.append, bars=False)
    for what in ("sync", "ps/sync", "ps/async"):
        p.start(what)
        time.sleep(0.01)
        p.done()
    p.close()
    assert lines[0] == "verify 1/3: sync ..."  # nothing done yet: no estimate
    assert lines[1].startswith("verify 2/3: ps/sync ... (about ") and lines[1].endswith(" s left)")
    assert lines[2].startswith("verify 3/3: ps/async ... (about ")


def test_verify_prints_i_of_n_per_paradigm(tmp_path, capsys):
    """``--verify --only sync`` on the small CNN, 2 ranks, from a profile given (nothing profiled):
    one real run, announced on stderr as ``verify 1/1``."""
    import workbench
    from workbench.perfmodel.profile import profile_key
    from workbench.plan import main
    key = profile_key(workbench.compose(["model=small_cnn"]))
    prof = synthetic_profile(t_c=0.05, model=key["model"], input_shape=key["input_shape"], batch=key["batch"], ranks=2)
    path = prof.save(tmp_path / "profile.json")
    out = tmp_path / "plan.json"
    assert main([f"output_root={tmp_path}", "model=small_cnn", "cluster.nproc=2", "cluster.timeout_s=300",
                 "--profile", str(path), "--verify", "--only", "sync", "--json", str(out)]) == 0
    err = capsys.readouterr().err
    assert "verify 1/1: sync on 2 ranks, loopback, " in err, err
    rows = json.loads(out.read_text())["rows"]
    assert [r["paradigm"] for r in rows] == ["sync"] and rows[0]["measured_step_s"] > 0
