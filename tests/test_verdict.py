"""The verdict on a run: the rule on small fixed metric sequences, and end to end on a run made not
to learn (a learning rate too small to move) and one made to diverge (a huge learning rate)."""
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

import workbench
from workbench.verdict import judge

ROOT = Path(__file__).resolve().parent.parent

FALLING = [2.3 - 2.2 * i / 99 for i in range(100)]  # 2.3 -> 0.1


def test_learned():
    assert judge(FALLING, [0.3, 0.7, 0.92, 0.95], 10)[0] == "learned"


def test_at_chance_did_not_learn():
    v, why = judge(FALLING, [0.09, 0.11, 0.1], 10)
    assert v == "did_not_learn" and "chance" in why


def test_loss_not_falling_did_not_learn_without_evaluations():
    assert judge([2.3, 2.31, 2.29, 2.32] * 10, [], None)[0] == "did_not_learn"


def test_just_above_the_margin_learned():
    assert judge(FALLING, [0.2], 10)[0] == "learned"  # 10 classes: chance 10 %, margin 5 %
    assert judge(FALLING, [0.14], 10)[0] == "did_not_learn"


def test_loss_spike_is_unstable():
    spiky = FALLING[:60] + [3.0] * 10 + FALLING[70:]
    v, why = judge(spiky, [0.5, 0.9, 0.92], 10)
    assert v == "unstable" and "spiked" in why


def test_single_noisy_batch_is_not_a_spike():
    noisy = list(FALLING)
    noisy[60] = 2.0  # one bad batch of 16 samples: the window mean barely moves
    assert judge(noisy, [0.9], 10)[0] == "learned"


def test_accuracy_collapse_is_unstable():
    v, why = judge(FALLING, [0.5, 0.95, 0.9, 0.4, 0.1], 10)
    assert v == "unstable" and "collapsed" in why and "95.0%" in why


def test_nan_diverged():
    assert judge(FALLING[:50] + [math.nan], [0.5], 10)[0] == "diverged"
    assert judge(FALLING, [0.5], 10, status="diverged")[0] == "diverged"
    assert judge([2.3, math.inf], [], 10)[0] == "diverged"


def test_async_momentum_advice_names_implied_and_suggested_momentum():
    from workbench.config import warnings
    from workbench.verdict import advice
    cfg = workbench.compose(["trainer=ps", "trainer.mode=async", "trainer.compensate_momentum=false", "cluster.nproc=4"])
    a = advice("did_not_learn", cfg)
    assert "0.67" in a and "optim.momentum=0.23" in a and "trainer.compensate_momentum=true" in a
    assert len(warnings(cfg)) == 1 and "optim.momentum=0.23" in warnings(cfg)[0]
    # the default compensates: 0.9 - 2/3 = 0.23 explicit + 0.67 implied, nothing to warn about
    assert warnings(workbench.compose(["trainer=ps", "trainer.mode=async", "cluster.nproc=4"])) == []
    assert warnings(workbench.compose(["trainer=ps", "cluster.nproc=4"])) == []  # sync: no implied momentum
    # Rudra's fully asynchronous softsync (n = lambda = 3) as published: warned, not refused
    cfg = workbench.compose(["trainer=staleness", "trainer.n=3", "cluster.nproc=4"])
    assert warnings(cfg) and "1-1/3" in warnings(cfg)[0]


def cli(*args):
    return subprocess.run([sys.executable, "-m", "workbench", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)


def test_run_too_small_a_learning_rate_did_not_learn(tmp_path):
    p = cli(f"output_root={tmp_path}", "cluster.nproc=2", "trainer.max_steps=40", "trainer.eval_every=20",
            "trainer.progress=false", "optim.lr=1e-7")
    assert p.returncode == 0, p.stderr[-2000:]
    last = p.stdout.strip().splitlines()
    assert last[-2].startswith("verdict: did_not_learn") and "optim.lr=" in last[-2]
    run_dir = Path(last[-1].split("run directory: ")[1])
    s = json.loads((run_dir / "summary.json").read_text())
    assert s["status"] == "completed" and s["verdict"] == "did_not_learn" and s["final_test_accuracy"] < 0.15
    runs = workbench.load_runs(str(tmp_path))
    assert list(runs["verdict"]) == ["did_not_learn"]


def test_run_with_a_huge_learning_rate_diverged(tmp_path):
    p = cli(f"output_root={tmp_path}", "cluster.nproc=2", "trainer.max_steps=60", "trainer.progress=false",
            "optim.lr=1000")
    assert p.returncode == 3, p.stderr[-2000:]
    assert "verdict: diverged" in p.stderr and "optim.lr=100" in p.stderr
    s = json.loads(next(tmp_path.rglob("summary.json")).read_text())
    assert s["status"] == "diverged" and s["verdict"] == "diverged"


def test_a_run_with_nothing_recorded_did_not_learn():
    """A launch that failed before step 1 (or after one step, without an evaluation) has no evidence
    of learning; it was once called 'learned' because 'the loss fell'."""
    assert judge([], [], 10) == ("did_not_learn", "no training steps recorded and no evaluation")
    assert judge([2.3], [], 10)[0] == "did_not_learn"
    assert judge([2.3, 1.0], [], 10)[0] == "learned"


def test_a_run_is_diverged_when_a_rank_other_than_0_diverges_first(tmp_path):
    """Asynchronous workers diverge at different steps; when rank 1 hits the NaN while rank 0 sleeps
    (a straggler), the agent stops rank 0 before it writes the summary: the launcher reads rank 1's
    totals and records the run as diverged (exit 3), not failed. Seen in the staleness suite at λ = 8."""
    p = cli(f"output_root={tmp_path}", "trainer=ps", "trainer.mode=async", "cluster.nproc=3",
            "trainer.max_steps=40", "trainer.progress=false", "optim.lr=1000", "inject.straggler_ranks=[0]",
            "inject.straggler_delay_s=3")
    assert p.returncode == 3, p.stderr[-2000:]
    s = json.loads(next(tmp_path.rglob("summary.json")).read_text())
    assert s["status"] == "diverged" and s["verdict"] == "diverged", s
    assert s["error"].startswith("rank 1: ") and "nan" in s["error"].lower(), s["error"]
