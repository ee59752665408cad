"""Suite ``crossover``: each compressor's predicted crossover tested where it is predicted (root).

    python -m workbench.bench crossover --models small_cnn --repeats 3 --write
    python -m workbench.bench crossover --models resnet18 --only signsgd,topk --repeats 2 --write
    python -m workbench.bench crossover --tiny          # CI smoke: small_cnn, 2 ranks, one round of signSGD (or --only)
    python -m workbench.bench crossover --models small_cnn --repeats 6 --resume --rounds experiments/crossover-rounds --write   # run again until done
    python -m workbench.bench crossover --models small_cnn --workers 2 --write   # a core per rank: a section of its own
    python -m workbench.bench crossover --errors experiments/crossover-rounds/small_cnn-N3-b16.json   # each run vs the model
    python -m workbench.bench crossover --models small_cnn --repeats 8 --resume --rounds experiments/crossover-rounds/xeon-host --host xeon-spr --write   # another machine: its own section
    python -m workbench.bench crossover --models small_cnn --workers 2 --pin --rounds experiments/crossover-rounds/xeon-host-pinned-batch --host xeon-spr-pinned --write   # ranks pinned (testbed.pin)

The planner's target is that every measured crossover (the link rate below which a compressor
beats ``sync``) lies within 20 % of its prediction. The planner suite reads measured crossovers between
rates a factor 4–5 apart (200 Mbit/s, 1 and 4 Gbit/s), log-linearly: a speed-up is not log-linear
over such a gap, and the model's own curve read that way moves its crossover by up to 30 %
(docs/planner.md), so that table cannot settle the target. This suite asks the question the target
asks, at the rates it names. Round by round, from a fresh profile (a host's speed drifts
within an hour), it predicts each compressor's crossover ``c`` on this host's
emulated links (``plan.emulated_crossover_bps``), then runs ``sync`` and the compressor side by side
behind links of ``c/1.2`` and ``c·1.2`` (rounded inwards to whole Mbit/s), each pair interleaved
(which goes first alternates). The measured crossover lies within 20 % of the prediction exactly
when the compressor's speed-up over ``sync`` is ≥ 1 at ``c/1.2`` and ≤ 1 at ``c·1.2`` (a speed-up
falls as the link gets faster); the table gives both speed-ups (median of the rounds, their
min–max), the model's own there, the verdict of the medians, how many rounds' own pairs agree with
it, and where the rounds' crossings lie against their predictions.

A compressor predicted to pay at every rate, at none, or outside ``--range`` is listed, not run.
Every round's profile and each measured pair are stored as they finish (``--rounds``, default
``<out>/crossover/rounds``, one file per model, so a resumed round keeps its profile and rates);
``--resume`` keeps them and runs only what is missing. Needs root and iproute2 (``network=emulated``).
"""
from __future__ import annotations

import math
import os
import statistics
from pathlib import Path

from workbench.bench import suite

MODELS = ("small_cnn", "resnet18")
WORKERS = 3
TOLERANCE = 1.2  # the target: the measured crossover within 20 % of the prediction, either way


def parser():
    p = suite.parser("crossover", __doc__, "small_cnn, 2 ranks, signSGD, one round")
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--workers", type=int, default=WORKERS, help="processes per run (cluster.nproc)")
    p.add_argument("--batch", type=int, default=16, help="samples per worker per step")
    p.add_argument("--only", default="", help="compressors (default: every registered one)")
    p.add_argument("--repeats", type=int, default=3, help="interleaved rounds of every pair")
    p.add_argument("--range", default="10mbit,20gbit", help="predicted crossovers outside this are not run")
    p.add_argument("--resume", action="store_true", help="keep the pairs already measured (--rounds)")
    p.add_argument("--rounds", default=None, help="where the pairs are stored (default <out>/crossover/rounds)")
    p.add_argument("--host", default="", help="a label for the machine the rounds are taken on, when it is not the "
                   "usual one (e.g. xeon-spr): its own section and report directory")
    p.add_argument("--pin", action="store_true", help="each rank pinned to its own cores (testbed.pin=true), in "
                   "the profile and the runs alike; with --resume, rounds stored the other way are refused")
    p.add_argument("--errors", nargs="+", metavar="FILE", help="runs nothing: every stored run in these rounds "
                   "files against today's model's prediction from its round's profile, one line each")
    return p


