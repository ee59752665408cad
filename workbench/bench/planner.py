"""Suite ``planner``: the performance model against measurement, every paradigm, per model.

    python -m workbench.bench planner --write                        # small_cnn and resnet18, 3 ranks, loopback
    python -m workbench.bench planner --models vgg16 --workers 4
    python -m workbench.bench planner --bandwidths loopback,emulated:50mbit,emulated:200mbit,emulated:1gbit --repeats 3 --write   # root
    python -m workbench.bench planner --tiny                         # CI smoke: small_cnn, 2 ranks, sync and ps
    python -m workbench.bench planner --models small_cnn,resnet18 --bandwidths loopback,emulated:200mbit,emulated:1gbit,emulated:4gbit --repeats 3 --resume --rounds experiments/planner-rounds --stop-after 100 --write   # root; hours here: run it again until done
    python -m workbench.bench planner --models small_cnn --workers 2 --pin --bandwidths loopback,emulated:500mbit,emulated:1gbit,emulated:1.4gbit,emulated:2gbit --repeats 3 --resume --rounds experiments/planner-rounds/xeon-host-pinned --host xeon-spr-pinned --write   # root; ranks pinned (testbed.pin), another machine's section

For each model: ``python -m workbench.plan <model> --verify`` at each of ``--bandwidths`` (the
profile, then every paradigm for 12 + 8 steps, ``workbench/plan/``): ``loopback``, and
``emulated:<rate>``, every rank behind its own link shaped to the rate (``network=emulated``, root).
One row per paradigm and bandwidth with the predicted and measured step time, the error, and
predicted vs measured bytes per worker per step (exact unless a row says otherwise). With
``--repeats R`` every run is repeated in R interleaved rounds, each after a fresh profile (the host's
speed drifts within an hour); the row shows the median measured step, its min–max, the median
prediction and the median of the rounds' errors (each round's prediction against its own runs).
The notes give the error distribution (median and 90th percentile of |error|). The suite prints
each (round, bandwidth) as it starts (``planner i/N``), each paradigm's run within it
(``verify i/N``), and a row per paradigm once its rounds are in.

Each (round, bandwidth) is stored once measured, with its profile (``--rounds``, by default
``<out>/planner/rounds/``). With ``--resume`` a command keeps the stored ones and runs only what is
missing: a matrix longer than one session (ResNet-18 behind slow emulated links takes tens of
minutes a round on a small machine) is finished by running the same command again, and a round cut
off mid-way is measured again from its first missing bandwidth, after a fresh profile.
``--stop-after MINUTES`` starts nothing after that long, so a session ends with whole measurements
and a table of them (the notes say how many are missing); ``--stop-after 0`` measures nothing and
scores what is stored. ``--rounds experiments/planner-rounds`` is the directory git keeps: a matrix is finished on another day, or another machine, by the same command. Every stored
round is predicted again from its own profile by the model as it is now, so a change to the model
is scored against the same runs in seconds (``--resume`` with nothing missing runs nothing), and a
round from another machine is scored against its own host; the crossovers are compared round by
round for the same reason. The notes say how many were kept and when they were measured. Step
times depend on the machine and its load (quoted with the table); bytes do not.

A profile per round is not enough on a host whose speed moves within half an hour
(docs/planner.md). So each (round, bandwidth) carries a drift guard: the lockstep span of all the
ranks (``perfmodel.profile.host_span``, half a minute for ResNet-18) right after the round's
profile, then before and after the unit's runs. The column ``drift`` shows the ratio of their
mean to the first (a range over the rounds), and the notes give the error of the predictions from
the profile on a host slower by that ratio (``Profile.drifted``: every measured second times it,
the links' shapers untouched). The table itself predicts from the profile as measured: the span
moves between launches by more than the host drifts, so the correction does not make the errors
smaller (docs/notes/2026-12-06-bench-history.md).
"""
from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from workbench.bench import suite
from workbench.bench.planner_rounds import drift_ratio, load_unit, save_unit, unit_name, unit_rows  # noqa: F401

MODELS = ("small_cnn", "resnet18")
WORKERS = 3
COMMITTED = "experiments/planner-rounds"  # the rounds' directory git keeps (.gitignore)


def parser():
    p = suite.parser("planner", __doc__, "small_cnn, 2 ranks, sync and ps")
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
    p.add_argument("--pin", action="store_true", help="each rank pinned to its own cores (testbed.pin=true), in "
                   "the profiles and the runs alike; with --resume, rounds stored the other way are refused")
    return p


@dataclass
class Session:
    """What one command measures, keeps and leaves: ``--stop-after`` counts from its first measurement."""
    started: Optional[float] = None  # when its first measurement began
    done: int = 0  # (round, bandwidth)s begun or kept so far, of ``units``
    units: int = 0
    missing: int = 0  # (round, bandwidth)s --stop-after left for a later session
    kept: list = field(default_factory=list)  # when each measurement an earlier session made was finished
    drifts: list = field(default_factory=list)  # the drift guard's ratio of every (round, bandwidth) that has one

    def out_of_time(self, stop_after: Optional[float]) -> bool:
        return stop_after is not None and (stop_after == 0 or self.started is not None
                                           and time.monotonic() - self.started > 60 * stop_after)


