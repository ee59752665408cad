"""Every bad input is one line naming the key or option and the valid choices, exit status 2,
nothing started, no run directory: Hydra's own errors (wrong type, unknown option, unknown key, a
key without a value, grammar), appended or deleted keys, and out-of-range values, across every
config group. The table runs at compose level (``workbench.compose`` + ``validate``, what the CLI
runs before Hydra starts anything), through the CLI's entry point in this interpreter, and a sample
through ``python -m workbench`` in its own."""
import subprocess
import sys
from pathlib import Path

import pytest

import workbench
from workbench.config import ConfigError, validate

ROOT = Path(__file__).resolve().parent.parent
TC = ["trainer=compressed"]

# (overrides, words the one line must contain)
BAD = [
    # a value of the wrong type (Hydra/OmegaConf merge errors)
    (["cluster.nproc=abc"], ["cluster.nproc", "integer"]),
    (["optim.lr=abc"], ["optim.lr", "number"]),
    (["seed=abc"], ["seed", "integer"]),
    (["optim.momentum=high"], ["optim.momentum"]),
    (["trainer.epochs=ten"], ["trainer.epochs"]),
    (["trainer.max_steps=1.5"], ["trainer.max_steps"]),
    (["trainer.progress=maybe"], ["trainer.progress", "true or false"]),
    (["data.batch_size=big"], ["data.batch_size"]),
    (["data.resize=abc"], ["data.resize", "null"]),
    (["model.width=wide"], ["model.width"]),
    (["model.dropout=abc"], ["model.dropout"]),
    (["cluster.timeout_s=never"], ["cluster.timeout_s"]),
    (["inject.straggler_ranks=abc"], ["inject.straggler_ranks"]),
    (["checkpoint.every=often"], ["checkpoint.every"]),
    (["network.node_bandwidth=abc"], ["network.node_bandwidth"]),
    (["optim.nesterov=perhaps"], ["optim.nesterov"]),
    (["optim.lr=[1,2]"], ["optim.lr"]),
    (["trainer=ps", "trainer.num_servers=two"], ["trainer.num_servers"]),
    (TC + ["compressor=topk", "compressor.k=most"], ["compressor.k", "number"]),
    (["trainer=bmuf", "trainer.block_momentum=abc"], ["trainer.block_momentum"]),
    (["trainer=stanza", "trainer.bucket_cap_mb=abc"], ["trainer.bucket_cap_mb"]),
    # an unknown option of a config group (never the internal *_schema entries)
    (["trainer=nonexistent"], ["nonexistent", "trainer", "sync", "staleness"]),
    (["model=nope"], ["nope", "model", "small_cnn"]),
    (["data=imagenet"], ["imagenet", "data", "digits"]),
    (TC + ["compressor=zip"], ["zip", "compressor", "topk"]),
    (["optim=adam"], ["adam", "optim", "sgd"]),
    (["cluster=k8s"], ["k8s", "cluster", "local"]),
    (["network=wifi"], ["wifi", "network", "loopback"]),
    (["experiment=nope"], ["nope", "experiment", "digits_large_batch"]),
    (["trainer="], ["trainer", "sync"]),
    # an unknown key
    (["foo=1"], ["foo", "trainer"]),
    (["trainer.foo=1"], ["trainer.foo", "epochs"]),
    (["optim.learning_rate=0.1"], ["optim.learning_rate", "lr"]),
    (["model.depth=3"], ["model.depth", "width"]),
    (["data.shuffle=true"], ["data.shuffle", "batch_size"]),
    (["cluster.gpus=2"], ["cluster.gpus", "nproc"]),
    (["cluster.pin=true"], ["cluster.pin", "did you mean testbed.pin"]),  # keys of another group
    (["cluster.kill_rank=1"], ["cluster.kill_rank", "did you mean inject.kill_rank"]),
    (["checkpoint.path=x"], ["checkpoint.path", "every"]),
    (["network.mtu=1500"], ["network.mtu", "bandwidth"]),
    (["compressor.k=0.1"], ["compressor.k", "error_feedback"]),  # compressor none has no k
    (["trainer=ps", "trainer.nu_servers=2"], ["trainer.nu_servers", "num_servers"]),
    (["trainer=sync", "trainer.mode=async"], ["trainer.mode"]),
    # a key without a value
    (["optim.lr"], ["optim.lr", "optim.lr="]),
    (["cluster.nproc"], ["cluster.nproc"]),
    (["optim.lr="], ["optim.lr", "number"]),
    (["seed="], ["seed"]),
    # keys appended to or deleted from typed groups
    (["+trainer.newkey=1"], ["trainer.newkey", "epochs"]),
    (["+foo=1"], ["foo"]),
    (["++optim.betas=1"], ["optim.betas", "momentum"]),
    (["+cluster.gpus=2"], ["cluster.gpus", "nproc"]),
    (["trainer=ps", "+trainer.servers=2"], ["trainer.servers", "num_servers"]),
    (["~trainer"], ["trainer"]),
    (["~optim.lr"], ["optim.lr"]),
    # grammar
    (["=1"], ["=1"]),
    (["optim.lr=0.1)"], ["optim.lr"]),
    (["cluster.nproc=1,2"], ["cluster.nproc", "--multirun"]),
    (["model={a:1}"], ["model"]),
    (["trainer=[sync,ps]"], ["trainer", "one option", "stanza"]),
    (["model=null"], ["model", "small_cnn"]),
    (["+trainer=ps"], ["trainer", "without '+'"]),
    (["+optim.lr=0.2"], ["optim.lr", "without '+'"]),
    # values out of range (validate, before launch)
    (["trainer.epochs=-1"], ["trainer.epochs"]),
    (["trainer.epochs=-1", "trainer.max_steps=10"], ["trainer.epochs"]),
    (["inject.kill_rank=7", "inject.kill_at_step=3"], ["inject.kill_rank", "[0, 3]"]),
    (["inject.kill_rank=-2"], ["inject.kill_rank"]),
    (["inject.kill_rank=1"], ["inject.kill_at_step"]),
    (["inject.kill_rank=1", "inject.kill_at_step=0"], ["inject.kill_at_step"]),
    (["inject.straggler_ranks=[4]"], ["inject.straggler_ranks", "[0, 3]"]),
    (["inject.straggler_ranks=[-1]"], ["inject.straggler_ranks"]),
    (["trainer=ps", "trainer.mode=bsp"], ["trainer.mode", "sync, async"]),
    (["trainer=staleness", "trainer.n=9"], ["trainer.n"]),
    (["trainer=bmuf", "trainer.block=0"], ["trainer.block"]),
    (["optim.momentum=1.0"], ["optim.momentum"]),
    (["cluster.nproc=0"], ["cluster.nproc"]),
    (["data.test_fraction=1.5"], ["data.test_fraction"]),
    (TC + ["compressor=signsgd", "compressor.scale=0"], ["compressor.scale"]),
    (["trainer=ps", "trainer.mode=${nowhere}"], ["nowhere"]),
]


