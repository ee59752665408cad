"""Suite ``planner``: the performance model against measurement, every paradigm, per model.

    python -m workbench.bench planner --write                        # small_cnn and resnet18, 3 ranks, loopback
    python -m workbench.bench planner --models vgg16 --workers 4
    python -m workbench.bench planner --bandwidths loopback,emulated:50mbit,emulated:200mbit,emulated:1gbit --repeats 3 --write   # root
    python -m workbench.bench planner --tiny                         # CI smoke: small_cnn, 2 ranks, sync and ps
    python -m workbench.bench planner --models small_cnn,resnet18 --bandwidths loopback,emulated:200mbit,emulated:1gbit,emulated:4gbit --repeats 3 --resume --rounds experiments/planner-rounds --stop-after 100 --write   # root; hours here: run it again until done
    python -m workbench.bench planner --models small_cnn --workers 2 --pin --bandwidths loopback,emulated:500mbit,emulated:1gbit,emulated:1.4gbit,emulated:2gbit --repeats 3 --resume --rounds experiments/planner-rounds/xeon-host-pinned --host xeon-spr-pinned --write   # root; ranks pinned (cluster.pin), another machine's section

For each model: ``python -m workbench.plan <model> --verify`` at each of ``--bandwidths`` (the
profile, then every paradigm for 12 + 8 steps, ``workbench/plan.py``): ``loopback``, and
``emulated:<rate>``, every rank behind its own link shaped to the rate (``network=emulated``, root).
One row per paradigm and bandwidth with the predicted and measured step time, the error, and
predicted vs measured bytes per worker per step (exact unless a row says otherwise). With
``--repeats R`` every run is repeated in R interleaved rounds, each after a fresh profile (the host's
speed drifts within an hour); the row shows the median measured step, its min–max, the median
prediction and the median of the rounds' errors (each round's prediction against its own runs). The notes give the error distribution (median and
90th percentile of |error|).

Each (round, bandwidth) is stored once measured, with its profile (``--rounds``, by default
``<out>/planner/rounds/``). With ``--resume`` a command keeps the stored ones and runs only what is
missing: a matrix longer than a sitting (ResNet-18 behind 200 Mbit/s links takes about 30 min a
round on 2 cores) is finished by running the same command again, and a round cut off mid-way is
measured again from its first missing bandwidth, after a fresh profile. ``--stop-after MINUTES``
starts nothing after that long, so a sitting ends with whole measurements and a table of them (the
notes say how many are missing); ``--stop-after 0`` measures nothing and scores what is stored. ``--rounds experiments/planner-rounds`` is the directory git
keeps: a matrix is finished on another day, or another machine, by the same command. Every stored
round is predicted again from its own profile by the model as it is now, so a change to the model
is scored against the same runs in seconds (``--resume`` with nothing missing runs nothing), and a
round from another machine is scored against its own host; the crossovers are compared round by
round for the same reason. The notes say how many were kept and when they were measured. Step
times depend on the machine and its load (quoted with the table); bytes do not.

A profile per round is not enough on a VM whose speed moves by 20–25 % within half an hour
(docs/planner.md). So each (round, bandwidth) carries a drift guard: the lockstep span of all the
ranks (``perfmodel.profile.host_span``, half a minute for ResNet-18) right after the round's
profile, then before and after the unit's runs. The column ``drift`` shows the ratio of their
mean to the first (a range over the rounds), and the notes give the error of the predictions from
the profile on a host slower by that ratio (``Profile.drifted``: every measured second times it,
the links' shapers untouched). The table itself predicts from the profile as measured: the span
moves between launches by more than the host drifts, and the correction made the first 13 units'
errors worse (docs/planner.md).
"""
from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Optional

from workbench.bench import report

MODELS = ("small_cnn", "resnet18")
WORKERS = 3
COMMITTED = "experiments/planner-rounds"  # the rounds' directory git keeps (.gitignore)


