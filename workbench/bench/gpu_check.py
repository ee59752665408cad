"""GPU check: every registered trainer for a few steps on this machine's GPUs, one line each.

    make gpu-check                       # = python -m workbench.bench.gpu_check
    python -m workbench.bench.gpu_check --steps 20 --trainers sync ps

Two settings per trainer: world size 1 on one GPU with NCCL (or the fewest ranks the trainer runs
on: a parameter server's server rank, Stanza's FC rank), and 3 ranks sharing one GPU through gloo.
Prints PASS/FAIL with samples/s (SKIP where the ranks outnumber the GPUs under NCCL, which takes a
GPU per rank) and writes the table to experiments/bench/gpu_check.md; exits 1 if anything failed.
Without CUDA it says so and exits 0, unless --cpu asks for the same matrix on CPU ranks (a smoke
test of the script).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path


def settings(cpu: bool):
    if cpu:
        return [("cpu, gloo", 1, ["cluster.device=cpu", "cluster.backend=gloo"]),
                ("cpu, gloo", 3, ["cluster.device=cpu", "cluster.backend=gloo"])]
    return [("1 GPU, nccl", 1, ["cluster.device=cuda", "cluster.backend=nccl"]),
            ("sharing 1 GPU, gloo", 3, ["cluster.device=cuda", "cluster.backend=gloo"])]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--trainers", nargs="*", help="default: every registered trainer")
    p.add_argument("--cpu", action="store_true", help="run the matrix on CPU ranks (no GPU needed)")
    p.add_argument("--model", default="small_cnn")
    a = p.parse_args(argv)

    import torch

    import workbench
    from workbench.core import ConfigError
    from workbench.dist import check_gpus_for_nccl
    from workbench.spec import spec_of
    from workbench.trainers import TRAINERS
    if not a.cpu and not torch.cuda.is_available():
        print("gpu-check: no CUDA device on this machine; nothing to check (use --cpu for a CPU smoke run)")
        return 0
    gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if not a.cpu else []
    names = a.trainers or list(TRAINERS)
    rows, failed = [], 0
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            for where, nproc, extra in settings(a.cpu):
                t0 = time.time()
                overrides = [f"trainer={name}", f"model={a.model}", f"cluster.nproc={nproc}",
                             f"trainer.max_steps={a.steps}", f"trainer.eval_every={a.steps}", f"output_root={tmp}",
                             "trainer.progress=false", "cluster.timeout_s=120", *extra,
                             *spec_of(name).smoke_overrides(nproc)]
                cfg = workbench.compose(overrides)
                n = cfg.cluster.nproc
                label = f"{n} rank{'s' if n > 1 else ''}, {where}"
                try:  # e.g. a parameter server's server rank on one GPU: the starter would refuse it
                    check_gpus_for_nccl(cfg.cluster)
                except ConfigError as e:
                    rows.append((name, label, "SKIP", 0.0, 0.0, str(e)))
                    print(f"SKIP  {name:<11} {label:<28} {e}", flush=True)
                    continue
                try:
                    run = workbench.launch(cfg, progress=False)
                    s = run.summary
                    rows.append((name, label, "PASS", s.get("samples_per_s") or 0.0, time.time() - t0, ""))
                except Exception as e:  # a failing trainer must not stop the check of the others
                    failed += 1
                    rows.append((name, label, "FAIL", 0.0, time.time() - t0, " ".join(str(e).split())[:160]))
                r = rows[-1]
                print(f"{r[2]}  {r[0]:<11} {r[1]:<28} {r[3]:>10,.0f} samples/s  {r[4]:5.1f} s  {r[5]}", flush=True)
    table = ["| trainer | setting | result | samples/s | seconds | error |", "|---|---|---|---|---|---|"]
    table += [f"| {r[0]} | {r[1]} | {r[2]} | {r[3]:,.0f} | {r[4]:.1f} | {r[5]} |" for r in rows]
    out = Path("experiments/bench")
    out.mkdir(parents=True, exist_ok=True)
    host = (f"GPUs: {', '.join(gpus) or 'none (CPU smoke run)'}; torch {torch.__version__}; "
            f"{os.cpu_count()} CPU cores; {a.steps} steps per run, model {a.model}")
    (out / "gpu_check.md").write_text(host + "\n\n" + "\n".join(table) + "\n")
    ran = sum(r[2] != "SKIP" for r in rows)
    print(f"gpu-check: {ran - failed}/{ran} passed ({len(rows) - ran} skipped); table in {out / 'gpu_check.md'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