def main(argv=None) -> None:
    a = parser().parse_args(argv)
    suite.check_host(a.host)
    if a.stop_after is not None and a.stop_after < 0:
        raise SystemExit(f"error: invalid value {a.stop_after!r} for --stop-after: must be >= 0 minutes")
    if a.tiny:
        a.models, a.workers, a.only = "small_cnn", 2, "sync,ps"
    from workbench.plan import check_verifiable, parse_bandwidths
    bandwidths = parse_bandwidths(a.bandwidths)
    check_verifiable(bandwidths)
    out = Path(a.out) / "planner"
    store = Path(a.rounds) if a.rounds else out / "rounds"
    only = [o for o in a.only.split(",") if o]
    models = a.models.split(",")
    # what earlier sessions stored (--resume), every one checked before anything runs
    stored = {path: unit for path in (store / unit_name(m, a.workers, a.batch, bw, k, only)
                                      for m in models for k in range(1, a.repeats + 1) for bw in bandwidths)
              if a.resume and (unit := load_unit(path)) is not None}
    suite.check_pinned({f.name: u["profile"].machine for f, u in stored.items()}, a.pin, store)
    session = Session(units=a.repeats * len(bandwidths) * len(models))
    rows, rounds_by_model, cfg_by_model = [], {}, {}
    for model in models:
        rounds, cfg_by_model[model] = measure_model(a, model, bandwidths, store, stored, only, out, session)
        if not any(rounds):
            continue
        rounds_by_model[model] = rounds
        for r in merged([rs for rs in rounds if rs]):
            rows.append(table_row(model, r, a.workers))
            suite.progress({k: v for k, v in rows[-1].items() if not k.startswith("_")})
    cross = crossovers(rounds_by_model, cfg_by_model, a.workers)
    notes = error_notes(rows, session.drifts, a.repeats) + session_notes(session) + crossover_notes(cross)
    write(a, argv, rows, cross, notes)


def measure_model(a, model: str, bandwidths: list, store: Path, stored: dict, only: list, out: Path,
                  session: Session):
    """Every round of ``model`` at every bandwidth, each (round, bandwidth) kept from ``stored`` or
    measured now and stored; returns the rounds' scored rows and the runs' config (None if no
    round has one)."""
    # the profile's ranks are pinned as the runs' are, or not (workbench.dist.pin_rank)
    ov = [f"model={model}", *suite.data_overrides(model, a.batch), "cluster.timeout_s=600",
          f"output_root={out / 'runs'}", *(["testbed.pin=true"] if a.pin else [])]
    # With rounds, each profiles anew before its runs, so that a row's error compares a prediction
    # and a measurement of the same minutes: this host's speed drifts within an hour
    # (docs/planner.md). Each (round, bandwidth) is stored with its profile once measured, so an
    # interrupted session resumes (--resume) and every stored one is predicted again by the model as it is now.
    rounds, cfg = [], None
    for k in range(1, a.repeats + 1):
        round_rows, prof, ref = [], None, None
        for bw in bandwidths:
            path = store / unit_name(model, a.workers, a.batch, bw, k, only)
            unit = stored.get(path)
            if unit is not None:
                session.kept.append(unit["finished"])
                session.done += 1
            else:
                if session.out_of_time(a.stop_after):
                    print(f"--stop-after: {model} round {k} at {bw} is left for a later session")
                    session.missing += 1
                    continue
                session.started = session.started or time.monotonic()
                session.done += 1
                print(f"planner {session.done}/{session.units}: {model} round {k} at {bw} ...", flush=True)
                prof, ref = measure_unit(a, model, ov, bw, path, only, out, prof, ref)
                unit = load_unit(path)
            got, cfg = unit_rows(unit, ov, bw, a.workers, only, out)
            round_rows += got
        rounds.append(round_rows)
        session.drifts += list({(r["bandwidth"]): r["drift"] for r in round_rows if r.get("drift") is not None}.values())
    return rounds, cfg


def measure_unit(a, model: str, ov: list, bw: str, path: Path, only: list, out: Path, prof, ref):
    """One (round, bandwidth): the round's profile (measured here for its first bandwidth), every
    paradigm verified, the drift guard's spans around the runs; stored at ``path``. Returns the
    profile and the guard's reference span, for the round's next bandwidth."""
    import copy

    from workbench.perfmodel.profile import host_span
    from workbench.plan import _plan_rows, verify
    plan_rows, (vs, prof) = _plan_rows(ov, [bw], [a.workers], prof, 1.0, "50us", only, str(out),
                                       print, refresh=prof is None and (a.repeats > 1 or a.resume))
    # the drift guard: how fast the host is right after the profile, then before and after this
    # unit's runs (Profile.drifted)
    cfg = vs[a.workers][0].cfg
    ref = ref if ref is not None else host_span(cfg, a.workers)
    before = host_span(cfg, a.workers)
    got = verify(copy.deepcopy(plan_rows), vs, out / "runs")
    after = host_span(cfg, a.workers)
    print(f"drift guard: {model} at {bw}: the host's span {1e3 * ref:.1f} ms after the profile, "
          f"{1e3 * before:.1f} before the runs, {1e3 * after:.1f} after")
    save_unit(path, prof, got, drift={"reference_s": ref, "before_s": before, "after_s": after})
    return prof, ref


