"""Suite ``compression``: every compressor side by side with ``compressor=none`` on one model, and
the planner's predicted vs measured step time.

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
the rest. Before each round's runs the round is profiled (:mod:`workbench.perfmodel.profile`, the one
profiler, with the codecs and hook loops of exactly these compressor settings; kept as
``<out>/compression-<model>-<N>p/profile-r<k>.json``), and the planner's model
(:func:`workbench.perfmodel.paradigms.compressed`, what ``python -m workbench.plan`` ranks) predicts
each run of that round on loopback.

Columns: ratio = dense / payload bytes per step; payload = what rank 0 put into collectives; sent =
what the meter counts rank 0 sending (all-reduce 2(p−1)/p·n, all-gather (p−1)·n); enc+dec = encode +
decode per step; step = measured step; vs none = samples/s relative to ``compressor=none``;
predicted = the planner's step (the median over the rounds, each from its own profile), error =
predicted / measured − 1 (the median of the rounds' errors); crossover = the link rate below which
the model says the compressor beats ``sync`` with one rank per host (— never, ∞ always).
``--from-runs`` rebuilds the tables from ``<out>/compression-<model>-<N>p/index.json`` and the
rounds' stored profiles, e.g. after a change to the model.
"""
from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import workbench
from workbench.bench import suite
from workbench.compress import COMPRESSORS
from workbench.config import validate
from workbench.perfmodel.profile import Profile

# Every registered compressor, the uncompressed baseline first; each runs with its bench_overrides
# (PowerSGD compresses from step 2, so that the profile, from step profile_skip on, sees only
# compressed steps; the sparsifiers keep 1 %).
ALL = ["none"] + [c for c in COMPRESSORS if c != "none"]
COLS = ["compressor", "collective", "ratio", "payload KiB/step", "sent KiB/step", "enc+dec ms", "step ms",
        "vs none", "predicted ms", "error", "crossover Gbps", "status"]


def configs(model: str, nproc: int, steps: int, compressors, overrides, output_root: Path) -> dict:
    base = ["trainer=compressed", f"model={model}", *suite.data_overrides(model, 16, 1024), f"cluster.nproc={nproc}",
            f"trainer.max_steps={steps}", "trainer.profile_skip=3", "trainer.eval_every=100000",
            "trainer.progress=false", "cluster.timeout_s=900", "optim.lr=0.01", f"output_root={output_root}",
            "name=${compressor.name}_${model.name}_${data.name}"]
    return {name: workbench.compose(base + [f"compressor={name}", *COMPRESSORS[name].bench_overrides, *overrides])
            for name in compressors}


def profiled(cfgs: dict, nproc: int, path: Path):
    """This host's profile for the suite's runs, measured now (the planner's profiler, with the codecs
    and hook loops of exactly these compressor settings, ``none`` included) and kept at ``path``."""
    from workbench.compress.codec_timing import measure_codecs
    from workbench.perfmodel.profile import measure
    from workbench.plan import profile_loops
    comps = {n: c.compressor for n, c in cfgs.items()}
    print(f"profiling {cfgs['none'].model.name} with {nproc} ranks ...", flush=True)
    prof = measure(cfgs["none"], nproc, comps, codec_fn=measure_codecs, loop_fns=profile_loops(cfgs["none"], comps))
    prof.save(path)
    return prof


def predictions(prof, cfgs: dict, nproc: int) -> dict:
    """The planner's row (``plan.predict_rows``) of each run on loopback, by compressor."""
    from workbench.plan import LOOPBACK, Variant, predict_rows
    from workbench.trainers import SPECS
    vs = [Variant("compressed", [], cfg, name, *SPECS["compressed"].perf_model(cfg)) for name, cfg in cfgs.items()]
    return {r["paradigm"]: r for r in predict_rows(prof, {nproc: vs}, [LOOPBACK], 5e-5)}


def _completed(run) -> bool:
    return bool(run.summary) and run.summary.get("status") == "completed"