def main(argv=None) -> None:
    a = parser().parse_args(argv)
    if a.errors:
        return print_errors([Path(f) for f in a.errors])
    if a.tiny:
        a.models, a.workers, a.only, a.repeats = "small_cnn", 2, a.only or "signsgd", 1
    rng, only = checked(a)
    from workbench.plan import check_verifiable
    check_verifiable(["emulated:1gbit"])
    out = Path(a.out) / "crossover"
    store = Path(a.rounds) if a.rounds else out / "rounds"
    rows = []
    for model in a.models.split(","):
        rows += measure_model(model, a.workers, a.batch, only, a.repeats, rng, store, out, a.resume, a.pin)
    write(a, argv, rows)


def checked(a):
    """The arguments checked before anything runs (one ConfigError each): the --range in bits/s and
    the --only compressors."""
    from workbench.core import ConfigError
    if a.workers < 2:
        raise ConfigError(f"invalid value {a.workers!r} for --workers: a crossover needs at least 2 ranks")
    suite.check_host(a.host)
    if a.repeats < 1:
        raise ConfigError(f"invalid value {a.repeats!r} for --repeats: must be >= 1")
    from workbench.network import parse_rate
    rng = [parse_rate(x, "--range") for x in a.range.split(",")]
    if len(rng) != 2 or rng[0] >= rng[1]:
        raise ConfigError(f"invalid value {a.range!r} for --range: two rates, the lower first (e.g. 10mbit,20gbit)")
    from workbench.compress import COMPRESSORS
    only = [c for c in a.only.split(",") if c]
    bad = [c for c in only if c not in COMPRESSORS or c == "none"]
    if bad:
        raise ConfigError(f"unknown compressor {bad[0]!r} for --only; choose from "
                          f"{', '.join(c for c in COMPRESSORS if c != 'none')}")
    from workbench.models import MODELS as REGISTERED
    unknown = [m for m in a.models.split(",") if m not in REGISTERED]
    if unknown:
        raise ConfigError(f"unknown model {unknown[0]!r} for --models; choose from {', '.join(REGISTERED)}")
    return rng, only


def write(a, argv, rows: list) -> None:
    """The table, its notes (how many crossovers lie within 20 %, the host's load), the report."""
    tested = [r for r in rows if r["_verdict"] is not None]
    within = [r for r in tested if r["_verdict"] == "within 20 %"]
    unanimous = [r for r in within if r["_agree"] == r["_rounds"]]
    notes = (f"{len(within)} of {len(tested)} tested crossovers lie within 20 % of the prediction (the medians' "
             f"speed-up ≥ 1 at the prediction ÷ 1.2 and ≤ 1 at × 1.2), {len(unanimous)} of them in every round; "
             f"{len(rows) - len(tested)} compressors not tested (predicted outside the range, or pays at every "
             f"rate / at none).") if rows else ""
    loads = {r["model"]: [x for x in r["_loads"] if x is not None] for r in rows}
    loads = {m: v for m, v in loads.items() if v}
    if loads:  # 3 single-threaded ranks on 2 cores: about 3 while a pair runs
        notes += " The host's 1-minute load as each round ended: " + "; ".join(
            f"{m} {', '.join(f'{x:.1f}' for x in v)}" for m, v in loads.items()) + "."
    cols = ["model", "compressor", "predicted crossover", "rates tested (Mbit/s)", "predicted speed-up there",
            "measured speed-up there", "spread (min–max)", "rounds", "verdict", "rounds agreeing",
            "measured / predicted"]
    t = suite.Table(f"crossover_N{a.workers}", f"Compression crossover tested at the prediction: {a.workers} ranks, "
                     f"batch {a.batch} per worker, each rank behind its own emulated link; speed-up = sync's step "
                     f"÷ the compressor's, measured in interleaved pairs, median of the rounds (each after its own profile, "
                     f"at its own prediction c ÷ 1.2 and × 1.2)",
                     [{k: v for k, v in r.items() if not k.startswith("_")} for r in rows], cols)
    cmd = ("python -m workbench.bench crossover " + " ".join(argv if argv is not None else [])).strip()
    parts = []  # (the section title's words, the report directory's)
    if a.models != ",".join(MODELS):
        parts.append((a.models, a.models.replace(",", "-")))
    if a.workers != WORKERS:  # a section of its own per rank count: 2 ranks on 2 cores is another host
        parts.append((f"{a.workers} ranks", f"{a.workers}ranks"))
    if a.host:  # another machine's rounds: its profile, its regime, its own section
        parts.append((f"on {a.host}", f"on-{a.host}"))
    path = suite.write("-".join(["crossover", *(d for _, d in parts)]),
                        ", ".join(["Crossover tested at the prediction", *(t for t, _ in parts)]),
                        cmd, [t], notes=notes, out_root=a.out,
                        benchmarks_md=suite.ROOT / "BENCHMARKS.md" if a.write else None)
    print(f"\n{t.markdown()}\n\n{notes}\n\nreport: {path / 'report.html'}")