def table_row(model: str, r: dict, workers: int) -> dict:
    """A merged row (:func:`merged`) as the table's; the ``_``-keys feed the notes."""
    return {"model": model, "paradigm": r["paradigm"], "bandwidth": r["bandwidth"], "N": workers,
            "predicted ms": 1e3 * r["predicted_step_s"], "measured ms": 1e3 * r["measured_step_s"] if "measured_step_s" in r else None,
            "spread ms": r.get("measured_step_ms spread"), "repeats": r.get("repeats"),
            "error": f"{100 * r['error']:+.1f} %" if "error" in r else r.get("measured_status"),
            "predicted B/step": round(r["predicted_bytes_per_step"]),
            "measured B/step": round(r["measured_bytes_per_step"]) if "measured_bytes_per_step" in r else None,
            "bytes": "exact" if r.get("bytes_error") == 0 else (f"{100 * r['bytes_error']:+.3f} %" if "bytes_error" in r else ""),
            "bottleneck": r["bottleneck"], "drift": r.get("drift_range"), "_err": r.get("error"),
            "_drifted": r.get("error_drifted"), "_noise": r.get("noise")}


def error_notes(rows: list, drifts: list, repeats: int) -> str:
    """The step time's error distribution, with the drift guard's and the measurement's own spread."""
    from workbench.plan import error_quantiles
    errs = [r["_err"] for r in rows if r["_err"] is not None]
    if not errs:
        return ""
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
        notes += (f" The measurement's own spread, (max − min) / median of a row's {repeats} rounds: median "
                  f"{100 * statistics.median(noise):.0f} %, largest {100 * max(noise):.0f} %.")
    return notes


def session_notes(session: Session) -> str:
    """How many measurements were kept from earlier sessions, and how many are still missing."""
    notes = ""
    if session.kept:
        notes += (f" {len(session.kept)} of {session.units} (round, bandwidth) measurements were kept from earlier "
                  f"sessions (--resume; finished {min(session.kept)} to {max(session.kept)}), predicted again from "
                  f"their own profiles.")
    if session.missing:
        notes += (f" **Incomplete: {session.missing} of {session.units} (round, bandwidth) measurements are not taken "
                  f"yet** (--stop-after); run the same command again to add them.")
    return notes


def crossover_notes(cross: list) -> str:
    """How many compression crossovers the sweep located, and how many the model predicts within 20 %."""
    if not cross:
        return ""
    ok = [c for c in cross if c["_ratio"] is not None]
    within = sum(abs(c["_ratio"] - 1) <= 0.2 for c in ok)
    read = sum(c["_read_ratio"] is not None and abs(c["_read_ratio"] - 1) <= 0.2 for c in ok)
    notes = (f" Compression crossovers located by the sweep: {len(ok)} of {len(cross)} compressors; "
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
    return notes


def write(a, argv, rows: list, cross: list, notes: str) -> None:
    """The table (and the crossovers') to the report and, with --write, to BENCHMARKS.md."""
    cols = ["model", "paradigm", "bandwidth", "N", "predicted ms", "measured ms"] + (
        ["spread ms", "repeats"] if a.repeats > 1 else []) + ["error", "predicted B/step", "measured B/step",
                                                              "bytes", "bottleneck", "drift"]
    t = suite.Table(f"planner_N{a.workers}", f"Planner: predicted vs measured step time and bytes per worker per step, "
                     f"{a.workers} ranks, batch {a.batch} per worker"
                     + (f", medians of {a.repeats} interleaved rounds (spread: min–max)" if a.repeats > 1 else ""),
                     rows, cols)
    tables = [t] + ([suite.Table(f"crossover_N{a.workers}", "Compression crossover on the emulated links: the link "
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
    path = suite.write("planner" + name.replace(", ", "-").replace(",", "-").replace(":", "").replace(" ", ""),
                        "Planner: model vs measured" + name,
                        cmd, tables, notes=notes, out_root=a.out,
                        benchmarks_md=suite.ROOT / "BENCHMARKS.md" if a.write else None)
    print("\n" + "\n\n".join(x.markdown() for x in tables) + f"\n\n{notes}\n\nreport: {path / 'report.html'}")


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
        rows = suite.merge_repeats([[{**{k: r[k] for k in keep if k in r}, **ms(r)} for r in rs] for rs in rounds],
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