def _median_cross(values):
    """The median crossover; ``None`` (never pays) sorts lowest, ``inf`` (always pays) highest."""
    order = sorted(values, key=lambda v: -1.0 if v is None else v)
    return order[len(order) // 2] if order else None


def rows_of(runs: dict, profiles: list, cfgs: dict) -> list:
    """The table rows from ``{compressor: [run of round 1, round 2, ...]}`` and each round's profile.
    Each round is predicted from its own profile; a row shows the median over rounds of the measured
    and the predicted step, the median of the rounds' errors, and the spread of the rounds' measured
    steps."""
    med = statistics.median
    rounds = max(len(v) for v in runs.values())
    nproc = next(iter(cfgs.values())).cluster.nproc
    preds = [predictions(p, cfgs, nproc) for p in profiles]

    def steady(run):
        return [r for r in run.records() if r.get("kind") == "train" and r["step"] > run.summary["compression"]["profile_skip"]]

    # each completed run's median step, read once (what its round's prediction is for)
    step_s = {id(run): med(r["step_time"] for r in steady(run)) for v in runs.values() for run in v if _completed(run)}
    # the measured step: median over rounds of each round's median
    step_ms = {n: med(step_s[id(run)] * 1e3 for run in v if _completed(run))
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
        pairs = [(preds[i][name], step_s[id(run)]) for i, run in enumerate(v)
                 if i < len(preds) and name in preds[i] and _completed(run)]
        if rounds > 1 and pairs:
            per = [1e3 * m for _, m in pairs]
            row["spread"] = f"{100 * (max(per) - min(per)) / step:.0f} %"
        if pairs:
            cross = _median_cross([p["crossover_bps"] for p, _ in pairs]) if name != "none" else None
            row.update({"predicted ms": round(med(1e3 * p["predicted_step_s"] for p, _ in pairs)),
                        "error": f"{100 * med(p['predicted_step_s'] / m - 1 for p, m in pairs):+.0f} %",
                        "crossover Gbps": "" if name == "none" else "—" if cross is None
                        else "∞" if math.isinf(cross) else f"{cross / 1e9:.3g}"})
        rows.append(row)
    return rows


def figure(rows, model):
    import plotly.graph_objects as go
    ok = [r for r in rows if r.get("predicted ms") is not None]
    fig = go.Figure()
    fig.add_bar(name="measured", x=[r["compressor"] for r in ok], y=[r["step ms"] for r in ok])
    fig.add_bar(name="predicted", x=[r["compressor"] for r in ok], y=[r["predicted ms"] for r in ok])
    fig.update_layout(title=f"Compressed SGD, {model}: step time measured vs the planner's model",
                      yaxis_title="ms per step", barmode="group")
    return fig


def main(argv=None) -> None:
    argv = list(argv) if argv is not None else []
    p = suite.parser("compression", __doc__, "small_cnn on the digits, 2 processes, 4 compressors, 6 steps")
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
        a.models, a.nproc, a.steps, a.compressors = "small_cnn", 2, 6, "none,fp16,topk,powersgd"
    names = ["none"] + [c for c in a.compressors.split(",") if c != "none"]
    unknown = [c for c in names if c not in ALL]
    if unknown:
        raise SystemExit(f"error: unknown compressor(s) {', '.join(unknown)}; choose from {', '.join(ALL)}")
    plan = {}
    for model in a.models.split(","):
        out = Path(a.out) / f"compression-{model}-{a.nproc}p"
        plan[model] = (out, configs(model, a.nproc, a.steps, names, a.overrides, out))
        for cfg in plan[model][1].values():
            validate(cfg)  # every run's config, before the first one starts
    from workbench.runs.handle import Run
    for model, (out, cfgs) in plan.items():
        index = out / "index.json"
        if a.from_runs:
            if not index.exists():
                raise SystemExit(f"error: --from-runs: no {index}; run the suite for {model} first")
            saved = json.loads(index.read_text())
            runs = {n: [Run(x) for x in ([d] if isinstance(d, str) else d)] for n, d in saved["runs"].items()}
            cfgs = {n: c for n, c in cfgs.items() if n in runs}
            command = saved["command"]
            if not saved.get("profiles"):
                raise SystemExit(f"error: --from-runs: {index} holds runs from before the suite profiled its rounds; "
                                 f"run the suite for {model} again")
            profiles = [Profile.load(x) for x in saved["profiles"]]
        else:
            runs, command = {n: [] for n in cfgs}, ("python -m workbench.bench compression " + " ".join(argv)).strip()
            profiles = []
            out.mkdir(parents=True, exist_ok=True)
            for i in range(a.repeats):
                # each round after its own profile: this host's speed drifts within the hour, and a
                # prediction is compared with the runs of the same minutes (as the planner suite does)
                profiles.append(profiled(cfgs, a.nproc, out / f"profile-r{i + 1}.json"))
                for j, (name, cfg) in enumerate(cfgs.items(), i * len(cfgs) + 1):
                    print(f"compression {j}/{a.repeats * len(cfgs)}: {model} {name}"
                          + (f" (round {i + 1} of {a.repeats})" if a.repeats > 1 else "") + " ...", flush=True)
                    runs[name].append(workbench.launch(cfg, progress=False, check=False))
                    index.write_text(json.dumps({"command": command, "profiles": [
                        str(out / f"profile-r{k + 1}.json") for k in range(len(profiles))], "runs": {
                        n: [str(r.path) for r in v] for n, v in runs.items() if v}}, indent=2))
                    finished(model, name, i + 1, runs[name][-1])
        rows = rows_of(runs, profiles, cfgs)
        rounds = max(len(v) for v in runs.values())
        cols = COLS if rounds == 1 else COLS[:7] + ["spread"] + COLS[7:]
        t = suite.Table(f"compression_{model}_{a.nproc}", f"{model}, {a.nproc} processes, batch 16 per rank, "
                         f"{a.steps} steps per compressor (medians after 3 warm-up steps)"
                         + (f", {rounds} interleaved rounds (spread: max − min of the rounds' medians)" if rounds > 1 else ""),
                         rows, cols)
        prof = profiles[0] if profiles else None
        notes = (f"Model vs measured: {suite.within(rows, 'error')}. The model is the planner's "
                 f"(docs/planner.md), from a profile per round"
                 + (f" (round 1's finished {prof.machine.get('measured_at')}, load average "
                    f"{(prof.machine.get('load_average') or [float('nan')])[0]:.1f})" if prof is not None else "") + ".")
        path = suite.write(out.name, f"compression: {model}, N={a.nproc}", command, [t], [figure(rows, model)],
                            notes=notes, out_root=a.out, benchmarks_md=suite.ROOT / "BENCHMARKS.md" if a.write else None)
        print(f"\n{t.markdown()}\n\n{notes}\nreport: {path / 'report.html'}", flush=True)


def finished(model: str, compressor: str, round_: int, run) -> None:
    """One line per finished run (the table's row needs every round's profile, so it comes at the end)."""
    status = run.summary.get("status")
    suite.progress({"model": model, "compressor": compressor, "round": round_, "status": status,
                    "samples/s": suite.samples_per_s(run) if status == "completed" else None})


if __name__ == "__main__":
    main()
