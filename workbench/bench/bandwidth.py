"""Suite ``bandwidth``: a sweep of emulated link rates (``network=emulated``, needs root and
iproute2): samples/s of every paradigm at each rate, measured next to the planner model's prediction,
where each one wins, and each compressor's crossover bandwidth, measured and predicted.

    python -m workbench.bench bandwidth --write                          # resnet18 and vgg16, N = 3 workers
    python -m workbench.bench bandwidth --models vgg16 --repeats 3 --write   # one model's section alone
    python -m workbench.bench bandwidth --models resnet18 --bandwidths 50mbit,200mbit,1gbit
    python -m workbench.bench bandwidth --repeats 3 --write              # 3 interleaved rounds: medians + spread
    python -m workbench.bench bandwidth --tiny                           # CI smoke: small_cnn, 2 workers, 2 rates, sync vs PowerSGD

At each rate, for each model (CIFAR-size synthetic data; small_cnn on the digits), on N workers:
``trainer=sync`` (DDP's ring all-reduce), ``trainer=ps`` (sync, N workers + 1 server), ``trainer=stanza``
(N−1 CONV + 1 FC) and ``trainer=compressed`` with PowerSGD, Top-K and signSGD (the ``bytes`` suite's
settings). Every rank is its own emulated node: its own namespace, a veth link shaped to the rate in
both directions, the ordinary gloo transport. Before the runs at a rate, ``workbench.network.calibrate``
measures what the links achieve (recorded in the table: all-reduce bus bandwidth of a tensor that
lasts about 2 s on the link, 1–16 MiB, as a fraction of the rate).

Measured: global batch / median step time after step 2. Predicted, every run: the planner's model
(``workbench.perfmodel.paradigms``, the one ``python -m workbench.plan``, the dashboards and
``fc_workers=auto`` use) on this host's emulated links, from the model's profile at N ranks, measured
on this host before the first run (``<out>/bandwidth-<model>-<N>w/profile.json``, recorded in the
index; ``--profile FILE`` predicts from another one). Crossover: the link rate below which a
compressor beats sync. Measured, by log-linear interpolation of the measured speed-up between the
two adjacent rates it falls between, from the rounds' medians and from each round alone; predicted,
where the model's sync and compressed steps meet (``plan.emulated_crossover_bps``), and the model's
speed-ups at the sweep's own rates read the way the measured crossover is (a crossover between two
swept rates is known only to lie between them).
Each model has its own report (``<out>/bandwidth-<model>-<N>w/``) and its own section of
BENCHMARKS.md, so one model's sweep can be rerun without the other's hours. ``--resume`` keeps the completed runs of an interrupted sweep
(same settings) and runs the rest; with more rates (``--bandwidths``, a superset) or more rounds
(``--repeats``) it adds them to the sweep, and the section's command line says how many runs came
from the earlier start. ``--from-runs`` rebuilds
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
from workbench.runs import store as runstore
from workbench.bench import suite
from workbench.bench.bandwidth_index import kept_runs, recorded, runs_span, save_index
from workbench.bench.bytes import runs_for
from workbench.config import validate
from workbench.runs.handle import Run

# ResNet-18's 2gbit: where its compressors' crossovers lie (between 1 and 4 Gbit/s they meet sync slowly)
RATES = {"resnet18": "50mbit,200mbit,1gbit,2gbit,4gbit", "vgg16": "500mbit,2gbit,8gbit", "small_cnn": "5mbit,100mbit"}
COMPRESSORS = ("powersgd", "topk", "signsgd")
TINY_KINDS = ("sync", "powersgd")  # --tiny: the pair a crossover needs (each emulated run starts its own nodes)
PROBE_S = 2.0  # the link probe's message lasts about this long at the rate (the bandwidth regime) ...
PROBE_MB = (1, 16)  # ... within these sizes: 16 MiB from 67 Mbit/s up, 1 MiB (1.7 s) at 5 Mbit/s


def probe_mb(rate: str) -> float:
    """The link probe's message size (MiB) at ``rate``: about ``PROBE_S`` seconds of the link."""
    from workbench.network import parse_rate
    return min(PROBE_MB[1], max(PROBE_MB[0], round(parse_rate(rate) * PROBE_S / 8 / 2**20)))