def brackets(c_bps: float) -> tuple:
    """The two rates a crossover predicted at ``c_bps`` is tested at: c/1.2 and c·1.2, rounded
    inwards to whole Mbit/s, so that a crossing between them is within 20 % of ``c`` either way."""
    return (f"emulated:{math.ceil(c_bps / TOLERANCE / 1e6)}mbit",
            f"emulated:{math.floor(c_bps * TOLERANCE / 1e6)}mbit")


def verdict(lo: list, hi: list):
    """Where the measured crossover lies against the bracket, from the speed-ups over ``sync`` at
    its lower rate (``lo``, one per round) and its upper rate (``hi``): by the medians, 'within 20 %'
    (≥ 1 below, ≤ 1 above), 'lower' (< 1 at both: the compressor stops paying below the bracket),
    'higher' (> 1 at both) or 'inverted' (< 1 below, > 1 above: the noise exceeds the curve's fall);
    and how many rounds' own pairs of speed-ups give the same verdict."""
    def one(s0, s1):
        if s0 >= 1 >= s1:
            return "within 20 %"
        if s0 < 1 and s1 <= 1:
            return "lower"
        if s0 >= 1 and s1 > 1:
            return "higher"
        return "inverted"
    v = one(statistics.median(lo), statistics.median(hi))
    return v, sum(one(s0, s1) == v for s0, s1 in zip(lo, hi))


def run_errors(path: Path) -> list:
    """Every run stored in a rounds file against the model's prediction, today, from the profile of
    the run's round: the per-run reading behind a verdict (a pair can miss its bracket through
    either side's step). Rows: round, compressor, rate, paradigm, measured and predicted step (s)."""
    import tempfile

    from workbench.runs import store as runstore
    from workbench.perfmodel.profile import Profile
    from workbench.plan import LOOPBACK, _plan_rows, predict_rows
    unit = runstore.read_json(path) or {}
    rows = []
    for k, rnd in sorted(unit.get("rounds", {}).items(), key=lambda kv: int(kv[0])):
        if not rnd.get("pairs"):
            continue
        prof = Profile.from_json(rnd["profile"])
        ov = [f"model={prof.model}", *suite.data_overrides(prof.model, prof.batch)]
        labels = ["sync"] + [f"compressed/{c}" for c in rnd["pairs"]]
        with tempfile.TemporaryDirectory() as tmp:
            _, (vs, prof) = _plan_rows(ov, [LOOPBACK], [prof.ranks], prof, 1.0, "50us", labels, tmp,
                                       lambda *_, **__: None, refresh=False)
        by = {v.label: v for v in vs[prof.ranks]}
        for name, pair in rnd["pairs"].items():
            label = f"compressed/{name}"
            for side in ("lower", "upper"):
                if side not in pair:
                    continue
                bw = pair[side]["rate"]
                pred = {r["paradigm"]: r["predicted_step_s"]
                        for r in predict_rows(prof, {prof.ranks: [by["sync"], by[label]]}, [bw], 5e-5)}
                for paradigm, key in (("sync", "sync_s"), (label, "compressor_s")):
                    rows.append({"round": int(k), "compressor": name, "rate": bw, "paradigm": paradigm,
                                 "measured_s": pair[side][key], "predicted_s": pred[paradigm]})
    return rows


RATE_BANDS_MBIT = (400, 600, 800)  # where the small CNN's sync crosses from wire-bound to host-bound


