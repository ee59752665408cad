"""Suite ``compression``: every compressor side by side with ``compressor=none`` on one model, and
the compression-utility model's predicted vs measured iteration time.

    python -m workbench.bench compression --write                      # ResNet-18 and VGG-16, CIFAR size, 4 processes (~40 min)
    python -m workbench.bench compression --models resnet18 --write    # ResNet-18 only (~8 min)
    python -m workbench.bench compression --models resnet18 --repeats 3 --write   # 3 interleaved rounds (~25 min)
    python -m workbench.bench compression --models small_cnn --nproc 2 --compressors none,topk,powersgd
    python -m workbench.bench compression --from-runs --write          # the tables again from the last runs (seconds)
    python -m workbench.bench compression --tiny                       # CI smoke: small_cnn, 2 processes
    python -m workbench.bench compression cluster=local_gpu            # positional: Hydra overrides for every run

Each compressor is one ``trainer=compressed`` run of ``--steps`` steps (batch 16 per rank,
CIFAR-size synthetic data; the digits for small_cnn/lenet5); the first 3 steps are warm-up and left
out (PowerSGD compresses from step 2, ``compressor.start_iter=2``); figures are rank 0's medians over
the rest. The ``compressor=none`` run also calibrates (``trainer.calibrate_steps=3``: backward
without communication; all-reduce and all-gather timed at 4 KiB, 1 MiB, 8 MiB; 16-bit all-reduces at
8 MiB of float32 elements), and ``workbench.perfmodel.compression`` predicts every compressor's step
from that calibration plus the compressor's own payload sizes and encode/decode time.

Columns: ratio = dense / payload bytes per step; payload = what rank 0 put into collectives; sent =
what the meter counts rank 0 sending (all-reduce 2(p−1)/p·n, all-gather (p−1)·n); enc+dec = encode +
decode per step; step = measured step; vs none = samples/s relative to ``compressor=none``;
predicted = the model's step (Agarwal et al.'s form), error = predicted / measured − 1; hook-overlap
= the same model with our hook's overlap of encoding and backward (``iteration_time(..., hook=True)``);
crossover = the bandwidth below which the (paper-form) model says the compressor beats
``compressor=none`` on this cluster (— never, ∞ always).
``--from-runs`` rebuilds the tables from ``<out>/compression-<model>-<N>p/index.json``, e.g. after
a change to the model.
"""
from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import workbench
from workbench.bench import report
from workbench.compress import COMPRESSORS
from workbench.config import validate

# Every registered compressor, the uncompressed baseline first; each runs with its bench_overrides
# (PowerSGD compresses from step 2, so that the profile, from step profile_skip on, sees only
# compressed steps; the sparsifiers keep 1 %).
ALL = ["none"] + [c for c in COMPRESSORS if c != "none"]
COLS = ["compressor", "collective", "ratio", "payload KiB/step", "sent KiB/step", "enc+dec ms", "step ms",
        "vs none", "predicted ms", "error", "hook-overlap ms", "error (hook)", "crossover Gbps", "status"]


def configs(model: str, nproc: int, steps: int, compressors, overrides, output_root: Path) -> dict:
    base = ["trainer=compressed", f"model={model}", *report.data_overrides(model, 16, 1024), f"cluster.nproc={nproc}",
            f"trainer.max_steps={steps}", "trainer.profile_skip=3", "trainer.eval_every=100000",
            "trainer.progress=false", "cluster.timeout_s=900", "optim.lr=0.01", f"output_root={output_root}",
            "name=${compressor.name}_${model.name}_${data.name}"]
    return {name: workbench.compose(base + [f"compressor={name}", *COMPRESSORS[name].bench_overrides, *overrides]
                                    + (["trainer.calibrate_steps=3"] if name == "none" else []))
            for name in compressors}


def _completed(run) -> bool:
    return bool(run.summary) and run.summary.get("status") == "completed"


