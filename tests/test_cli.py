"""The command line: `python -m workbench` (Hydra main), --multirun, bad input, and the worker
entry started by torchrun by hand, as on a cluster."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def cli(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "workbench", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)


def test_cli_run_prints_summary_and_run_dir(tmp_path):
    p = cli(f"output_root={tmp_path}", "cluster.nproc=2", "trainer.max_steps=20", "trainer.progress=false")
    assert p.returncode == 0, p.stderr[-2000:]
    assert "final test accuracy" in p.stdout and "samples/s" in p.stdout and "MiB sent per worker per step" in p.stdout
    run_dir = Path(p.stdout.strip().splitlines()[-1].split("run directory: ")[1])
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "completed"


@pytest.mark.parametrize("override, key", [
    ("cluster.nproc=0", "cluster.nproc"),
    ("optim.lr=-1", "optim.lr"),
    ("data=cifar10", "data.root"),
])
def test_invalid_config_fails_before_launch(tmp_path, override, key):
    p = cli(f"output_root={tmp_path}", override, "data.root=/nonexistent" if override == "data=cifar10" else "seed=0")
    assert p.returncode == 2, p.stderr
    err = [l for l in p.stderr.splitlines() if l.strip()]
    assert len(err) == 1 and key in err[0], p.stderr
    assert not list(tmp_path.rglob("*")), "a run directory was left behind"


def test_unknown_key_and_option_fail_before_launch(tmp_path):
    for bad, word in (("optim.learning_rate=0.1", "learning_rate"), ("model=nope", "nope")):
        p = cli(f"output_root={tmp_path}", bad)
        assert p.returncode != 0 and word in p.stderr
        assert not (tmp_path / "runs").exists() or not list((tmp_path / "runs").rglob("config.yaml"))


def test_multirun_sweep(tmp_path):
    p = cli("--multirun", f"output_root={tmp_path}", "cluster.nproc=1,2", "trainer.max_steps=5",
            "trainer.progress=false")
    assert p.returncode == 0, p.stderr[-2000:]
    runs = sorted((tmp_path / "multiruns").rglob("summary.json"))
    assert len(runs) == 2
    assert sorted(json.loads(r.read_text())["workers"] for r in runs) == [1, 2]


def test_torchrun_by_hand(tmp_path):
    """The worker entry works under plain torchrun (c10d rendezvous), as on a cluster node."""
    p = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", "2",
                        "--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:0", "--max-restarts", "0",
                        "-m", "workbench.worker", f"output_root={tmp_path}", "cluster.nproc=2", "trainer.max_steps=6",
                        "trainer.progress=false"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    summaries = list((tmp_path / "runs").rglob("summary.json"))
    assert len(summaries) == 1
    s = json.loads(summaries[0].read_text())
    assert s["status"] == "completed" and s["workers"] == 2 and s["steps"] == 6


def test_two_nodes_on_loopback(tmp_path):
    """Two elastic agents (two "nodes", one rank each) join one c10d rendezvous and train together."""
    from workbench.launcher import free_port
    port = free_port()
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1",
           "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "twonodes",
           "-m", "workbench.worker", f"output_root={tmp_path}", "cluster.nnodes=2", "cluster.nproc=1",
           "trainer.max_steps=8", "trainer.progress=false"]
    nodes = [subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [n.communicate(timeout=300) for n in nodes]
    assert all(n.returncode == 0 for n in nodes), outs[0][1][-2000:] + outs[1][1][-2000:]
    summaries = list((tmp_path / "runs").rglob("summary.json"))
    assert len(summaries) == 1
    s = json.loads(summaries[0].read_text())
    assert s["status"] == "completed" and s["world_size"] == 2 and s["steps"] == 8
    assert {p.name for p in (summaries[0].parent / "ranks").glob("rank?.jsonl")} == {"rank0.jsonl", "rank1.jsonl"}


def test_busy_port_is_a_clear_error(tmp_path):
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        p = cli(f"output_root={tmp_path}", f"cluster.master_port={port}")
    assert p.returncode == 2 and "cluster.master_port" in p.stderr and "already in use" in p.stderr