def by_rate(rows: list, edges=RATE_BANDS_MBIT) -> list:
    """:func:`run_errors`' rows (with ``error``) summed up per link-rate band and side (``sync``,
    the compressors): runs, mean measured − predicted step (s), median error. Where a model's miss
    depends on the rate (the wire against the host's part), not on the round, it shows here: a
    crossover tests both sides of a pair at the rates where the two parts meet."""
    from workbench.plan import bandwidth_bps
    bounds = [0.0, *(e * 1e6 for e in edges), math.inf]
    bps = [bandwidth_bps(r["rate"]) for r in rows]
    out = []
    for lo, hi in zip(bounds, bounds[1:]):
        for side in ("sync", "compressors"):
            sel = [r for r, b in zip(rows, bps) if lo <= b < hi and (r["paradigm"] == "sync") == (side == "sync")]
            if sel:
                out.append({"band": (lo, hi), "side": side, "runs": len(sel),
                            "shortfall_s": statistics.mean(r["measured_s"] - r["predicted_s"] for r in sel),
                            "median_error": statistics.median(r["error"] for r in sel)})
    return out


def _band(lo: float, hi: float) -> str:
    return f"< {hi / 1e6:.0f}" if lo == 0 else f">= {lo / 1e6:.0f}" if math.isinf(hi) else f"{lo / 1e6:.0f}–{hi / 1e6:.0f}"


def print_errors(paths: list) -> None:
    """:func:`run_errors` of each file, printed, with the median signed and mean absolute error of
    ``sync``'s runs and of the compressors' apart, then per link-rate band (:func:`by_rate`)."""
    for path in paths:
        rows = run_errors(path)
        print(f"{path}: {len(rows)} runs")
        print(f"{'round':>5} {'compressor':<10} {'rate':<18} {'paradigm':<20} {'measured':>9} {'predicted':>9} {'error':>7}")
        for r in rows:
            r["error"] = r["predicted_s"] / r["measured_s"] - 1
            print(f"{r['round']:>5} {r['compressor']:<10} {r['rate']:<18} {r['paradigm']:<20} "
                  f"{r['measured_s'] * 1e3:7.1f}ms {r['predicted_s'] * 1e3:7.1f}ms {r['error'] * 100:+6.1f}%")
        for what, sel in (("sync", [r for r in rows if r["paradigm"] == "sync"]),
                          ("compressors", [r for r in rows if r["paradigm"] != "sync"])):
            if sel:
                e = [r["error"] for r in sel]
                print(f"{what}: {len(e)} runs, median error {statistics.median(e) * 100:+.1f} %, "
                      f"mean |error| {statistics.mean(abs(x) for x in e) * 100:.1f} %")
        if rows:
            print(f"{'Mbit/s':>9} {'side':<12} {'runs':>4} {'measured - predicted':>21} {'median error':>13}")
            for b in by_rate(rows):
                print(f"{_band(*b['band']):>9} {b['side']:<12} {b['runs']:>4} {b['shortfall_s'] * 1e3:+19.2f}ms "
                      f"{b['median_error'] * 100:+12.1f}%")


def check_stored_pinning(unit: dict, pin: bool, path: Path) -> None:
    """Rounds stored with their ranks pinned the other way are not resumed into (``suite.check_pinned``)."""
    suite.check_pinned({k: r["profile"].get("machine", {})
                         for k, r in sorted(unit["rounds"].items(), key=lambda kv: int(kv[0]))}, pin, path, "rounds")


def check_stored_codecs(unit: dict, only: list, path: Path) -> None:
    """A stored round predicts from its own profile, which measured the codecs of the compressors
    asked for then; one asked for now that it lacks cannot be predicted for that round. Said before
    any run starts, in one line (ConfigError), rather than as a KeyError rounds later."""
    from workbench.compress import COMPRESSORS
    from workbench.core import ConfigError
    want = only or [c for c in COMPRESSORS if c != "none"]
    for k, rnd in sorted(unit["rounds"].items(), key=lambda kv: int(kv[0])):
        have = rnd["profile"].get("codecs", {})
        missing = [c for c in want if c not in have]
        if missing:
            raise ConfigError(f"invalid value {','.join(missing)!r} for --only: round {k} stored in {path} was profiled "
                              f"for {', '.join(sorted(have)) or 'no compressor'}; choose among those or measure "
                              "into another --rounds")