def main(argv=None) -> None:
    p = report.parser("planner", __doc__, "small_cnn, 2 ranks, sync and ps")
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--workers", type=int, default=WORKERS, help="processes per run (cluster.nproc)")
    p.add_argument("--batch", type=int, default=16, help="samples per worker per step")
    p.add_argument("--only", default="", help="paradigm labels or prefixes (default: every one)")
    p.add_argument("--bandwidths", default="loopback", help="loopback and/or emulated:<rate> (root), comma separated")
    p.add_argument("--repeats", type=int, default=1, help="interleaved rounds of every run; medians + spread")
    p.add_argument("--resume", action="store_true",
                   help="keep the measurements of rounds already run with these arguments (--rounds); "
                        "run only what is missing, and predict every round again with the current model")
    p.add_argument("--rounds", default=None,
                   help="where each (round, bandwidth) is stored (default <out>/planner/rounds; "
                        f"{COMMITTED} is kept in git, so a matrix can be finished on another day and machine)")
    p.add_argument("--stop-after", type=float, default=None, metavar="MINUTES",
                   help="start no (round, bandwidth) once this many minutes have passed since the first began (0: "
                        "measure nothing, score what is stored); the table has what is measured, the notes say what "
                        "is missing (run the same command again)")
    p.add_argument("--host", default="", help="a label for the machine the rounds are taken on, when it is not the "
                   "usual one (e.g. xeon-spr): its own section and report directory")
    p.add_argument("--pin", action="store_true", help="each rank pinned to its own cores (cluster.pin=true), in "
                   "the profiles and the runs alike; with --resume, rounds stored the other way are refused")
    a = p.parse_args(argv)
    report.check_host(a.host)
    if a.stop_after is not None and a.stop_after < 0:
        raise SystemExit(f"error: invalid value {a.stop_after!r} for --stop-after: must be >= 0 minutes")
    if a.tiny:
        a.models, a.workers, a.only = "small_cnn", 2, "sync,ps"
    import copy
    from workbench.perfmodel.profile import host_span
    from workbench.plan import _plan_rows, check_verifiable, error_quantiles, parse_bandwidths, verify
    bandwidths = parse_bandwidths(a.bandwidths)
    check_verifiable(bandwidths)
    out = Path(a.out) / "planner"
    store = Path(a.rounds) if a.rounds else out / "rounds"
    import time
    started = None  # when this sitting's first measurement began: --stop-after counts from it
    only = [o for o in a.only.split(",") if o]
    rows = []
    drifts: list = []  # the drift guard's ratio of every (round, bandwidth) that has one
    rounds_by_model, cfg_by_model = {}, {}
    missing = 0  # (round, bandwidth)s --stop-after left for another sitting
    kept: list = []  # when each (round, bandwidth) measurement an earlier sitting made was finished
    # what earlier sittings stored (--resume), every one checked before anything runs
    stored = {path: unit for path in (store / unit_name(m, a.workers, a.batch, bw, k, only)
                                      for m in a.models.split(",") for k in range(1, a.repeats + 1) for bw in bandwidths)
              if a.resume and (unit := load_unit(path)) is not None}
    report.check_pinned({f.name: u["profile"].machine for f, u in stored.items()}, a.pin, store)
    for model in a.models.split(","):
        # the profile's ranks are pinned as the runs' are, or not (workbench.dist.pin_rank)
        ov = [f"model={model}", *report.data_overrides(model, a.batch), "cluster.timeout_s=600",
              f"output_root={out / 'runs'}", *(["testbed.pin=true"] if a.pin else [])]
        # With rounds, each profiles anew before its runs, so that a row's error compares a prediction
        # and a measurement of the same minutes: this host's speed drifted by 20–50 % within an hour
        # (a bare 3-rank DDP loop: 7.3–7.8 ms a step at 15:45, 9.1–11.5 ms at 16:38, docs/planner.md).
        # Each (round, bandwidth) is stored with its profile once measured, so an interrupted sitting
        # resumes (--resume) and every stored one is predicted again by the model as it is now.
        rounds = []
        for k in range(1, a.repeats + 1):
            round_rows, prof, ref = [], None, None
            for bw in bandwidths:
                path = store / unit_name(model, a.workers, a.batch, bw, k, only)
                unit = stored.get(path)
                if unit is not None:
                    kept.append(unit["finished"])
                else:
                    if a.stop_after is not None and (a.stop_after == 0 or started is not None
                                                     and time.monotonic() - started > 60 * a.stop_after):
                        print(f"--stop-after: {model} round {k} at {bw} is left for another sitting")
                        missing += 1
                        continue
                    started = started or time.monotonic()
                    plan_rows, (vs, prof) = _plan_rows(ov, [bw], [a.workers], prof, 1.0, "50us", only, str(out),
                                                       print, refresh=prof is None and (a.repeats > 1 or a.resume))
                    # the drift guard: how fast the host is right after the profile, then before and
                    # after this unit's runs (Profile.drifted; a unit of ResNet-18 lasts 15–30 min)
                    cfg = vs[a.workers][0].cfg
                    ref = ref if ref is not None else host_span(cfg, a.workers)
                    before = host_span(cfg, a.workers)
                    got = verify(copy.deepcopy(plan_rows), vs, out / "runs")
                    after = host_span(cfg, a.workers)
                    print(f"drift guard: {model} at {bw}: the host's span {1e3 * ref:.1f} ms after the profile, "
                          f"{1e3 * before:.1f} before the runs, {1e3 * after:.1f} after")
                    save_unit(path, prof, got, drift={"reference_s": ref, "before_s": before, "after_s": after})
                    unit = load_unit(path)
                got, cfg_by_model[model] = unit_rows(unit, ov, bw, a.workers, only, out)
                round_rows += got
            rounds.append(round_rows)
            drifts += list({(r["bandwidth"]): r["drift"] for r in round_rows if r.get("drift") is not None}.values())
        if not any(rounds):
            continue
        rounds_by_model[model] = rounds
        for r in merged([rs for rs in rounds if rs]):
            row = {"model": model, "paradigm": r["paradigm"], "bandwidth": r["bandwidth"], "N": a.workers,
                   "predicted ms": 1e3 * r["predicted_step_s"], "measured ms": 1e3 * r["measured_step_s"] if "measured_step_s" in r else None,
                   "spread ms": r.get("measured_step_ms spread"), "repeats": r.get("repeats"),
                   "error": f"{100 * r['error']:+.1f} %" if "error" in r else r.get("measured_status"),
                   "predicted B/step": round(r["predicted_bytes_per_step"]),
                   "measured B/step": round(r["measured_bytes_per_step"]) if "measured_bytes_per_step" in r else None,
                   "bytes": "exact" if r.get("bytes_error") == 0 else (f"{100 * r['bytes_error']:+.3f} %" if "bytes_error" in r else ""),
                   "bottleneck": r["bottleneck"], "drift": r.get("drift_range"), "_err": r.get("error"),
                   "_drifted": r.get("error_drifted"), "_noise": r.get("noise")}
            rows.append(row)
            report.progress({k: v for k, v in row.items() if not k.startswith("_")})
    errs = [r["_err"] for r in rows if r["_err"] is not None]
    notes = ""
    if errs:
        med, p90 = error_quantiles(errs)
        notes = (f"Step time |error| over {len(errs)} runs: median {100 * med:.1f} %, "
                 f"90th percentile {100 * p90:.1f} % (target: 10 % and 20 %). Bytes exact in "
                 f"{sum(r['bytes'] == 'exact' for r in rows)}/{len(rows)} rows.")
        guarded = [r["_drifted"] for r in rows if r["_err"] is not None and r.get("_drifted") is not None]
        if drifts:
            gmed, gp90 = error_quantiles(guarded)
            notes += (f" Drift guard (column 'drift'): the lockstep span of every rank in a fresh launch right after "
                      f"the round's profile, then before and after each (round, bandwidth)'s runs; the ratio of "
                      f"the last two's mean to the first, {len(drifts)} of them measured, {min(drifts):.2f}–"
                      f"{max(drifts):.2f}. The table predicts from the profiles as measured; from the profiles "
                      f"scaled by that ratio (Profile.drifted) the same rows' |error| is median {100 * gmed:.1f} %, "
                      f"90th percentile {100 * gp90:.1f} %.")
        noise = [r["_noise"] for r in rows if r.get("_noise") is not None]
        if noise:
            # what the measurement itself resolves: a model cannot be shown closer than its target's spread
            notes += (f" The measurement's own spread, (max − min) / median of a row's {a.repeats} rounds: median "
                      f"{100 * statistics.median(noise):.0f} %, largest {100 * max(noise):.0f} %.")
    units = a.repeats * len(bandwidths) * len(a.models.split(","))
    if kept:
        notes += (f" {len(kept)} of {units} (round, bandwidth) measurements "
                  f"were kept from earlier sittings (--resume; finished {min(kept)} to {max(kept)}), predicted again from their own profiles.")
    if missing:
        notes += (f" **Incomplete: {missing} of {units} (round, bandwidth) measurements are not taken yet** "
                  f"(--stop-after); run the same command again to add them.")
    cross = crossovers(rounds_by_model, cfg_by_model, a.workers)
    if cross:
        ok = [c for c in cross if c["_ratio"] is not None]
        within = sum(abs(c["_ratio"] - 1) <= 0.2 for c in ok)
        read = sum(c["_read_ratio"] is not None and abs(c["_read_ratio"] - 1) <= 0.2 for c in ok)
        notes += (f" Compression crossovers located by the sweep: {len(ok)} of {len(cross)} compressors; "
                  f"{within} of {len(ok)} predicted within 20 % of the measured one (the target), {read} read at "
                  f"the sweep's rates (the model's speed-ups at the measured rates, read between them as the "
                  f"measured ones are).")
        res = [c for c in ok if c.get("_spread") is not None]
        if res:
            beyond = sum(c["_spread"] > c["_tolerance"] for c in res)
            notes += (f" For {beyond} of {len(res)} the rounds' own speed-ups at the two rates around the crossing "
                      f"differ by more than the speed-up error that moves it 20 % (columns 'speed-up error that "
                      f"moves it 20 %' and 'rounds' speed-up spread there'): there the sweep cannot resolve the "
                      f"target.")
    cols = ["model", "paradigm", "bandwidth", "N", "predicted ms", "measured ms"] + (
        ["spread ms", "repeats"] if a.repeats > 1 else []) + ["error", "predicted B/step", "measured B/step",
                                                              "bytes", "bottleneck", "drift"]
    t = report.Table(f"planner_N{a.workers}", f"Planner: predicted vs measured step time and bytes per worker per step, "
                     f"{a.workers} ranks, batch {a.batch} per worker"
                     + (f", medians of {a.repeats} interleaved rounds (spread: min–max)" if a.repeats > 1 else ""),
                     rows, cols)
    tables = [t] + ([report.Table(f"crossover_N{a.workers}", "Compression crossover on the emulated links: the link "
                                  "rate below which a compressor beats sync, per round measured (log-linear between "
                                  "the measured rates, as the bandwidth suite) vs the model's from that round's "
                                  "profile (bisection of its predicted gain on the same emulated cluster) and "
                                  "read at the sweep's rates (the model's speed-ups at the measured rates, "
                                  "log-linear between them as the measured one); each ratio is the median of "
                                  "the rounds' ratios",
                                  [{k: v for k, v in c.items() if not k.startswith("_")} for c in cross])] if cross else [])
    cmd = ("python -m workbench.bench planner " + " ".join(argv if argv is not None else [])).strip()
    # one section per model set, so a second command (another model) adds its table, not replaces;
    # and one per rank count and machine (2 ranks on 2 cores is another regime than 3)
    name = ("" if a.models == ",".join(MODELS) else f", {a.models}") + ("" if a.bandwidths == "loopback" else f", {a.bandwidths}")
    name += ("" if a.workers == WORKERS or a.tiny else f", {a.workers} ranks") + (f", on {a.host}" if a.host else "")
    path = report.write("planner" + name.replace(", ", "-").replace(",", "-").replace(":", "").replace(" ", ""),
                        "Planner: model vs measured" + name,
                        cmd, tables, notes=notes, out_root=a.out,
                        benchmarks_md=report.ROOT / "BENCHMARKS.md" if a.write else None)
    print("\n" + "\n\n".join(x.markdown() for x in tables) + f"\n\n{notes}\n\nreport: {path / 'report.html'}")


