"""Parameter-server benchmarks: prints markdown tables and writes them as CSV.

    python -m workbench.ps.bench bytes      # bytes per worker per step: PS vs all-reduce, measured vs analytic
    python -m workbench.ps.bench time       # time to a target accuracy, with and without a straggler
    python -m workbench.ps.bench all --out experiments/bench/ps
    python -m workbench.ps.bench bytes --models vgg16 --workers 2   # VGG-16 on 32x32 synthetic: ~8 GB of RAM

``bytes``: ``trainer=ps mode=sync`` (N workers + 1 server) and ``trainer=sync`` (N ranks) for 3 steps
on each model; measured is worker rank 0's metered traffic per training step (from
``ranks/rank0.jsonl``), sent and received apart; analytic is M each way for the PS (push M, pull M:
2·M in all) and 2(N−1)/N·M each way for the ring all-reduce, M the model's bytes. The PS headers
(``ps_control``, 32 bytes per server each way) are shown apart.

``time``: λ = 3 workers + 1 server on the digits (4 processes), the protocols of ``trainer=ps`` and
``trainer=staleness`` next to ``trainer=sync``; each run evaluates every 10 steps and reports the
wall time (from the first step, evaluation included) of the first evaluation at or above the target,
the server's updates/s, mean and max staleness. The straggler is worker rank 2, sleeping
``--delay`` seconds after each of its steps (``cluster.straggler_ranks``/``straggler_delay_s``).
Timings are from a shared machine: compare rows of one table, not tables of different machines.
"""
from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

import workbench

COMMON = ["trainer.progress=false", "cluster.timeout_s=120"]

PROTOCOLS = [  # label, overrides (besides cluster.nproc)
    ("sync (all-reduce, 3 ranks)", ["trainer=sync"]),
    ("ps sync = hardsync", ["trainer=ps", "trainer.mode=sync"]),
    ("1-softsync (c=3)", ["trainer=staleness", "trainer.n=1"]),
    ("3-softsync = async (c=1)", ["trainer=ps", "trainer.mode=async"]),
    ("3-softsync, lr/tau", ["trainer=staleness", "trainer.n=3", "trainer.lr_modulation=per_gradient"]),
    ("3-softsync, lr/<tau>", ["trainer=staleness", "trainer.n=3", "trainer.lr_modulation=mean"]),
    ("3-softsync, s=1 (block)", ["trainer=staleness", "trainer.n=3", "trainer.max_staleness=1"]),
]


def _launch(overrides, out: Path):
    cfg = workbench.compose(COMMON + [f"output_root={out}"] + overrides)
    return workbench.launch(cfg, progress=False, check=False)


def _per_step(run, rank=0):
    """Mean bytes per training step of one rank, from its ranks/rank<r>.jsonl step records:
    (payload sent, payload received, control sent + received)."""
    recs = [json.loads(l) for l in (run.path / "ranks" / f"rank{rank}.jsonl").read_text().splitlines()]
    recs = [r for r in recs if "step" in r and r.get("role") != "server"]
    n = max(1, len(recs))
    sent = sum(c["sent"] for r in recs for k, c in r["comm"].items() if k != "ps_control") / n
    recv = sum(c["recv"] for r in recs for k, c in r["comm"].items() if k != "ps_control") / n
    ctrl = sum(c["sent"] + c["recv"] for r in recs for k, c in r["comm"].items() if k == "ps_control") / n
    return sent, recv, ctrl


def _param_bytes(run) -> int:
    """The bytes of the model's parameters (what the PS and the all-reduce move; not BN buffers)."""
    from workbench import data as data_mod
    from workbench.models import build_model
    cfg = run.config
    model = build_model(cfg, data_mod.DATASETS[cfg.data.name].spec(cfg.data))
    return sum(p.numel() * p.element_size() for p in model.parameters())


