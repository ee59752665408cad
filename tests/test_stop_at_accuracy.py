"""trainer.stop_at_accuracy: a run whose ranks evaluate together ends at its first evaluation at
or above the target, every rank at the same step; trainers that evaluate on one rank refuse it."""
import json

import pytest

import workbench
from conftest import launch_run


@pytest.mark.parametrize("overrides", [["trainer=sync"], ["trainer=compressed", "compressor=topk"],
                                       ["trainer=bmuf", "trainer.block=5"]])
def test_the_run_ends_at_its_first_evaluation_at_the_target(tmp_path, overrides):
    run = launch_run([*overrides, "cluster.nproc=2", "trainer.max_steps=300", "trainer.eval_every=10",
                      "trainer.stop_at_accuracy=0.7", "trainer.progress=false", f"output_root={tmp_path}"])
    recs = [json.loads(line) for line in (run.path / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in recs if r["kind"] == "eval"]
    assert evals[-1]["test_accuracy"] >= 0.7 and all(r["test_accuracy"] < 0.7 for r in evals[:-1])
    stop = evals[-1]["step"]
    assert stop < 300 and run.summary["steps"] == stop and run.summary["status"] == "completed"
    assert [r for r in recs if r["kind"] == "stop"] == [{"kind": "stop", "step": stop, "reason": "test accuracy reached 0.7"}]
    assert max(r["step"] for r in recs if r["kind"] == "train") == stop
    for f in (run.path / "ranks").glob("rank*.jsonl"):  # every rank stopped at the same step
        assert max(json.loads(line)["step"] for line in f.read_text().splitlines()) == stop, f.name


@pytest.mark.parametrize("overrides,says", [
    (["trainer=ps", "trainer.stop_at_accuracy=0.8"], "evaluates on one rank"),
    (["trainer=staleness", "trainer.stop_at_accuracy=0.8"], "evaluates on one rank"),
    (["trainer=easgd", "trainer.stop_at_accuracy=0.8"], "evaluates on one rank"),
    (["trainer.stop_at_accuracy=0"], "in (0, 1]"),
    (["trainer.stop_at_accuracy=1.5"], "in (0, 1]"),
])
def test_stop_at_accuracy_bad_input_is_one_line(overrides, says):
    from workbench.config import validate
    from workbench.core import ConfigError
    with pytest.raises(ConfigError, match=r"trainer\.stop_at_accuracy") as e:
        validate(workbench.compose(overrides))
    assert says in str(e.value) and "\n" not in str(e.value)