def measure_model(model, workers, batch, only, repeats, rng, store: Path, out: Path, resume: bool,
                  pin: bool = False) -> list:
    """One model, round by round: a fresh profile (or the round's stored one), each compressor's
    predicted crossover from it and, for those in ``rng``, the interleaved pairs at that round's
    bracket; the table's rows. A profile per round, because one profile does not hold for the
    hour its pairs take (docs/notes/2026-12-06-bench-history.md)."""
    from workbench.runs import store as runstore
    from workbench.perfmodel.profile import Profile
    from workbench.plan import LOOPBACK, _plan_rows
    # the profile's ranks are pinned as the runs' are, or not (workbench.dist.pin_rank)
    ov = [f"model={model}", *suite.data_overrides(model, batch), "cluster.timeout_s=600", f"output_root={out / 'runs'}",
          f"testbed.pin={str(pin).lower()}"]
    path = store / f"{model}-N{workers}-b{batch}.json"
    unit = (runstore.read_json(path) if resume else None) or {}
    unit.setdefault("rounds", {})
    path.parent.mkdir(parents=True, exist_ok=True)
    labels = ["sync"] + ([f"compressed/{c}" for c in only] if only else ["compressed"])
    check_stored_codecs(unit, only, path)
    check_stored_pinning(unit, pin, path)
    per: dict = {}  # compressor -> one entry per round: its prediction and its pair
    for k in range(1, repeats + 1):
        rnd = unit["rounds"].get(str(k))
        prof = Profile.from_json(rnd["profile"]) if rnd else None
        if prof is not None and not prof.readable:
            print(f"{path.name}: round {k}'s profile is of another version: measuring the round again")
            prof, rnd = None, None
        _, (vs, prof) = _plan_rows(ov, [LOOPBACK], [workers], prof, 1.0, "50us", labels, str(out), print,
                                   refresh=prof is None)
        ran = rnd is None
        if rnd is None:
            rnd = unit["rounds"][str(k)] = {"profile": prof.to_json(), "pairs": {}}
        ran = measure_round(model, f"{k}/{repeats}", k, {v.label: v for v in vs[workers]}, prof, workers, rng, rnd,
                            per, out, lambda: runstore.write_json(path, unit)) or ran
        if ran:  # the host's load as the round's measurements ended (a stored round keeps its own)
            rnd["load"] = [round(x, 2) for x in os.getloadavg()]
        runstore.write_json(path, unit)
    loads = [unit["rounds"][str(k)].get("load", [None])[0] for k in range(1, repeats + 1)]
    rows = []
    for name, entries in per.items():
        row = {"model": model, "compressor": name, **scored(entries), "_loads": loads}
        rows.append(row)
        suite.progress({k: v_ for k, v_ in row.items() if not k.startswith("_")})
    return rows


def measure_round(model, which, k, by, prof, workers, rng, rnd, per, out: Path, save) -> bool:
    """Round ``k`` (``which``: "k/N"): each compressor's crossover predicted from the round's
    profile (an entry of ``per``) and, where it lies in ``rng``, its pair of runs at the bracket
    measured unless ``rnd`` holds it (``save`` after each rate). Whether anything ran."""
    from workbench.bench.bandwidth import finite
    from workbench.plan import emulated_crossover_bps, predict_rows
    sync, ran = by["sync"], False
    for label, v in by.items():
        if not label.startswith("compressed/") or v.cfg.compressor.name == "none":
            continue
        name = v.cfg.compressor.name
        c = emulated_crossover_bps(sync.cfg, prof, workers, name)
        entry = {"c": c}
        per.setdefault(name, []).append(entry)
        if not finite(c) or not rng[0] <= c <= rng[1]:
            continue
        rates = brackets(c)
        pred = {(r["paradigm"], r["bandwidth"]): r["predicted_step_s"]
                for r in predict_rows(prof, {workers: [sync, v]}, rates, 5e-5)}
        pair = rnd["pairs"].setdefault(name, {})
        if any(pair.get(side, {}).get("rate", b) != b for side, b in zip(("lower", "upper"), rates)):
            # a pair tests the prediction its rates were chosen for: the model has changed since
            print(f"crossover: {model} {name}, round {k}: its pairs were measured for another prediction than "
                  f"today's model makes from the round's profile; left out (measure into another --rounds)")
            entry["stale"] = True
            continue
        entry["predicted"] = [pred[("sync", b)] / pred[(label, b)] for b in rates]
        entry["pair"] = pair
        for i, (side, bw) in enumerate(zip(("lower", "upper"), rates)):
            if side in pair:
                continue
            got = measure_pair(model, which, k + i, sync, v, bw, pred, out)
            if None in got.values():
                print(f"crossover: {model} {name} at {bw}: a run did not complete; left out")
                continue
            pair[side] = {"rate": bw, "sync_s": got["sync"], "compressor_s": got[label]}
            ran = True
            save()
    return ran


