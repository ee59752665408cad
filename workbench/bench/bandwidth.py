"""Suite ``bandwidth``: a sweep of emulated link rates (``network=emulated``, needs root and
iproute2): samples/s of every paradigm at each rate, where each one wins, and the compression
crossover bandwidth measured next to the one the utility model predicts.

    python -m workbench.bench bandwidth --write                          # resnet18 and vgg16, N = 3 workers
    python -m workbench.bench bandwidth --models vgg16 --repeats 3 --write   # one model's section alone
    python -m workbench.bench bandwidth --models resnet18 --bandwidths 50mbit,200mbit,1gbit
    python -m workbench.bench bandwidth --repeats 3 --write              # 3 interleaved rounds: medians + spread
    python -m workbench.bench bandwidth --tiny                           # CI smoke: small_cnn, 2 workers, 2 rates

At each rate, for each model (CIFAR-size synthetic data; small_cnn on the digits), on N workers:
``trainer=sync`` (DDP's ring all-reduce), ``trainer=ps`` (sync, N workers + 1 server), ``trainer=stanza``
(N−1 CONV + 1 FC) and ``trainer=compressed`` with PowerSGD, Top-K and signSGD (the ``bytes`` suite's
settings). Every rank is its own emulated node: its own namespace, a veth link shaped to the rate in
both directions, the ordinary gloo transport. Before the runs at a rate, ``workbench.network.calibrate``
measures what the links achieve (recorded in the table: all-reduce bus bandwidth of a 16 MiB tensor
as a fraction of the rate).

Measured: global batch / median step time after step 2. Predicted (the compressors and sync only):
``workbench.perfmodel.compression`` calibrated once per model from a ``compressor=none`` run with
``trainer.calibrate_steps=3`` at the calibration rate (``--calibrate-at``, default the highest: there
the wait for the network least pollutes the compute times the model separates), each compressor's
payload and encode/decode time from its own run. The network at each rate: seconds per byte =
the link's (1 / the probe's bus bandwidth at that rate) + the host's (copies and reductions sharing
the cores with backward: what the calibration run's in-situ bandwidth leaves beyond its own link's
share). Crossover: the link rate below which a compressor beats sync. Measured, by log-linear
interpolation of the measured speed-up between adjacent rates; predicted, the model's crossover
bus bandwidth converted to a link rate the same way (at the lowest rate's probe efficiency).
Each model has its own report (``<out>/bandwidth-<model>-<N>w/``) and its own section of
BENCHMARKS.md, so one model's sweep can be rerun without the other's hours. ``--resume`` keeps the completed runs of an interrupted sweep
(same settings) and runs the rest. ``--from-runs`` rebuilds
each model's tables from its last sweep's runs and probes (its ``index.json``), e.g. after a change
to the model.

Why these rates: a CPU computes one to two orders of magnitude slower than the papers' GPUs, so the
papers' 1–100 Gbit/s networks are re-created by their *ratio* of communication to computation time,
not by their rate. The winners table shows that ratio (``comm/compute``: predicted ring all-reduce
time of one step over the backward compute time) for each rate; a paper's setting corresponds to the
rate here with the same ratio. Above a few Gbit/s the links stop being the limit (gloo on 2 cores
moves about 4 Gbit/s); the link probe column shows where.
"""
from __future__ import annotations

import json
import math
from datetime import datetime, timezone
from pathlib import Path

import workbench
from workbench.bench import report
from workbench.bench.bytes import runs_for
from workbench.config import validate
from workbench.runs import Run

RATES = {"resnet18": "50mbit,200mbit,1gbit,4gbit", "vgg16": "500mbit,2gbit,8gbit", "small_cnn": "5mbit,100mbit"}
COMPRESSORS = ("powersgd", "topk", "signsgd")
PROBE_MB = 16  # the link probe's message size (large: the bandwidth regime)