def parser():
    p = suite.parser("bandwidth", __doc__, "small_cnn on the digits, 2 workers, 5mbit and 100mbit, sync and PowerSGD only")
    p.add_argument("--models", default="resnet18,vgg16")
    p.add_argument("--bandwidths", help="comma-separated link rates for every model (default per model: "
                   + "; ".join(f"{m}: {r}" for m, r in RATES.items()) + ")")
    p.add_argument("--workers", type=int, default=3, help="N")
    p.add_argument("--batch", type=int, default=16, help="samples per worker per step")
    p.add_argument("--steps", type=int, default=5, help="steps per run; the first 2 are warm-up")
    p.add_argument("--compressors", default=",".join(COMPRESSORS))
    p.add_argument("--repeats", type=int, default=1, help="interleaved rounds over all runs; medians + spread")
    p.add_argument("--profile", help="predict from this profile file (one model; the planner's format), not one "
                   "measured before the runs")
    p.add_argument("--resume", action="store_true", help="keep the completed runs of each model's last sweep (its "
                   "index.json, same settings; more rates or rounds add to it) and run only the rest: a sweep of "
                   "hours survives a stop")
    p.add_argument("--from-runs", action="store_true", help="no new runs: rebuild each model's tables from "
                   "<out>/bandwidth-<model>-<N>w/index.json (the runs and link probes of its last sweep)")
    return p


def main(argv=None) -> None:
    a = parser().parse_args(argv)
    if a.tiny:
        a.models, a.workers, a.compressors, a.steps, a.bandwidths = "small_cnn", 2, "powersgd", 3, None
    from workbench.network import parse_rate
    plan = {model: sorted((a.bandwidths or RATES.get(model, RATES["resnet18"])).split(","), key=parse_rate)
            for model in a.models.split(",")}
    if a.profile and len(plan) > 1:
        raise SystemExit(f"error: --profile is one model's profile; give one model with --models, not {a.models}")

    # what a model's runs depend on: --resume keeps earlier runs only under the same settings
    settings = {m: {"rates": rates, "workers": a.workers, "batch": a.batch, "steps": a.steps,
                    "compressors": a.compressors.split(",")} for m, rates in plan.items()}
    jobs = sweep_jobs(a, plan)
    probes = {}  # link rate -> the all-reduce bus bandwidth its probe achieved (bits/s)
    profile_at = {}  # model -> its profile's file, recorded in its index
    done = kept_runs(plan, lambda m: out_dir(a, m), settings, probes, profile_at) if a.resume and not a.from_runs else {}
    for *_, c in ([] if a.from_runs else jobs):
        validate(c)
    given = {m: load_profile(a.profile, planner_cfg(m, a.workers, a.batch)) for m in plan} if a.profile else {}
    # What ran where, and the probes, per model: --from-runs rebuilds a model's tables from its index.
    if a.from_runs:
        entries, plan = rebuilt(a, plan, probes, profile_at)
    else:
        entries = sweep(a, plan, jobs, done, given, settings, probes, profile_at)
    write_reports(a, argv, plan, entries, probes, profile_at, given, done)


def out_dir(a, model) -> Path:
    """One report and one BENCHMARKS.md section per model: each regenerates alone."""
    return Path(a.out) / f"bandwidth-{model}-{a.workers}w"


def sweep_jobs(a, plan) -> list:
    """(model, rate, label, kind, cfg) of one round's runs, every config composed before the first starts."""
    jobs = []
    for model, rates in plan.items():
        def cfg(rate, ov):
            return workbench.compose(ov + suite.data_overrides(model, a.batch) + [
                f"model={model}", "network=emulated", f"network.bandwidth={rate}", f"trainer.max_steps={a.steps}",
                "trainer.eval_every=100000", "trainer.progress=false", "cluster.timeout_s=900",
                f"output_root={out_dir(a, model) / 'runs'}"])
        for rate in rates:
            for label, kind, ov in runs_for(a.workers, a.compressors.split(",")):
                if a.tiny and kind not in TINY_KINDS:
                    continue
                jobs.append((model, rate, label.replace(" (a CONV worker)", ""), kind, cfg(rate, ov)))
    return jobs


def rebuilt(a, plan, probes, profile_at):
    """--from-runs: each model's runs, probes and profile from its last sweep's index; the rates
    and compressors are the sweep's."""
    from workbench.network import parse_rate
    entries = []
    for model in plan:
        index = out_dir(a, model) / "index.json"
        if not index.exists():
            raise SystemExit(f"error: --from-runs: no sweep of {model} at N={a.workers} to rebuild ({index} is missing)")
        saved = json.loads(index.read_text())
        probes.update(saved["probes"])
        entries += [e for e in saved["runs"] if e["kind"] != "calibration"]  # older sweeps' utility-model run
        profile_at[model] = saved.get("profile")
    plan = {m: sorted({e["rate"] for e in entries if e["model"] == m}, key=parse_rate) for m in plan}
    a.compressors = ",".join(dict.fromkeys(e["kind"] for e in entries if e["label"].startswith("compressed:")))
    return entries, plan