def bench_bytes(out: Path, models=("small_cnn", "resnet18"), workers: int = 3):
    rows = []
    for model in models:
        data = ["data=digits"] if model in ("small_cnn", "lenet5") else \
            ["data=synthetic", "data.num_samples=64", "data.batch_size=2", "model.dropout=0"]
        for label, ov, nproc in [("ps sync (1 server)", ["trainer=ps", "trainer.mode=sync"], workers + 1),
                                 ("sync all-reduce", ["trainer=sync"], workers)]:
            run = _launch(ov + data + [f"model={model}", f"cluster.nproc={nproc}", "trainer.max_steps=3",
                                       "trainer.eval_every=1000"], out)
            M = _param_bytes(run)
            per_dir = M if label.startswith("ps") else 2 * (workers - 1) * M // workers
            sent, recv, ctrl = _per_step(run)
            rows.append({"model": model, "run": label, "workers": workers, "model_bytes": M,
                         "sent_B_per_step": sent, "analytic_sent_B_per_step": per_dir,
                         "recv_B_per_step": recv, "analytic_recv_B_per_step": per_dir,
                         "control_B_per_step": ctrl, "status": run.summary["status"]})
    cols = ["model", "run", "workers", "model_bytes", "sent_B_per_step", "analytic_sent_B_per_step",
            "recv_B_per_step", "analytic_recv_B_per_step", "control_B_per_step", "status"]
    return cols, rows


def bench_time(out: Path, target: float, delay: float, max_steps: int):
    rows = []
    for straggler in (False, True):
        for label, ov in PROTOCOLS:
            nproc = 3 if ov[0] == "trainer=sync" else 4
            extra = [f"cluster.straggler_ranks=[2]", f"cluster.straggler_delay_s={delay}"] if straggler else []
            run = _launch(ov + [f"cluster.nproc={nproc}", f"trainer.max_steps={max_steps}", "trainer.eval_every=10",
                                "data.batch_size=16"] + extra, out)
            s = run.summary
            recs = run.records()
            hit = next((r for r in recs if r.get("kind") == "eval" and r["test_accuracy"] >= target), None)
            ps = s.get("ps", {})
            rows.append({"protocol": label, "straggler": f"rank 2 +{delay}s/step" if straggler else "none",
                         "status": s["status"], "time_to_target_s": round(hit["time"], 2) if hit else None,
                         "steps_to_target": hit["step"] if hit else None,
                         "final_acc": round(s.get("final_test_accuracy") or 0, 4), "wall_s": round(s.get("train_time_s", 0), 2),
                         # every gradient any worker computed (PS), or every step's global batch (sync), per second of rank 0's loop
                         "samples_per_s": round((ps["gradients"] * s["batch_per_worker"] if ps else s["samples"]) / s["train_time_s"])
                         if s.get("train_time_s") else None,
                         "updates_per_s": round(ps["updates_per_s"], 1) if ps.get("updates_per_s") else None,
                         "mean_tau": round(ps["staleness_mean"], 2) if ps else None,
                         "max_tau": ps.get("staleness_max") if ps else None,
                         "tau_hist": " ".join(map(str, ps.get("staleness_hist", []))) if ps else ""})
    cols = ["protocol", "straggler", "time_to_target_s", "steps_to_target", "final_acc", "wall_s", "samples_per_s", "updates_per_s",
            "mean_tau", "max_tau", "tau_hist", "status"]
    return cols, rows


def table(cols, rows) -> str:
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        lines.append("| " + " | ".join("" if r.get(c) is None else (f"{r[c]:,.0f}" if c.endswith("bytes") or c.endswith("B_per_step") else str(r[c])) for c in cols) + " |")
    return "\n".join(lines)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m workbench.ps.bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", choices=["bytes", "time", "all"])
    p.add_argument("--out", default="experiments/bench/ps", help="run directories and CSV files go here")
    p.add_argument("--target", type=float, default=0.90, help="target test accuracy")
    p.add_argument("--delay", type=float, default=0.05, help="straggler's extra seconds per step")
    p.add_argument("--max-steps", type=int, default=300)
    p.add_argument("--models", default="small_cnn,resnet18", help="models for the bytes table")
    p.add_argument("--workers", type=int, default=3, help="workers of the bytes runs (the PS adds one server)")
    a = p.parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    jobs = []
    if a.what in ("bytes", "all"):
        jobs.append(("bytes", lambda: bench_bytes(out, tuple(a.models.split(",")), a.workers)))
    if a.what in ("time", "all"):
        jobs.append(("time", lambda: bench_time(out, a.target, a.delay, a.max_steps)))
    for name, job in jobs:
        cols, rows = job()
        with open(out / f"{name}.csv", "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=cols, extrasaction="ignore")
            w.writeheader()
            w.writerows(rows)
        print(f"\n## {name}\n\n{table(cols, rows)}\n", flush=True)


if __name__ == "__main__":
    main()
