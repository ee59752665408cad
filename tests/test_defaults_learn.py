"""Every trainer and every compressor at its shipped defaults, 4 processes on the digits, learns:
>= 85 % test accuracy and the verdict ``learned`` for the synchronous, bounded and error-corrected
ones; for the lossy-by-design compressors (Random-K, signSGD) no divergence and clearly above
chance. Convergence runs of 4 real ranks for the default 20 epochs: slow tier (``make test-all``)."""
import pytest

from conftest import launch_run

TRAINERS = [["trainer=sync"], ["trainer=ps"], ["trainer=ps", "trainer.mode=async"], ["trainer=staleness"],
            ["trainer=stanza"], ["trainer=compressed"], ["trainer=easgd"], ["trainer=bmuf"], ["trainer=local_sgd"]]
COMPRESSORS = ["fp16", "bf16", "topk", "mstopk", "randomk", "signsgd", "efsignsgd", "qsgd", "powersgd"]
LOSSY = {"randomk", "signsgd"}  # no error correction by default: above chance is the promise
CASES = [pytest.param(t, 0.85, id=" ".join(t)) for t in TRAINERS] + \
        [pytest.param(["trainer=compressed", f"compressor={c}"], 0.3 if c in LOSSY else 0.85, id=f"compressor={c}")
         for c in COMPRESSORS]


@pytest.mark.slow
@pytest.mark.parametrize("overrides, target", CASES)
def test_defaults_learn_on_digits_with_4_processes(tmp_path, overrides, target):
    run = launch_run([f"output_root={tmp_path}", "trainer.progress=false", "cluster.nproc=4", *overrides], check=False)
    s = run.summary
    print(f"{' '.join(overrides)}: {s['status']} {s.get('final_test_accuracy')} {s.get('verdict')}")
    assert s["status"] == "completed", s.get("error")
    assert s["verdict"] == "learned", (s["verdict"], s.get("verdict_reason"))
    assert s["final_test_accuracy"] >= target, s["final_test_accuracy"]