def sweep(a, plan, jobs, done, given, settings, probes, profile_at) -> list:
    """Every model's profile (before its runs, on this host as they will find it), then the rounds
    of runs, interleaved, each rate's link probed before its first run; the index written after
    every run, so that --resume keeps what is done. Returns what ran where."""
    from workbench.network import parse_rate
    from workbench.network.calibrate import calibrate as probe_link
    entries = []
    for model in plan:
        if model not in given and not recorded(profile_at, model):
            profile_at[model] = str(measured_profile(model, a.workers, a.batch, out_dir(a, model), a.compressors.split(",")))
    total = a.repeats * len(jobs)
    for i, (model, rate, label, kind, c) in enumerate(j for _ in range(a.repeats) for j in jobs):
        if (model, rate, kind, i // len(jobs)) in done:
            entries.append(done[(model, rate, kind, i // len(jobs))])
            continue
        if rate not in probes:
            res = probe_link(a.workers, rate, sizes_mb=(probe_mb(rate),), repeats=2)
            probes[rate] = next(r for r in res["rows"] if r["kind"] == "allreduce")["achieved_bits_per_s"]
            print(f"link probe {rate}: all-reduce {probes[rate] / 1e6:,.0f} Mbit/s "
                  f"({probes[rate] / parse_rate(rate):.0%} of the rate)", flush=True)
        print(f"bandwidth {i + 1}/{total}: {model} at {rate}, {label} ...", flush=True)
        run = workbench.launch(c, progress=False, check=False)
        entries.append({"model": model, "rate": rate, "label": label, "kind": kind, "run_dir": str(run.path),
                        "round": i // len(jobs)})
        save_index(out_dir(a, model), settings[model], probes, profile_at.get(model), entries, model)
        suite.progress(row(entries[-1], run, probes))
    for model in plan:  # kept runs after a model's last new one are in the index too
        save_index(out_dir(a, model), settings[model], probes, profile_at.get(model), entries, model)
    return entries


def write_reports(a, argv, plan, entries, probes, profile_at, given, done) -> None:
    """Each model's tables (its rounds merged), predictions and report, and its BENCHMARKS.md section."""
    loaded = [(e, Run(e["run_dir"])) for e in entries]  # each run's summary and records read once
    rounds = max((e.get("round", 0) for e in entries), default=0) + 1
    per_round = [[row(e, r, probes) for e, r in loaded if e.get("round", 0) == i] for i in range(rounds)]
    rows = suite.merge_repeats(per_round, lambda r: (r["model"], r["bandwidth"], r["run"]), ["samples/s"])
    args = [x for x in (argv if argv is not None else []) if x not in ("--from-runs", "--resume")]
    cmd = ("python -m workbench.bench bandwidth " + " ".join(args)).strip() + "   (as root)"
    if done:  # an honest header: part of the rows ran before this invocation
        cmd += f"; resumed with --resume, {len(done)} of its runs kept from an earlier start"
    if a.from_runs:  # the runs came from the sweep command; these tables were rebuilt from them
        cmd += (f"; its runs started {runs_span(entries)}; tables rebuilt from them with --from-runs on "
                f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC")
    for model, rates in plan.items():
        prof, said = model_profile(a, model, given, profile_at)
        cmd += said
        model_rows = [r for r in rows if r["model"] == model]
        tables = model_tables(model, rates, model_rows, a.workers, a.batch, a.steps, rounds,
                              predictions(model, rates, prof, a.workers, a.batch, a.compressors.split(",")),
                              a.compressors.split(","), [[r for r in rs if r["model"] == model] for rs in per_round])
        path = suite.write(out_dir(a, model).name, f"bandwidth sweep: {model}, N={a.workers}", cmd, tables,
                           [figure(rows, model)], notes=accuracy(tables), out_root=a.out,
                           benchmarks_md=suite.ROOT / "BENCHMARKS.md" if a.write else None)
        print("\n\n".join(t.markdown() for t in tables) + f"\n\nreport: {path / 'report.html'}")


def model_profile(a, model, given, profile_at):
    """The profile ``model``'s predictions come from (given, recorded in its index, or measured now
    for a sweep recorded without one) and what the report's command line says of it."""
    prof = given.get(model)
    if prof is None and recorded(profile_at, model):
        prof = load_profile(profile_at[model], planner_cfg(model, a.workers, a.batch))
    if prof is None:  # a sweep recorded without the planner's predictions: profiled now, and said so
        out = out_dir(a, model)
        path = measured_profile(model, a.workers, a.batch, out, a.compressors.split(","))
        prof = load_profile(path, planner_cfg(model, a.workers, a.batch))
        # recorded, so that the next rebuild predicts from the same profile
        runstore.write_json(out / "index.json", {**json.loads((out / "index.json").read_text()), "profile": str(path)})
        return prof, f"; {model}'s profile measured with the rebuild"
    return prof, f"; {model} predicted from its profile of {str(prof.machine.get('measured_at', '?')).replace('T', ' ')[:16]}"


def accuracy(tables) -> str:
    """The model against the sweep, counted from its tables: the step errors and the crossovers."""
    from workbench.plan import error_quantiles
    errs = [r["predicted samples/s"] / r["samples/s"] - 1 for r in tables[0].rows
            if r.get("predicted samples/s") and r.get("samples/s")]
    if not errs:
        return ""
    med, p90 = error_quantiles(errs)
    out = (f"The planner's model against the {len(errs)} measured rows: samples/s |error| median {100 * med:.1f} %, "
           f"90th percentile {100 * p90:.1f} %, {sum(abs(e) <= 0.2 for e in errs)} of {len(errs)} within 20 %.")
    cross = [c for c in tables[2].rows if c.get("predicted / measured")]
    if cross:
        def within(key):
            return sum(abs(float(c[key]) - 1) <= 0.2 for c in cross if c.get(key))
        out += (f" Crossovers located by the sweep: {len(cross)} of {len(tables[2].rows)}; within 20 % of the measured "
                f"one: {within('predicted / measured')} as predicted, {within('read / measured')} read at the sweep's rates.")
    return out


def speed_ups(rows, comp) -> list:
    """(link bits/s, a compressor's samples/s over sync's) at each rate where both ran."""
    from workbench.network import parse_rate
    sync = {r["bandwidth"]: r["samples/s"] for r in rows if r["kind"] == "sync" and r["samples/s"]}
    return [(parse_rate(r["bandwidth"]), r["samples/s"] / sync[r["bandwidth"]]) for r in rows
            if r["kind"] == comp and r["samples/s"] and sync.get(r["bandwidth"])]


def model_tables(model, rates, model_rows, workers, batch, steps, rounds, pred, compressors, per_round=()) -> list:
    """One model's three tables: samples/s per paradigm and rate (with the planner model's prediction
    and the speed-up over sync), where each paradigm wins, and each compressor's crossover: measured
    (from the medians, and each round's alone), the model's, and the model's read at the sweep's
    rates as the measured one is."""
    from workbench.network import parse_rate
    crossings, winners = [], []
    for r in model_rows:
        sync = next((x["samples/s"] for x in model_rows if x["bandwidth"] == r["bandwidth"] and x["kind"] == "sync"), None)
        r["vs sync"] = round(r["samples/s"] / sync, 2) if r["samples/s"] and sync else None
        pr = pred.get("samples", {}).get((r["bandwidth"], r["kind"]))
        r["predicted samples/s"] = round(pr, 2) if pr else None
        r["error"] = f"{100 * (pr / r['samples/s'] - 1):+.0f} %" if pr and r["samples/s"] else None
    samples = pred.get("samples", {})
    for comp in compressors:
        speed = [(parse_rate(x["bandwidth"]), x["vs sync"]) for x in model_rows if x["kind"] == comp and x["vs sync"]]
        measured = crossing(speed_ups(model_rows, comp))  # from the medians unrounded, as each round's
        each = [crossing(speed_ups(rs, comp)) for rs in per_round]
        predicted = pred.get("crossover", {}).get(comp)
        read = crossing([(parse_rate(b), samples[(b, comp)] / samples[(b, "sync")]) for b in rates
                         if samples.get((b, comp)) and samples.get((b, "sync"))])
        crossings.append({"model": model, "compressor": comp, "measured crossover": rate_text(measured),
                          "measured, per round": rate_range(each) if len(each) > 1 else None,
                          "predicted crossover": rate_text(predicted),
                          "predicted / measured": (f"{predicted / measured:.2f}" if finite(measured)
                                                   and finite(predicted) else None),
                          "predicted, read at the sweep's rates": rate_text(read),
                          "read / measured": f"{read / measured:.2f}" if finite(measured) and finite(read) else None,
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
    return [suite.Table(f"sweep_N{workers}", f"samples/s per paradigm and link rate, N = {workers} workers, batch "
                         f"{batch} per worker, {steps} steps (link: all-reduce bus bandwidth the probe achieved, "
                         "of the rate; predicted: the planner's model from the sweep's profile)", model_rows, cols),
            suite.Table(f"winners_N{workers}", "Where each paradigm wins (comm/compute: predicted ring all-reduce "
                         "time over backward compute time, the quantity that maps a rate here onto a paper's network)",
                         winners),
            suite.Table(f"crossover_N{workers}", "Compression crossover: the link rate below which the compressor "
                         "beats sync, measured vs predicted by the planner's model (a crossover between two rates is known "
                         "only to lie between them: the measured one is read log-linearly between the two "
                         "rates, and so is the model's 'read at the sweep's rates')", crossings)]


def row(entry, run, probes) -> dict:
    from workbench.network import parse_rate
    ok = run.status == "completed"  # a run killed before its summary has none
    sps = suite.samples_per_s(run) if ok else None
    return {"model": entry["model"], "bandwidth": entry["rate"], "run": entry["label"], "kind": entry["kind"],
            "link": f"{probes[entry['rate']] / parse_rate(entry['rate']):.0%}",
            "samples/s": round(sps, 2) if sps else None, "status": run.status or "no summary"}


def planner_cfg(model, workers, batch):
    """The config the planner profiles and predicts the sweep's runs from."""
    return workbench.compose([*planner_overrides(model, batch), f"cluster.nproc={workers}"])


def _labels(compressors) -> dict:
    """The planner's label of each of the sweep's runs at N ranks -> the sweep's kind."""
    return {"sync": "sync", "stanza/n_f=1": "stanza", **{f"compressed/{c}": c for c in compressors}}


def measured_profile(model, workers, batch, out, compressors) -> Path:
    """This host's profile of ``model`` at ``workers`` ranks, with the codecs and loops the sweep's
    paradigms need (the planner's own profiling), measured now and kept beside the sweep's runs."""
    from workbench.plan import EMULATED, _plan_rows
    _, (_, prof) = _plan_rows(planner_overrides(model, batch), [EMULATED + "1gbit"], [workers], None, 1.0, "50us",
                              list(_labels(compressors)), str(out), print, refresh=True)
    path = Path(out) / "profile.json"
    prof.save(path)
    return path


def planner_overrides(model, batch) -> list:
    return [f"model={model}", *suite.data_overrides(model, batch)]


def load_profile(path, cfg):
    from workbench.core import ConfigError
    from workbench.plan import load_profile as load
    try:
        return load(path, cfg)
    except ConfigError as e:
        raise SystemExit(f"error: {e}") from None


def predictions(model, rates, prof, workers, batch, compressors) -> dict:
    """The planner's model (``workbench.perfmodel.paradigms``: the one ``python -m workbench.plan``, the
    dashboards and ``fc_workers=auto`` use) on this host's emulated links at every rate, from the
    sweep's profile: samples/s of each of the sweep's runs (``ps/sync`` with N workers + 1 server),
    the comm/compute ratio (the ring all-reduce of the whole model over the backward, both as a
    step pays them here) and each compressor's crossover link rate (bits/s; inf: pays at every rate)."""
    from workbench.perfmodel import collectives as C
    from workbench.plan import EMULATED, _plan_rows, cluster_for, emulated_crossover_bps
    bws, ov, labels = [EMULATED + r for r in rates], planner_overrides(model, batch), _labels(compressors)
    rows, (vs, _) = _plan_rows(ov, bws, [workers], prof, 1.0, "50us", list(labels), None, lambda s: None)
    ps, _ = _plan_rows(ov, bws, [workers + 1], prof, 1.0, "50us", ["ps/sync"], None, lambda s: None)
    labels["ps/sync"] = "ps"
    out = {"samples": {(r["bandwidth"][len(EMULATED):], labels[r["paradigm"]]): r["predicted_samples_per_s"]
                       for r in rows + ps}, "ratio": {}, "crossover": {}}
    cfg = vs[workers][0].cfg
    backward = (1 - prof.fwd_share) * prof.sync_compute_s(workers)
    for rate in rates:
        cl = cluster_for(cfg, prof, workers, EMULATED + rate, 5e-5)
        out["ratio"][rate] = round(C.allreduce_time(prof.model_bytes, workers, cl.ar_bw, cl.latency) / backward, 2)
    for c in compressors:
        out["crossover"][c] = emulated_crossover_bps(cfg, prof, workers, c)
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


def rate_range(bits) -> str:
    """The rounds' crossovers as one range; a round whose speed-up never crossed says so."""
    ok = sorted(b for b in bits if finite(b))
    text = "" if not ok else rate_text(ok[0]) if ok[0] == ok[-1] else f"{rate_text(ok[0])} – {rate_text(ok[-1])}"
    other = [rate_text(b) for b in bits if not finite(b)]
    return "; ".join(x for x in [text, *other] if x)


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
