"""Parameter-server benchmarks: prints markdown tables and writes them as CSV.

    python -m workbench.ps.bench bytes      # bytes per worker per step: PS vs all-reduce, measured vs analytic
    python -m workbench.ps.bench time       # time to a target accuracy, with and without a straggler
    python -m workbench.ps.bench all --out experiments/bench/ps

``bytes``: ``trainer=ps mode=sync`` and ``trainer=sync`` for a few steps on each model; measured is
rank 0's metered traffic per step (sent + received, training categories only), analytic is
2·M for the PS (push M, pull M) and 2·2(N−1)/N·M for the ring all-reduce (sent + received), M the
model's bytes and N the workers.

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


def _row_bytes(run, label, workers):
    s = run.summary
    steps = max(1, s["steps"])
    tot = json.loads((run.path / "ranks" / "rank0_totals.json").read_text())["comm"]
    train = {k: v for k, v in tot.items() if k not in ("eval", "ps_final")}
    measured = sum(v["sent"] + v["recv"] for k, v in train.items() if k != "ps_control") / steps
    control = sum(v["sent"] + v["recv"] for k, v in train.items() if k == "ps_control") / steps
    return {"run": label, "workers": workers, "status": s["status"], "measured_B_per_step": measured,
            "control_B_per_step": control}


def bench_bytes(out: Path, models=("small_cnn", "resnet18")):
    rows = []
    for model in models:
        data = ["data=digits"] if model == "small_cnn" else ["data=synthetic", "data.num_samples=64", "data.batch_size=4"]
        for label, ov, nproc in [("ps sync", ["trainer=ps", "trainer.mode=sync"], 4), ("sync all-reduce", ["trainer=sync"], 3)]:
            run = _launch(ov + data + [f"model={model}", f"cluster.nproc={nproc}", "trainer.max_steps=3",
                                       "trainer.eval_every=1000"], out)
            import torch
            M = sum(v.numel() * v.element_size() for v in torch.load(run.path / "model.pt", weights_only=True).values())
            n = 3
            analytic = 2 * M if label == "ps sync" else 2 * (2 * (n - 1) * M // n)
            r = _row_bytes(run, label, n)
            r.update(model=model, model_bytes=M, analytic_B_per_step=analytic)
            rows.append(r)
    cols = ["model", "run", "workers", "model_bytes", "measured_B_per_step", "analytic_B_per_step", "control_B_per_step", "status"]
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
                         "updates_per_s": round(ps["updates_per_s"], 1) if ps.get("updates_per_s") else None,
                         "mean_tau": round(ps["staleness_mean"], 2) if ps else None,
                         "max_tau": ps.get("staleness_max") if ps else None,
                         "tau_hist": " ".join(map(str, ps.get("staleness_hist", []))) if ps else ""})
    cols = ["protocol", "straggler", "time_to_target_s", "steps_to_target", "final_acc", "wall_s", "updates_per_s",
            "mean_tau", "max_tau", "tau_hist", "status"]
    return cols, rows


def table(cols, rows) -> str:
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        lines.append("| " + " | ".join("" if r.get(c) is None else (f"{r[c]:,.0f}" if isinstance(r.get(c), float) and c.endswith("B_per_step") else str(r[c])) for c in cols) + " |")
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
    a = p.parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    jobs = []
    if a.what in ("bytes", "all"):
        jobs.append(("bytes", lambda: bench_bytes(out, tuple(a.models.split(",")))))
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