def unit_name(model: str, workers: int, batch: int, bandwidth: str, k: int, only: list) -> str:
    """The file of one (round, bandwidth)'s measurements under ``<out>/planner/rounds/``."""
    slug = lambda t: "".join(c if c.isalnum() else "_" for c in t)  # noqa: E731
    return f"{model}-N{workers}-b{batch}-{slug(bandwidth)}-r{k}" + (f"-{slug(','.join(only))}" if only else "") + ".json"


def save_unit(path: Path, prof, rows: list, drift: Optional[dict] = None) -> None:
    """One (round, bandwidth): its profile, what each run measured (``plan.verify_variant``'s
    keys) and the drift guard's spans (:func:`drift_ratio`), written whole (``runstore.write_json``)
    so an interrupted sitting leaves none half."""
    import datetime
    import os

    from workbench.runs import store as runstore
    measured = {r["paradigm"]: {k: v for k, v in r.items() if k.startswith("measured_") or k == "run_dir"}
                for r in rows}
    path.parent.mkdir(parents=True, exist_ok=True)
    runstore.write_json(path, {"profile": prof.to_json(), "measured": measured, "load": list(os.getloadavg()),
                               **({"drift": drift} if drift else {}),
                               "finished": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")})


def load_unit(path: Path):
    """A stored (round, bandwidth), its profile loaded; None if there is none, or if its profile is
    of a version older than today's model reads (then it is measured again)."""
    from workbench.runs import store as runstore
    from workbench.perfmodel.profile import PROFILE_READABLE, PROFILE_VERSION, Profile
    unit = runstore.read_json(path)
    if unit is None:
        return None
    prof = Profile.from_json(unit["profile"])
    if not prof.readable:
        print(f"{path.name}: profile version {prof.version}, this code reads {PROFILE_READABLE}–{PROFILE_VERSION}: "
              f"measuring it again")
        return None
    return {**unit, "profile": prof}


def drift_ratio(unit: dict) -> Optional[float]:
    """How much slower the host ran during a (round, bandwidth)'s runs than when its profile was
    taken: the mean of the lockstep spans (``profile.host_span``) before and after the runs over
    the one right after the profile (the same estimator on both sides: the profile's own span is a
    median of 3 releases for ResNet-18). None for a unit stored without the guard (before
    2026-12-03 evening). The profile's span cannot stand in for the reference, and one span cannot
    stand for a unit: on this VM Random-K's step went 1,377 → 1,311 → 1,646 ms over one round's
    three units, and one launch's span of the small CNN reads 11.3–13.9 ms within two minutes."""
    d = unit.get("drift")
    if not d:
        return None
    return (d["before_s"] + d["after_s"]) / 2 / d["reference_s"]


def unit_rows(unit: dict, overrides: list, bw: str, workers: int, only: list, out: Path):
    """A stored (round, bandwidth) predicted again by the model as it is now from its profile and
    scored against its runs; with the drift guard's ratio (:func:`drift_ratio`) also from the
    profile on a host that slow (``Profile.drifted``), whose error (``error_drifted``) the notes
    give beside the table's. The table keeps the profile as measured: over the first 13 units with
    the guard, its correction made the errors worse (median 9.6 → 10.0 %, 90th percentile 24.2 →
    27.6 %), because the span it reads moves between launches more than the host drifts (the small
    CNN: 8.6 and 13.8 ms before and after one unit; docs/planner.md). Returns the rows and the
    runs' config (the crossovers are predicted on it)."""
    from workbench.plan import _plan_rows, scored
    ratio = drift_ratio(unit)
    prof = unit["profile"]
    plan_rows, (vs, _) = _plan_rows(overrides, [bw], [workers], prof, 1.0, "50us", only, str(out), print)
    drifted = {}
    if ratio:
        guarded, _ = _plan_rows(overrides, [bw], [workers], prof.drifted(ratio), 1.0, "50us", only, str(out), print)
        drifted = {r["paradigm"]: r["predicted_step_s"] for r in guarded}
    out_rows = []
    for r in plan_rows:
        m = unit["measured"].get(r["paradigm"])
        if m is None:
            continue
        row = {**scored(r, m), "_profile": prof, "drift": ratio}
        if "measured_step_s" in m:
            row["error_drifted"] = drifted.get(r["paradigm"], r["predicted_step_s"]) / m["measured_step_s"] - 1
        out_rows.append(row)
    return out_rows, vs[workers][0].cfg


def crossovers(rounds_by_model: dict, cfgs: dict, workers: int) -> list:
    """Per model and compressor, where its speed-up over ``sync`` crosses 1 across the emulated rates,
    round by round: measured from the round's runs (``bench.bandwidth.crossing``: log-linear between
    the two rates it falls between) and the model's from the round's own profile (the median over
    its profiles where a resumed round has more than one), on the same emulated cluster. The ratio
    is the median of the rounds' ratios, so rounds taken on other days or machines each compare a
    prediction with the runs it was made for. Beside it the model's crossover read at the sweep's
    rates: its speed-ups at the measured rates (the rows' predictions), log-linear between them as
    the measured one is, so that both carry the same interpolation (a speed-up is not log-linear in
    the rate). [] with fewer than two emulated rates."""
    from workbench.bench.bandwidth import crossing, finite, rate_range
    from workbench.plan import EMULATED, bandwidth_bps, emulated_crossover_bps
    out = []
    for model, rounds in rounds_by_model.items():
        mine = [[r for r in rs if str(r["bandwidth"]).startswith(EMULATED) and "measured_step_s" in r]
                for rs in rounds]
        rates = sorted({r["bandwidth"] for rs in mine for r in rs}, key=bandwidth_bps)
        if len(rates) < 2:
            continue
        for comp in sorted({r["paradigm"] for rs in mine for r in rs if r["paradigm"].startswith("compressed/")}):
            name = comp.split("/", 1)[1]
            measured, predicted, ratios, speeds, reads, read_ratios = [], [], [], {}, [], []
            for rs in mine:
                sync, meas = _steps(rs, "sync", "measured_step_s"), _steps(rs, comp, "measured_step_s")
                both = [b for b in rates if b in sync and b in meas]
                speed = [(bandwidth_bps(b), sync[b] / meas[b]) for b in both]
                profs = list({id(r["_profile"]): r["_profile"] for r in rs if r["paradigm"] == comp}.values())
                if len(speed) < 2 or not profs or name not in profs[0].codecs:
                    continue
                # the model's speed-ups at the same rates, read between them as the measured ones are
                psync, pcomp = _steps(rs, "sync", "predicted_step_s"), _steps(rs, comp, "predicted_step_s")
                read = crossing([(bandwidth_bps(b), psync[b] / pcomp[b]) for b in both if b in psync and b in pcomp])
                for b, sp in speed:
                    speeds.setdefault(b, []).append(sp)
                m = crossing(speed)
                preds = [emulated_crossover_bps(cfgs[model], prof, workers, name) for prof in profs]
                pf = [x for x in preds if finite(x)]
                p = statistics.median(pf) if len(pf) == len(preds) else preds[0]
                measured.append(m)
                predicted.append(p)
                reads.append(read)
                if finite(m) and finite(p):
                    ratios.append(p / m)
                if finite(m) and finite(read):
                    read_ratios.append(read / m)
            if not measured:
                continue
            ratio = statistics.median(ratios) if ratios else None
            read_ratio = statistics.median(read_ratios) if read_ratios else None
            out.append({"model": model, "compressor": name, "measured crossover": rate_range(measured),
                        "predicted crossover": rate_range(predicted),
                        "predicted / measured": f"{ratio:.2f}" if ratio else None,
                        "rounds": f"{len(ratios)}/{len(measured)}",
                        "predicted, read at the sweep's rates": rate_range(reads),
                        "read / measured": f"{read_ratio:.2f}" if read_ratio else None,
                        "speed-up vs sync, lowest → highest rate":
                            " → ".join(f"{statistics.median(speeds[b]):.2f}" for b in sorted(speeds)),
                        **resolution(speeds),
                        "_ratio": ratio, "_read_ratio": read_ratio})
    return out


def _steps(rows: list, paradigm: str, key: str) -> dict:
    """One round's ``key`` (measured or predicted step) of ``paradigm`` per bandwidth."""
    return {r["bandwidth"]: r[key] for r in rows if r["paradigm"] == paradigm and key in r}


def resolution(speeds: dict) -> dict:
    """What the sweep resolves of a crossover: between the two rates where the median speed-up
    crosses 1, the speed-up error (both rates' speed-ups off by one factor) that moves the crossing
    read between them (``bandwidth.crossing``) by 20 %: a shallow curve turns a few per cent of
    speed-up into a large move of the rate; beside it the rounds' own spread of the speed-up at
    those two rates ((max − min) / median, the larger). A crossover whose spread exceeds its
    tolerance cannot be shown within 20 % by these rounds, whatever the model."""
    pts = [(b, statistics.median(v)) for b, v in sorted(speeds.items())]
    for (b0, s0), (b1, s1) in zip(pts, pts[1:]):
        if s0 > 1 >= s1 and s1 > 0:
            # crossing() is linear in the speed-up over ln rate: scaling both speed-ups by f moves
            # the crossing by (1 − 1/f) / (s0 − s1) of the segment, 20 % when that is ln 1.2 / ln(b1/b0)
            shift = (s0 - s1) * math.log(1.2) / math.log(b1 / b0)
            tol = 1 / (1 - shift) - 1 if shift < 1 else math.inf
            spread = max((max(speeds[b]) - min(speeds[b])) / statistics.median(speeds[b]) for b in (b0, b1))
            many = len(speeds[b0]) > 1 or len(speeds[b1]) > 1
            return {"speed-up error that moves it 20 %": f"{100 * tol:.1f} %",
                    "rounds' speed-up spread there": f"{100 * spread:.0f} %" if many else None,
                    "_tolerance": tol, "_spread": spread if many else None}
    return {}


def merged(rounds: list) -> list:
    """The rounds' rows merged per (paradigm, bandwidth): median measured step and its min–max in
    ms (``measured_step_ms spread``), the median prediction (each round has its own profile) and
    the median of the rounds' errors, each a round's prediction against its own measurement (with
    one profile for every round that is the error of the median measurement); bytes are
    deterministic, so their median is every round's count. ``drift_range``: the drift guard's
    ratios of the rounds' units (:func:`drift_ratio`), ``error_drifted`` the median error with it."""
    raw: dict = {}
    for rs in rounds:
        for r in rs:
            if "measured_step_s" in r:
                raw.setdefault((r["paradigm"], r["bandwidth"]), []).append(
                    (r["predicted_step_s"], r["measured_step_s"], r.get("error_drifted"), r.get("drift")))
    if len(rounds) == 1:
        rows = [dict(r) for r in rounds[0]]
    else:
        keep = ("paradigm", "bandwidth", "workers", "predicted_step_s", "predicted_bytes_per_step", "bottleneck",
                "measured_bytes_per_step", "bytes_error", "measured_status")
        ms = lambda r: {"measured_step_ms": 1e3 * r["measured_step_s"]} if "measured_step_s" in r else {}  # noqa: E731
        rows = report.merge_repeats([[{**{k: r[k] for k in keep if k in r}, **ms(r)} for r in rs] for rs in rounds],
                                    lambda r: (r["paradigm"], r["bandwidth"]), ["measured_step_ms"])
    for r in rows:
        pairs = raw.get((r["paradigm"], r["bandwidth"]), [])
        if not pairs:
            continue
        if len(rounds) > 1:
            r["measured_step_s"] = r["measured_step_ms"] / 1e3
            r["predicted_step_s"] = statistics.median(p for p, *_ in pairs)
            r["error"] = statistics.median(p / m - 1 for p, m, *_ in pairs)
            vals = [m for _, m, *_ in pairs]
            if len(vals) > 1:  # (max − min) / median of the rounds: what the measurement itself resolves
                r["noise"] = (max(vals) - min(vals)) / r["measured_step_s"]
        scaled = [e if e is not None else p / m - 1 for p, m, e, _ in pairs]
        r["error_drifted"] = statistics.median(scaled)
        ds = sorted(d for *_, d in pairs if d is not None)
        if ds:
            lo, hi = f"{ds[0]:.2f}", f"{ds[-1]:.2f}"  # ends that print alike print once (0.995 and 1.004: "1.00")
            r["drift_range"] = lo if lo == hi else f"{lo}–{hi}"
    return rows


if __name__ == "__main__":
    main()
