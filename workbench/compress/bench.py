"""Benchmark: every compressor on one model, side by side with ``compressor=none``, and the
compression-utility model's predicted vs measured iteration time.

    # ResNet-18 at CIFAR size, synthetic data, 4 CPU processes, 8 steps per compressor (minutes):
    python -m workbench.compress.bench model=resnet18
    python -m workbench.compress.bench model=vgg16 --nproc 4 --steps 8
    python -m workbench.compress.bench model=small_cnn data=digits --compressors none topk powersgd
    python -m workbench.compress.bench --from-runs experiments/bench_compression/runs/<date>/*   # table only

Positional arguments are Hydra overrides applied to every run (``cluster=local_gpu``, ``data=…``).
Prints a Markdown table; the runs stay under ``--output-root`` for dashboards.
Per compressor: ratio (dense / payload bytes per step), payload and sent bytes per step (rank 0, what
the meter counts for its collectives),
encode + decode ms per step, measured step ms (median after the warm-up steps), samples/s relative to
``compressor=none``, the model's predicted step ms and its error, and the crossover bandwidth below
which the model says compression pays on this cluster's latency (— when it never pays).
"""
from __future__ import annotations

import argparse
import math
import statistics

ALL = ["none", "fp16", "bf16", "topk", "mstopk", "randomk", "signsgd", "efsignsgd", "qsgd", "powersgd"]

# Per-compressor settings of the benchmark: PowerSGD compresses from step 2 so that the profile
# (from step profile_skip on) sees only compressed steps.
SETTINGS = {"powersgd": ["compressor.start_iter=2"], "topk": ["compressor.k=0.01"], "mstopk": ["compressor.k=0.01"],
            "randomk": ["compressor.k=0.01"]}


def run_all(overrides, compressors, nproc: int, steps: int, output_root: str):
    import workbench
    runs = {}
    for name in compressors:
        ov = ["trainer=compressed", f"compressor={name}", f"cluster.nproc={nproc}", f"trainer.max_steps={steps}",
              "trainer.profile_skip=3", "trainer.eval_every=100000", "trainer.progress=false", f"output_root={output_root}",
              "optim.lr=0.01", "name=${compressor.name}_${model.name}_${data.name}", *SETTINGS.get(name, []), *overrides]
        if name == "none":
            ov.append("trainer.calibrate_steps=3")
        print(f"running {name} ...", flush=True)
        runs[name] = workbench.launch(workbench.compose(ov), progress=False)
    return runs


def table(runs) -> str:
    from workbench.perfmodel.compression import GBPS, calibrate, predict
    base = runs["none"]
    work, net = calibrate(base.path)
    rows = {r["compressor"]: r for r in predict(base.path, list(runs.values()))}
    t_none = rows["none"]["measured_ms"]
    head = ("| compressor | collective | ratio | payload KiB/step | sent KiB/step | enc+dec ms | step ms | samples/s vs none "
            "| predicted ms | error | crossover Gbps |")
    lines = [head, "|" + "|".join(["---"] * (head.count("|") - 1)) + "|"]
    for name, run in runs.items():
        r = rows[name]
        s = run.summary
        payload = sum(b["payload_bytes"] for b in s["compression"]["buckets"])
        skip = s["compression"]["profile_skip"]
        sent = statistics.median(r["bytes_sent"] for r in run.records() if r.get("kind") == "train" and r["step"] > skip)
        cross = r["crossover_gbps"]
        cross_s = "—" if cross is None else ("∞" if math.isinf(cross) else f"{cross:.3g}")
        lines.append(f"| {name} | {r['collective']} | {r['ratio']:.1f} | {payload / 1024:.0f} | {sent / 1024:.0f} "
                     f"| {r['encode_decode_ms']:.1f} | {r['measured_ms']:.0f} | {t_none / r['measured_ms']:.2f} "
                     f"| {r['predicted_ms']:.0f} | {100 * r['error']:+.0f} % | {cross_s} |")
    cal = (f"calibration (compressor=none): T_comp {1e3 * work.backward_s:.0f} ms, T_other {1e3 * work.other_s:.0f} ms, "
           f"λ {work.overlap:.2f}, {len(work.bucket_bytes)} buckets, {sum(work.bucket_bytes) / 2**20:.1f} MiB, p={work.workers}; "
           f"all-reduce {net.bandwidth / GBPS:.2f} Gbps, α {1e6 * net.latency:.0f} µs; all-gather "
           f"{net.of('allgather')[0] / GBPS:.2f} Gbps, α {1e6 * net.of('allgather')[1]:.0f} µs")
    return "\n".join(lines) + "\n\n" + cal


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m workbench.compress.bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("overrides", nargs="*", help="Hydra overrides for every run (default model=resnet18 data=synthetic)")
    ap.add_argument("--nproc", type=int, default=4)
    ap.add_argument("--steps", type=int, default=8, help="steps per run (the first 3 are warm-up)")
    ap.add_argument("--compressors", nargs="*", default=ALL)
    ap.add_argument("--output-root", default="experiments/bench_compression")
    ap.add_argument("--from-runs", nargs="*", metavar="RUN_DIR",
                    help="print the table of existing runs instead (one compressor=none run with calibration among them)")
    args = ap.parse_args(argv)
    if args.from_runs:
        from workbench.runs import Run
        found = {Run(d).summary["compression"]["compressor"]["name"]: Run(d) for d in args.from_runs}
        print(table({n: found[n] for n in ALL if n in found}))
        return
    overrides = ["data=synthetic", "data.num_samples=1024", "data.batch_size=16", *args.overrides]
    names = ["none"] + [c for c in args.compressors if c != "none"]
    print(table(run_all(overrides, names, args.nproc, args.steps, args.output_root)))


if __name__ == "__main__":
    main()