def main(argv=None) -> None:
    p = report.parser("bandwidth", __doc__, "small_cnn on the digits, 2 workers, 5mbit and 100mbit, PowerSGD only")
    p.add_argument("--models", default="resnet18,vgg16")
    p.add_argument("--bandwidths", help="comma-separated link rates for every model (default per model: "
                   + "; ".join(f"{m}: {r}" for m, r in RATES.items()) + ")")
    p.add_argument("--workers", type=int, default=3, help="N")
    p.add_argument("--batch", type=int, default=16, help="samples per worker per step")
    p.add_argument("--steps", type=int, default=5, help="steps per run; the first 2 are warm-up")
    p.add_argument("--compressors", default=",".join(COMPRESSORS))
    p.add_argument("--repeats", type=int, default=1, help="interleaved rounds over all runs; medians + spread")
    p.add_argument("--calibrate-at", help="link rate of the utility model's calibration run (default: the highest)")
    p.add_argument("--resume", action="store_true", help="keep the completed runs of each model's last sweep (its "
                   "index.json, same settings) and run only the rest: a sweep of hours survives a stop")
    p.add_argument("--from-runs", action="store_true", help="no new runs: rebuild each model's tables from "
                   "<out>/bandwidth-<model>-<N>w/index.json (the runs and link probes of its last sweep)")
    a = p.parse_args(argv)
    if a.tiny:
        a.models, a.workers, a.compressors, a.steps, a.bandwidths = "small_cnn", 2, "powersgd", 3, None
    from workbench.network import parse_rate
    plan = {}
    for model in a.models.split(","):
        rates = sorted((a.bandwidths or RATES.get(model, RATES["resnet18"])).split(","), key=parse_rate)
        plan[model] = (rates, a.calibrate_at or rates[-1])

    # what a model's runs depend on: --resume keeps earlier runs only under the same settings
    settings = {m: {"rates": rates, "calibrate_at": cal, "workers": a.workers, "batch": a.batch, "steps": a.steps,
                    "compressors": a.compressors.split(",")} for m, (rates, cal) in plan.items()}

    def out_of(model):  # one report and one BENCHMARKS.md section per model: each regenerates alone
        return Path(a.out) / f"bandwidth-{model}-{a.workers}w"
    jobs = []  # (model, rate, label, kind, cfg); every config validated before the first run starts
    for model, (rates, cal_rate) in plan.items():
        def cfg(rate, ov):
            return workbench.compose(ov + report.data_overrides(model, a.batch) + [
                f"model={model}", "network=emulated", f"network.bandwidth={rate}", f"trainer.max_steps={a.steps}",
                "trainer.eval_every=100000", "trainer.progress=false", "cluster.timeout_s=900",
                f"output_root={out_of(model) / 'runs'}"])
        jobs.append((model, cal_rate, "model calibration: compressed none", "calibration",
                     cfg(cal_rate, ["trainer=compressed", "compressor=none", f"cluster.nproc={a.workers}",
                                    "trainer.calibrate_steps=3"])))
        for rate in rates:
            for label, kind, ov in runs_for(a.workers, a.compressors.split(",")):
                jobs.append((model, rate, label.replace(" (a CONV worker)", ""), kind, cfg(rate, ov)))
    probes = {}  # link rate -> the all-reduce bus bandwidth its probe achieved (bits/s)
    done = kept_runs(plan, out_of, settings, probes) if a.resume and not a.from_runs else {}
    for *_, c in ([] if a.from_runs else jobs):
        validate(c)

    # What ran where, and the probes, per model: --from-runs rebuilds a model's tables from its index.
    if a.from_runs:
        entries = []
        for model in plan:
            index = out_of(model) / "index.json"
            if not index.exists():
                raise SystemExit(f"error: --from-runs: no sweep of {model} at N={a.workers} to rebuild ({index} is missing)")
            saved = json.loads(index.read_text())
            probes.update(saved["probes"])
            entries += saved["runs"]
        plan = {e["model"]: (sorted({x["rate"] for x in entries if x["model"] == e["model"]}, key=parse_rate), e["rate"])
                for e in entries if e["kind"] == "calibration"}
        a.compressors = ",".join(dict.fromkeys(e["kind"] for e in entries if e["label"].startswith("compressed:")))
    else:
        entries = []
        from workbench.network.calibrate import calibrate as probe_link
        for i, (model, rate, label, kind, c) in enumerate(j for _ in range(a.repeats) for j in jobs):
            if kind == "calibration" and i >= len(jobs):
                continue  # the model's calibration is not a timed row: once is enough
            if (model, rate, kind, i // len(jobs)) in done:
                entries.append(done[(model, rate, kind, i // len(jobs))])
                continue
            if rate not in probes:
                res = probe_link(a.workers, rate, sizes_mb=(PROBE_MB,), repeats=2)
                probes[rate] = next(r for r in res["rows"] if r["kind"] == "allreduce")["achieved_bits_per_s"]
                print(f"link probe {rate}: all-reduce {probes[rate] / 1e6:,.0f} Mbit/s "
                      f"({probes[rate] / parse_rate(rate):.0%} of the rate)", flush=True)
            run = workbench.launch(c, progress=False, check=False)
            entries.append({"model": model, "rate": rate, "label": label, "kind": kind, "run_dir": str(run.path),
                            "round": i // len(jobs)})
            mine = [e for e in entries if e["model"] == model]
            out_of(model).mkdir(parents=True, exist_ok=True)
            (out_of(model) / "index.json").write_text(json.dumps(
                {"settings": settings[model], "probes": {r: probes[r] for r in dict.fromkeys(e["rate"] for e in mine)},
                 "runs": mine}, indent=1))
            if kind != "calibration":
                report.progress(row(entries[-1], run, probes))
    loaded = [(e, Run(e["run_dir"])) for e in entries]  # each run's summary and records read once
    runs = {(e["model"], e["rate"], e["kind"]): r for e, r in loaded if r.status == "completed"}
    rounds = max((e.get("round", 0) for e in entries), default=0) + 1
    rows = report.merge_repeats(
        [[row(e, r, probes) for e, r in loaded if e["kind"] != "calibration" and e.get("round", 0) == i]
         for i in range(rounds)], lambda r: (r["model"], r["bandwidth"], r["run"]), ["samples/s"])
    args = [x for x in (argv if argv is not None else []) if x not in ("--from-runs", "--resume")]
    cmd = ("python -m workbench.bench bandwidth " + " ".join(args)).strip() + "   (as root)"
    if done:  # an honest header: part of the rows ran before this invocation
        cmd += f"; resumed with --resume, {len(done)} of its runs kept from an earlier start"
    if a.from_runs:  # the runs came from the sweep command; these tables were rebuilt from them
        cmd += f"; tables rebuilt from its runs with --from-runs on {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC"
    for model, (rates, cal_rate) in plan.items():
        model_rows = [r for r in rows if r["model"] == model]
        tables = model_tables(model, rates, model_rows, a.workers, a.batch, a.steps, rounds,
                              predictions(model, rates, cal_rate, runs, probes, a.compressors.split(",")),
                              a.compressors.split(","))
        path = report.write(out_of(model).name, f"bandwidth sweep: {model}, N={a.workers}", cmd, tables,
                            [figure(rows, model)], out_root=a.out,
                            benchmarks_md=report.ROOT / "BENCHMARKS.md" if a.write else None)
        print("\n\n".join(t.markdown() for t in tables) + f"\n\nreport: {path / 'report.html'}")


def kept_runs(plan, out_of, settings, probes) -> dict:
    """The completed runs of each model's last sweep, by (model, rate, kind, round), for --resume;
    their link probes go into ``probes``. A sweep under other settings is refused in one line."""
    done = {}
    for model in plan:
        index = out_of(model) / "index.json"
        if not index.exists():
            continue
        saved = json.loads(index.read_text())
        if saved.get("settings") != settings[model]:
            raise SystemExit(f"error: --resume: {index} is a sweep with other settings ({saved.get('settings')}), "
                             f"not {settings[model]}; rerun without --resume")
        probes.update(saved["probes"])
        kept = [e for e in saved["runs"] if Run(e["run_dir"]).status == "completed"]
        done.update({(e["model"], e["rate"], e["kind"], e.get("round", 0)): e for e in kept})
        print(f"resume {model}: {len(kept)} completed runs kept from {index}", flush=True)
    return done


def model_tables(model, rates, model_rows, workers, batch, steps, rounds, pred, compressors) -> list:
    """One model's three tables: samples/s per paradigm and rate (with the utility model's prediction
    and the speed-up over sync), where each paradigm wins, and each compressor's crossover."""
    from workbench.network import parse_rate
    crossings, winners = [], []
    for r in model_rows:
        sync = next((x["samples/s"] for x in model_rows if x["bandwidth"] == r["bandwidth"] and x["kind"] == "sync"), None)
        r["vs sync"] = round(r["samples/s"] / sync, 2) if r["samples/s"] and sync else None
        pr = pred.get("samples", {}).get((r["bandwidth"], r["kind"]))
        r["predicted samples/s"] = round(pr, 2) if pr else None
        r["error"] = f"{100 * (pr / r['samples/s'] - 1):+.0f} %" if pr and r["samples/s"] else None
    for comp in compressors:
        speed = [(parse_rate(x["bandwidth"]), x["vs sync"]) for x in model_rows if x["kind"] == comp and x["vs sync"]]
        measured = crossing(speed)
        predicted = pred.get("crossover", {}).get(comp)
        crossings.append({"model": model, "compressor": comp, "measured crossover": rate_text(measured),
                          "predicted crossover": rate_text(predicted),
                          "predicted / measured": (f"{predicted / measured:.2f}" if finite(measured)
                                                   and finite(predicted) else None),
                          "speed-up vs sync, lowest → highest rate": " → ".join(f"{s:.2f}" for _, s in speed)})
    for rate in rates:
        at = [x for x in model_rows if x["bandwidth"] == rate and x["samples/s"]]
        if not at:
            continue
        best = max(at, key=lambda x: x["samples/s"])
        by = {x["kind"]: x["samples/s"] for x in at}
        winners.append({"model": model, "bandwidth": rate, "comm/compute": pred.get("ratio", {}).get(rate),
                        "winner": best["run"], "samples/s": best["samples/s"],
                        "stanza / ps": round(by["stanza"] / by["ps"], 2) if by.get("stanza") and by.get("ps") else None,
                        "powersgd / sync": round(by["powersgd"] / by["sync"], 2) if by.get("powersgd") and by.get("sync") else None})
    cols = ["model", "bandwidth", "link", "run", "samples/s"] + (["samples/s spread", "repeats"] if rounds > 1 else []) + ["vs sync", "predicted samples/s", "error", "status"]
    return [report.Table(f"sweep_N{workers}", f"samples/s per paradigm and link rate, N = {workers} workers, batch "
                         f"{batch} per worker, {steps} steps (link: all-reduce bus bandwidth the probe achieved, "
                         "of the rate; predicted: the compression-utility model)", model_rows, cols),
            report.Table(f"winners_N{workers}", "Where each paradigm wins (comm/compute: predicted ring all-reduce "
                         "time over backward compute time, the quantity that maps a rate here onto a paper's network)",
                         winners),
            report.Table(f"crossover_N{workers}", "Compression crossover: the link rate below which the compressor "
                         "beats sync, measured vs predicted by the utility model", crossings)]


def row(entry, run, probes) -> dict:
    from workbench.network import parse_rate
    ok = run.status == "completed"  # a run killed before its summary has none
    sps = report.samples_per_s(run) if ok else None
    return {"model": entry["model"], "bandwidth": entry["rate"], "run": entry["label"], "kind": entry["kind"],
            "link": f"{probes[entry['rate']] / parse_rate(entry['rate']):.0%}",
            "samples/s": round(sps, 2) if sps else None, "status": run.status or "no summary"}


def predictions(model, rates, cal_rate, runs, probes, compressors) -> dict:
    """The utility model's samples/s of sync and each compressor at every rate, its comm/compute
    ratio, and each compressor's crossover link rate (bits/s; inf: pays at every rate)."""
    from workbench.network import parse_rate
    from workbench.perfmodel import compression as pmc
    base = runs.get((model, cal_rate, "calibration"))
    if base is None:
        return {}
    work, net = pmc.calibrate(base)
    # Seconds per byte of the all-reduce = the link's (1 / what the probe achieves at that rate) + the
    # host's (copies and reductions competing with backward for the same cores): the in-situ
    # calibration at cal_rate measures the sum, its probe the link's share; the host's share stays.
    host = max(0.0, 1 / net.bandwidth - 8 / probes[cal_rate])
    batch = base.summary["global_batch"]
    out = {"samples": {}, "ratio": {}, "crossover": {}}
    for rate in rates:
        n = net.at(1 / (8 / probes[rate] + host))
        out["samples"][(rate, "sync")] = batch / pmc.iteration_time(work, n)
        out["ratio"][rate] = round(sum(pmc.comm_times(work, n)) / (work.overlap * work.backward_s), 2)
        for comp in compressors:
            if runs.get((model, rate, comp)) is not None:
                c = pmc.compression_of(runs[(model, rate, comp)])
                out["samples"][(rate, comp)] = batch / pmc.iteration_time(work, n, c)
    eff = probes[rates[0]] / parse_rate(rates[0])  # probe / rate where the link is the limit
    for comp in compressors:
        if runs.get((model, cal_rate, comp)) is not None:
            bw = pmc.crossover_bandwidth(work, net, pmc.compression_of(runs[(model, cal_rate, comp)]))
            if bw is None or math.isinf(bw) or 1 / bw <= host:
                out["crossover"][comp] = None if bw is None else math.inf  # no link rate makes the bus that slow/fast
            else:  # the link rate whose bus bandwidth, with the host's share, equals the crossover
                out["crossover"][comp] = 8 / (1 / bw - host) / eff
    return out


def crossing(points):
    """The rate where a measured speed-up crosses 1, falling from > 1 (low rates) to < 1: log-linear
    interpolation between the two adjacent rates. ``inf``: > 1 at every rate; ``None``: never > 1."""
    if not points:
        return None
    if all(s > 1 for _, s in points):
        return math.inf
    for (r0, s0), (r1, s1) in zip(points, points[1:]):
        if s0 > 1 >= s1:
            t = (s0 - 1) / (s0 - s1)
            return math.exp(math.log(r0) + t * (math.log(r1) - math.log(r0)))
    return None


def finite(x) -> bool:
    return isinstance(x, float) and math.isfinite(x)


def rate_text(bits):
    if bits is None:
        return "never pays"
    if math.isinf(bits):
        return "above the sweep"
    return f"{bits / 1e9:.3g} Gbit/s" if bits >= 1e9 else f"{bits / 1e6:.3g} Mbit/s"


def figure(rows, model):
    import plotly.graph_objects as go
    from workbench.network import parse_rate
    fig = go.Figure()
    for label in dict.fromkeys(r["run"] for r in rows if r["model"] == model):
        sub = sorted((r for r in rows if r["model"] == model and r["run"] == label and r["samples/s"]),
                     key=lambda r: parse_rate(r["bandwidth"]))
        fig.add_scatter(name=label, x=[parse_rate(r["bandwidth"]) / 1e6 for r in sub], y=[r["samples/s"] for r in sub],
                        mode="lines+markers")
    fig.update_layout(title=f"{model}: samples/s against the emulated link rate", xaxis_type="log",
                      xaxis_title="link rate (Mbit/s)", yaxis_title="samples/s")
    return fig


if __name__ == "__main__":
    main()