def measure_pair(model, which, parity, sync, v, bw, pred, out: Path) -> dict:
    """``sync`` and the compressor's variant ``v`` at ``bw``, one after the other: each one's
    measured step (None where its run did not complete). Which goes first alternates with
    ``parity``, so a host drifting within the pair favours neither side over the rounds."""
    from workbench.plan import verify_steps, verify_variant
    got = {}
    for var in [sync, v][:: 1 if parity % 2 else -1]:
        print(f"crossover: {model} {var.label} at {bw}, round {which} ...", flush=True)
        m = verify_variant(var, out / "runs", bw=bw, steps=verify_steps(min(pred[("sync", bw)], pred[(v.label, bw)])))
        got[var.label] = m.get("measured_step_s")
    return got


def scored(entries: list) -> dict:
    """A compressor's row from its rounds: each ``{"c": predicted crossover, "predicted": [its
    speed-up at c/1.2, at c·1.2], "pair": {"lower"|"upper": {"rate", "sync_s", "compressor_s"}}}``
    (``predicted`` and ``pair`` only where c was tested). Only rounds measured at both rates count;
    the verdict is the medians' (:func:`verdict`); ``measured / predicted`` is the median, over
    the rounds whose own pair crosses between their two rates, of that crossing over their c."""
    from workbench.bench.bandwidth import crossing, finite, rate_range
    from workbench.plan import bandwidth_bps
    cs = [e["c"] for e in entries]
    out = {"predicted crossover": rate_range(cs).replace("above the sweep", "pays at every rate"),
           "_verdict": None, "_agree": 0, "_rounds": 0}
    tested = [e for e in entries if "predicted" in e]
    if not tested:
        c = cs[0]
        if any(e.get("stale") for e in entries):
            return {**out, "verdict": "not scored: measured for another prediction"}
        return {**out, "verdict": "not tested: " + ("pays at no rate" if c is None else "pays at every rate"
                                                    if c == math.inf else "outside --range")}
    both = [e for e in tested if len(e.get("pair", {})) == 2]
    mb = lambda b: f"{bandwidth_bps(b) / 1e6:.0f}"  # noqa: E731
    out["rates tested (Mbit/s)"] = "; ".join(f"{mb(e['pair']['lower']['rate'])}–{mb(e['pair']['upper']['rate'])}"
                                            for e in both)
    out["predicted speed-up there"] = (f"{statistics.median(e['predicted'][0] for e in tested):.2f} → "
                                       f"{statistics.median(e['predicted'][1] for e in tested):.2f}")
    if not both:
        return {**out, "verdict": "not measured"}
    sp = [[e["pair"][s]["sync_s"] / e["pair"][s]["compressor_s"] for s in ("lower", "upper")] for e in both]
    s_lo, s_hi = [x[0] for x in sp], [x[1] for x in sp]
    v, agree = verdict(s_lo, s_hi)
    ratios = []
    for e, (a, b) in zip(both, sp):
        x = crossing([(bandwidth_bps(e["pair"][s]["rate"]), y) for s, y in (("lower", a), ("upper", b))])
        if a >= 1 >= b and finite(x):
            ratios.append(x / e["c"])
    m0, m1 = statistics.median(s_lo), statistics.median(s_hi)
    out.update({"measured speed-up there": f"{m0:.2f} → {m1:.2f}",
                "spread (min–max)": f"{min(s_lo):.2f}–{max(s_lo):.2f} → {min(s_hi):.2f}–{max(s_hi):.2f}",
                "rounds": len(both) if len(both) == len(entries) else f"{len(both)} of {len(entries)}",
                "verdict": v, "rounds agreeing": f"{agree}/{len(both)}",
                "measured / predicted": f"{statistics.median(ratios):.2f}" if ratios else
                {"lower": "< 0.83", "higher": "> 1.2"}.get(v),
                "_verdict": v, "_agree": agree, "_rounds": len(both)})
    return out

if __name__ == "__main__":
    main()