def _one_line(msg: str, words) -> None:
    assert "\n" not in msg and msg.strip(), msg
    assert "_schema" not in msg and "Config search path" not in msg, msg
    for w in words:
        assert w in msg, (w, msg)


def test_the_table_covers_every_group_and_kind():
    assert len(BAD) >= 60 and len(SAMPLE) == 4
    text = " ".join(" ".join(o) for o, _ in BAD)
    for group in ("trainer", "model", "data", "optim", "cluster", "compressor", "network", "checkpoint", "experiment", "seed"):
        assert group in text, group


def cli(*args):
    return subprocess.run([sys.executable, "-m", "workbench", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


def _check_cli(tmp_path, overrides, words):
    p = cli(f"output_root={tmp_path}", *overrides)
    assert p.returncode == 2, (overrides, p.returncode, p.stderr[-2000:])
    lines = [l for l in (p.stderr + p.stdout).splitlines() if l.strip()]
    assert len(lines) == 1 and lines[0].startswith("workbench: error: "), (overrides, lines)
    _one_line(lines[0], words)
    assert not list(tmp_path.iterdir()), f"{overrides}: a run directory was left behind"


# wrong type, unknown option, appended key, fault-injection rank: each through its own interpreter
# (every case goes through the CLI's entry point below)
SAMPLE = [i for i, (o, _) in enumerate(BAD) if o in (["cluster.nproc=abc"], ["trainer=nonexistent"], ["+trainer.newkey=1"],
                                                     ["inject.kill_rank=7", "inject.kill_at_step=3"])]


@pytest.mark.parametrize("i", SAMPLE, ids=[" ".join(BAD[i][0]) for i in SAMPLE])
def test_bad_input_through_the_cli(tmp_path, i):
    _check_cli(tmp_path, *BAD[i])


def test_bad_input_under_multirun_fails_before_any_job(tmp_path):
    p = cli("--multirun", f"output_root={tmp_path}", "cluster.nproc=1,0", "trainer.max_steps=2")
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "cluster.nproc" in p.stderr, p.stderr
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("overrides, words", BAD, ids=[" ".join(o) for o, _ in BAD])
def test_bad_input_is_one_config_error_from_the_api_and_the_cli(tmp_path, monkeypatch, capsys, overrides, words):
    """Each case through the Python API (``compose`` + ``validate``), then through ``python -m
    workbench``'s ``main`` in this interpreter: the CLI's own argument handling (``--multirun``
    splitting, Hydra's grammar) before compose and validate."""
    with pytest.raises(ConfigError) as api:
        validate(workbench.compose(overrides))
    _one_line(str(api.value), words)
    from workbench.__main__ import main
    monkeypatch.setattr(sys, "argv", ["workbench", f"output_root={tmp_path}", *overrides])
    with pytest.raises(SystemExit) as e:
        main()
    out = capsys.readouterr()
    assert e.value.code == 2, (overrides, e.value.code, out.err[-2000:])
    lines = [l for l in (out.err + out.out).splitlines() if l.strip()]
    assert len(lines) == 1 and lines[0].startswith("workbench: error: "), (overrides, lines)
    _one_line(lines[0], words)
    assert not list(tmp_path.iterdir()), f"{overrides}: a run directory was left behind"