def _median_cross(values):
    """The median crossover; ``None`` (never pays) sorts lowest, ``inf`` (always pays) highest."""
    order = sorted(values, key=lambda v: -1.0 if v is None else v)
    return order[len(order) // 2] if order else None


def rows_of(runs: dict) -> tuple:
    """The table rows from ``{compressor: [run of round 1, round 2, ...]}``, and the calibration as
    one line (``None`` without a completed baseline). Each round is predicted from its own baseline;
    a row shows the median over rounds of the measured and the predicted step, and the spread of
    the rounds' measured steps."""
    from workbench.perfmodel.compression import GBPS, calibrate, predict
    rounds = max(len(v) for v in runs.values())
    preds = []  # per round: {compressor: predict() row}
    for i in range(rounds):
        got = {n: v[i] for n, v in runs.items() if i < len(v) and _completed(v[i])}
        preds.append({r["compressor"]: r for r in predict(got["none"], list(got.values()))} if "none" in got else {})
    med = statistics.median

    def steady(run):
        return [r for r in run.records() if r.get("kind") == "train" and r["step"] > run.summary["compression"]["profile_skip"]]

    # the measured step: median over rounds of each round's median (what each round's prediction is for)
    step_ms = {n: med(med(r["step_time"] for r in steady(run)) * 1e3 for run in v if _completed(run))
               for n, v in runs.items() if any(_completed(run) for run in v)}
    t_none = step_ms.get("none")
    rows = []
    for name, v in runs.items():
        done = [run for run in v if _completed(run)]
        if not done:
            rows.append({"compressor": name, "status": (v[0].summary or {}).get("status", "failed")})
            continue
        c = done[0].summary["compression"]
        payload = sum(b["payload_bytes"] for b in c["buckets"])
        dense = sum(b["dense_bytes"] for b in c["buckets"])
        enc = med(sum(b["encode_s"] + b["decode_s"] for b in run.summary["compression"]["buckets"]) for run in done)
        step = step_ms[name]
        row = {"compressor": name, "collective": c["collective"], "ratio": round(dense / payload, 1) if payload else None,
               "payload KiB/step": round(payload / 1024), "sent KiB/step": round(med(r["bytes_sent"] for r in steady(done[0])) / 1024),
               "enc+dec ms": round(1e3 * enc, 1), "step ms": round(step), "vs none": round(t_none / step, 2) if t_none else None,
               "status": "completed" if len(done) == len(v) else f"{len(done)} of {len(v)} completed"}
        if rounds > 1:
            per = [p[name]["measured_ms"] for p in preds if name in p]
            row["spread"] = f"{100 * (max(per) - min(per)) / step:.0f} %" if per else None
        ps = [p[name] for p in preds if name in p]
        if ps:
            pred, hook = med(p["predicted_ms"] for p in ps), med(p["predicted_hook_ms"] for p in ps)
            cross = _median_cross([p["crossover_gbps"] for p in ps])
            row.update({"predicted ms": round(pred), "error": f"{100 * (pred / step - 1):+.0f} %",
                        "hook-overlap ms": round(hook), "error (hook)": f"{100 * (hook / step - 1):+.0f} %",
                        "crossover Gbps": "—" if cross is None else "∞" if math.isinf(cross) else f"{cross:.3g}"})
        rows.append(row)
    cal = None
    bases = [run for run in runs.get("none", []) if _completed(run)]
    if bases:
        work, net = calibrate(bases[0])
        bw_ag, lat_ag = net.of("allgather")
        extra = ", ".join(f"{d} +{1e9 * x:.2f} ns/B" for d, x in sorted(net.allreduce_extra.items()))
        cal = (f"Calibration (compressor=none{', round 1' if rounds > 1 else ''}): T_comp {1e3 * work.backward_s:.0f} ms, "
               f"T_other {1e3 * work.other_s:.0f} ms, "
               f"λ {work.overlap:.2f}, {len(work.bucket_bytes)} buckets, {sum(work.bucket_bytes) / 2**20:.1f} MiB, "
               f"p = {work.workers}; all-reduce {net.bandwidth / GBPS:.2f} Gbps, α {1e6 * net.latency:.0f} µs"
               + (f" (16-bit sums: {extra})" if extra else "")
               + f"; all-gather {bw_ag / GBPS:.2f} Gbps, α {1e6 * lat_ag:.0f} µs.")
    return rows, cal


def figure(rows, model):
    import plotly.graph_objects as go
    ok = [r for r in rows if r.get("predicted ms") is not None]
    fig = go.Figure()
    fig.add_bar(name="measured", x=[r["compressor"] for r in ok], y=[r["step ms"] for r in ok])
    fig.add_bar(name="predicted", x=[r["compressor"] for r in ok], y=[r["predicted ms"] for r in ok])
    fig.add_bar(name="predicted (hook overlap)", x=[r["compressor"] for r in ok], y=[r["hook-overlap ms"] for r in ok])
    fig.update_layout(title=f"Compressed SGD, {model}: step time measured vs the utility model",
                      yaxis_title="ms per step", barmode="group")
    return fig


def main(argv=None) -> None:
    argv = list(argv) if argv is not None else []
    p = report.parser("compression", __doc__, "small_cnn on the digits, 2 processes, 5 compressors, 6 steps")
    p.add_argument("overrides", nargs="*", help="Hydra overrides for every run")
    p.add_argument("--models", default="resnet18,vgg16")
    p.add_argument("--nproc", type=int, default=4)
    p.add_argument("--steps", type=int, default=8, help="steps per run (the first 3 are warm-up)")
    p.add_argument("--compressors", default=",".join(ALL))
    p.add_argument("--repeats", type=int, default=1,
                   help="rounds over all compressors, interleaved so that a change of the machine's load "
                        "touches every compressor alike; the table shows medians and the rounds' spread")
    p.add_argument("--from-runs", action="store_true",
                   help="no new runs: rebuild the tables from <out>/compression-<model>-<N>p/index.json")
    a = p.parse_args(argv)
    if a.tiny:
        a.models, a.nproc, a.steps, a.compressors = "small_cnn", 2, 6, "none,fp16,topk,signsgd,powersgd"
    names = ["none"] + [c for c in a.compressors.split(",") if c != "none"]
    unknown = [c for c in names if c not in ALL]
    if unknown:
        raise SystemExit(f"error: unknown compressor(s) {', '.join(unknown)}; choose from {', '.join(ALL)}")
    plan = {}
    for model in a.models.split(","):
        out = Path(a.out) / f"compression-{model}-{a.nproc}p"
        plan[model] = (out, None if a.from_runs else configs(model, a.nproc, a.steps, names, a.overrides, out))
        for cfg in (plan[model][1] or {}).values():
            validate(cfg)  # every run's config, before the first one starts
    from workbench.runs import Run
    for model, (out, cfgs) in plan.items():
        index = out / "index.json"
        if a.from_runs:
            if not index.exists():
                raise SystemExit(f"error: --from-runs: no {index}; run the suite for {model} first")
            saved = json.loads(index.read_text())
            runs = {n: [Run(x) for x in ([d] if isinstance(d, str) else d)] for n, d in saved["runs"].items()}
            command = saved["command"]
        else:
            runs, command = {n: [] for n in cfgs}, ("python -m workbench.bench compression " + " ".join(argv)).strip()
            for i in range(a.repeats):
                for name, cfg in cfgs.items():
                    print(f"{model}: {name}" + (f" (round {i + 1} of {a.repeats})" if a.repeats > 1 else "") + " ...",
                          flush=True)
                    runs[name].append(workbench.launch(cfg, progress=False, check=False))
                    out.mkdir(parents=True, exist_ok=True)
                    index.write_text(json.dumps({"command": command, "runs": {
                        n: [str(r.path) for r in v] for n, v in runs.items() if v}}, indent=2))
        rows, cal = rows_of(runs)
        rounds = max(len(v) for v in runs.values())
        cols = COLS if rounds == 1 else COLS[:7] + ["spread"] + COLS[7:]
        t = report.Table(f"compression_{model}_{a.nproc}", f"{model}, {a.nproc} processes, batch 16 per rank, "
                         f"{a.steps} steps per compressor (medians after 3 warm-up steps)"
                         + (f", {rounds} interleaved rounds (spread: max − min of the rounds' medians)" if rounds > 1 else ""),
                         rows, cols)
        base = lambda r: r.get("compressor") == "none"  # the calibration row is exact by construction
        fit = f"Model vs measured: {report.within(rows, 'error', skip=base)}; {report.within(rows, 'error (hook)', skip=base)}."
        path = report.write(out.name, f"compression: {model}, N={a.nproc}", command, [t], [figure(rows, model)],
                            notes=f"{fit}\n\n" + (cal or "No calibration: the compressor=none run did not complete."),
                            out_root=a.out, benchmarks_md=report.ROOT / "BENCHMARKS.md" if a.write else None)
        print(f"\n{t.markdown()}\n\n{cal or ''}\nreport: {path / 'report.html'}", flush=True)


if __name__ == "__main__":
    main()
