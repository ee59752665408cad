"""The accuracy suite's tables from its runs: each run's steps and time to a target accuracy (its
first evaluation at or above it), final accuracy and median gradient noise scale, aggregated over
seeds (median, min–max), and for each table the paper's claim it tests with a verdict computed from
the rows. :mod:`workbench.bench.accuracy` launches the runs; this module only reads them.

An *entry* is one run of the suite: ``{"table": "a", "config": {...}, "seed": 0, "run": <dir>,
"record": {...}}``; ``config`` holds the columns that name the configuration (rule and batch,
paradigm, λ, ...), ``record`` what the tables need of the run (:func:`record`), so that an index
read in another checkout, without the run directories, gives the same tables.
"""
from __future__ import annotations

import math
import statistics
from pathlib import Path

from workbench.runs.handle import Run

CLAIMS = {
    "a": "Goyal et al. 2017 / Alchemist RQ5: with linear scaling and warm-up, final accuracy at a fixed "
         "epoch budget holds as the global batch grows, until it falls (Alchemist: from about 10³); "
         "McCandlish et al.: the batch where it falls is near the gradient noise scale B_noise",
    "b": "Shallue et al. 2019: steps to target fall in proportion to the batch (perfect scaling), then "
         "with diminishing returns, then not at all (maximal data parallelism), in that order",
    "c": "Alchemist RQ4: synchronous SGD reaches the target faster (time) and in fewer steps than the "
         "asynchronous and model-averaging variants",
    "d": "Rudra (Gupta et al. 2016): at constant μλ accuracy stays put as λ grows; when μλ grows with λ "
         "accuracy falls",
    "e": "Agarwal et al. 2022: compression costs steps to the same accuracy (every compressor needs at "
         "least as many steps as uncompressed sync)",
}


def record(run_dir) -> dict:
    """What a table's index keeps of one run, so that its tables outlive the run's directory: every
    evaluation as ``[step, time_s, test_accuracy, gradient_noise_scale or None]``, the final test
    accuracy and the run's status."""
    run = Run(run_dir)
    evals = [[r["step"], r.get("time"), r["test_accuracy"], r.get("gradient_noise_scale")]
             for r in run.records() if r.get("kind") == "eval" and r.get("test_accuracy") is not None]
    s = run.summary or {}
    return {"evals": evals, "final_acc": s.get("final_test_accuracy", evals[-1][2] if evals else None),
            "status": s.get("status", "failed")}


def measures(run, target: float) -> dict:
    """One run (its directory, or its :func:`record`): steps and time to ``target`` (None if never
    reached), final and best test accuracy, the median of its logged gradient noise scales (None
    without any), its last evaluated step and status."""
    rec = run if isinstance(run, dict) else record(run)
    evals = rec["evals"]
    hit = next((e for e in evals if e[2] >= target), None)
    gns = [e[3] for e in evals if isinstance(e[3], (int, float)) and math.isfinite(e[3])]
    return {"steps_to_target": hit[0] if hit else None, "time_to_target_s": hit[1] if hit else None,
            "final_acc": rec["final_acc"], "best_acc": max((e[2] for e in evals), default=None),
            "gns": statistics.median(gns) if gns else None, "last_step": evals[-1][0] if evals else None,
            "status": rec["status"]}


def _med(vals, missing_is_inf: bool = False):
    """Median and 'min–max' of the seeds' values; with ``missing_is_inf`` a seed that did not reach
    the target counts as infinitely slow (a median that lands there is None, 'not reached')."""
    xs = [math.inf if v is None else v for v in vals] if missing_is_inf else [v for v in vals if v is not None]
    if not xs:
        return None, ""
    m = statistics.median(xs)
    f = lambda v: "n.r." if v == math.inf else f"{v:.3g}" if isinstance(v, float) else f"{v:,}"  # noqa: E731
    return (None if m == math.inf else round(m, 4)), (f"{f(min(xs))}–{f(max(xs))}" if len(xs) > 1 else "")


def aggregate(entries: list, target: float, root: Path | None = None) -> dict:
    """``{table: [row, ...]}``: one row per configuration, in the order first launched, with the
    medians over its seeds and their min–max ("n.r.": a seed that never reached the target)."""
    groups: dict = {}
    for e in entries:
        key = (e["table"], tuple(e["config"].items()))
        if "record" in e:
            groups.setdefault(key, []).append(measures(e["record"], target))
            continue
        path = Path(e["run"]) if root is None or Path(e["run"]).is_absolute() else Path(root) / e["run"]
        groups.setdefault(key, []).append(measures(path, target))
    out: dict = {}
    for (table, cfg), ms in groups.items():
        row = dict(cfg)
        for col, inf in (("steps_to_target", True), ("time_to_target_s", True), ("final_acc", False)):
            row[col], row[f"{col} spread"] = _med([m[col] for m in ms], inf)
        row["gns"] = _med([m["gns"] for m in ms])[0]
        row["reached"] = f"{sum(m['steps_to_target'] is not None for m in ms)}/{len(ms)}"
        row["cap"] = max((m["last_step"] or 0) for m in ms)
        row["status"] = "/".join(sorted({m["status"] for m in ms}))
        out.setdefault(table, []).append(row)
    predicted = predicted_e(entries, target) if "e" in out else {}
    for row in out.get("e", []):
        preds = predicted.get(row["compressor"])
        row["predicted_steps"] = _med(preds, True)[0] if preds else None
    predicted = predicted_c(entries, target) if "c" in out else {}
    for row in out.get("c", []):
        preds = predicted.get((row["processes"], row["paradigm"]))
        row["predicted_steps"] = _med(preds, True)[0] if preds else None
    return out


def predicted_c(entries: list, target: float) -> dict:
    """Table (c): each paradigm's steps to ``target`` as the planner's law predicts them from the
    same seed's sync run on as many processes (its evaluations and global batch), at the run's own
    samples per worker step and declared update (:func:`workbench.bench.accuracy.law_fields`):
    ``{(processes, paradigm): [steps or None, ...]}``; paradigms without a law are left out."""
    from workbench.perfmodel.efficiency import Update, reference_from_evals, steps_to_target
    refs = {}
    for e in entries:
        rec = e.get("record") or {}
        if e["table"] == "c" and e["config"]["paradigm"] == "sync" and "global_batch" in rec:
            try:
                refs[(e["seed"], e["config"]["processes"])] = reference_from_evals(
                    rec["evals"], rec["global_batch"], target, rec["workers"])
            except ValueError:  # that seed's sync did not reach the target, or logged no noise scale
                continue
    out: dict = {}
    for e in entries:
        rec, key = e.get("record") or {}, (e["seed"], e["config"].get("processes"))
        if e["table"] == "c" and key in refs and rec.get("update") is not None:
            up = Update(*rec["update"])
            out.setdefault((key[1], e["config"]["paradigm"]), []).append(
                steps_to_target(refs[key], rec["global_batch"], workers=rec["workers"], update=up)[0])
    return out


def predicted_e(entries: list, target: float) -> dict:
    """Table (e): each compressor's steps to ``target`` as the planner's time-to-target law predicts
    them (docs/time_to_target.md), one per seed, from that seed's uncompressed sync run (its
    evaluations, its global batch, and every compressor's ρ and ω measured on its final weights,
    kept in its record as ``update_stats``): ``{compressor: [steps or None, ...]}``."""
    from workbench.perfmodel.efficiency import UpdateStats, reference_from_evals, steps_to_target
    refs = {}
    for e in entries:
        rec = e.get("record") or {}
        if e["table"] == "e" and "update_stats" in rec:
            try:
                refs[e["seed"]] = (reference_from_evals(rec["evals"], rec["global_batch"], target, rec["workers"]),
                                   rec["update_stats"])
            except ValueError:  # that seed's sync did not reach the target, or logged no noise scale
                continue
    out: dict = {}
    for e in entries:
        if e["table"] != "e" or e["seed"] not in refs:
            continue
        ref, stats = refs[e["seed"]]
        name = e["config"]["compressor"]
        st = UpdateStats() if name == "uncompressed sync" else stats.get(name)
        st = UpdateStats(*st) if isinstance(st, list) else st
        out.setdefault(name, []).append(None if st is None else steps_to_target(ref, ref.batch, st, ref.workers)[0])
    return out


def verdict_a(rows: list, tol: float) -> str:
    """Per rule: the batch from which the median final accuracy is more than ``tol`` below the
    rule's accuracy at its smallest batch; McCandlish: is that batch within a factor 4 of B_noise?"""
    lines = []
    for rule in dict.fromkeys(r["rule"] for r in rows):
        sub = sorted((r for r in rows if r["rule"] == rule), key=lambda r: r["batch"])
        base = sub[0]["final_acc"] or 0
        for r in sub:
            r["Δ acc"] = None if r["final_acc"] is None else round(r["final_acc"] - base, 4)
        fall = next((r["batch"] for r in sub if r["final_acc"] is None or r["final_acc"] < base - tol), None)
        gns = sub[0]["gns"]
        near = (f"; B_noise at B={sub[0]['batch']}: {gns:.0f}, "
                + ("consistent with McCandlish (within ×4)" if fall and gns and gns / 4 <= fall <= gns * 4
                   else "not within ×4 of the fall" if fall and gns
                   else "no fall within the range" if gns else "")) if gns else "; no B_noise logged"
        lines.append(f"- {rule}: " + (f"accuracy falls by more than {tol:.0%} from B={fall} — holds up to "
                                      f"B={max([r['batch'] for r in sub if r['batch'] < fall], default='none')}"
                                      if fall else f"holds over B={sub[0]['batch']}…{sub[-1]['batch']}") + near)
    return "\n".join(lines)


def verdict_b(rows: list, perfect: float = 0.8, flat: float = 0.9) -> str:
    """Each row's regime: scaling efficiency e = (S(B₀)/S(B)) / (B/B₀) against the smallest batch B₀;
    perfect where e ≥ ``perfect``; maximal data parallelism where S(B) ≥ ``flat`` · S(previous
    batch); diminishing returns between. Holds if the regimes appear in that order."""
    sub = sorted(rows, key=lambda r: r["batch"])
    order = {"perfect": 0, "diminishing": 1, "maximal": 2}
    prev = None
    for r in sub:
        s0, b0, s = sub[0]["steps_to_target"], sub[0]["batch"], r["steps_to_target"]
        if s is None or s0 is None:
            r["efficiency"], r["regime"] = None, "not reached"
            continue
        r["efficiency"] = round((s0 / s) / (r["batch"] / b0), 3)
        r["regime"] = ("perfect" if r["efficiency"] >= perfect else
                       "maximal" if prev is not None and s >= flat * prev else "diminishing")
        prev = s
    seq = [order[r["regime"]] for r in sub if r["regime"] in order]
    if not seq:
        return "- no batch reached the target: not tested"
    ends = next((r["batch"] for r in sub if r["regime"] != "perfect"), None)
    held = bool(seq) and seq == sorted(seq) and seq[0] == 0
    return (f"- regimes in order of batch: {', '.join(r['regime'] for r in sub)}; perfect scaling "
            + (f"ends at B={ends}" if ends else "holds over the whole range")
            + f" (test: e ≥ {perfect}, maximal: steps ≥ {flat}× the previous batch's); "
            + ("**holds**" if held else "**does not hold**"))


def verdict_c(rows: list) -> str:
    """Per process count: is sync's median time and steps to target at most every other paradigm's?"""
    lines = []
    for p in dict.fromkeys(r["processes"] for r in rows):
        sub = [r for r in rows if r["processes"] == p]
        sync = next((r for r in sub if r["paradigm"] == "sync"), None)
        others = [r for r in sub if r is not sync]
        if all(r["time_to_target_s"] is None for r in sub):
            lines.append(f"- {p} processes: no paradigm reached the target — not tested")
            continue
        if sync is None or sync["time_to_target_s"] is None:
            lines.append(f"- {p} processes: sync did not reach the target — **does not hold**")
            continue
        beat = [r["paradigm"] for r in others if r["time_to_target_s"] is not None
                and (r["time_to_target_s"] < sync["time_to_target_s"] or r["steps_to_target"] < sync["steps_to_target"])]
        lines.append(f"- {p} processes: sync {sync['time_to_target_s']:.3g} s, {sync['steps_to_target']} steps; "
                     + (f"faster or fewer steps: {', '.join(beat)} — **does not hold**" if beat else "**holds**"))
    law = sorted(abs(r["predicted_steps"] / r["steps_to_target"] - 1) for r in rows
                 if r.get("predicted_steps") and r["steps_to_target"] and r["paradigm"] != "sync")
    if law:
        lines.append(f"- the planner's time-to-target law (predicted_steps, docs/time_to_target.md) against the "
                     f"{len(law)} other paradigms that reached the target: median |error| "
                     f"{statistics.median(law):.0%}, largest {law[-1]:.0%}")
    return "\n".join(lines)


def verdict_d(rows: list, tol: float) -> str:
    """Constant μλ: the spread of the median accuracy over λ ≤ ``tol``; growing μλ: the accuracy at
    the largest λ is more than ``tol`` below the smallest λ's."""
    out = []
    for series in dict.fromkeys(r["series"] for r in rows):
        sub = sorted((r for r in rows if r["series"] == series), key=lambda r: r["λ"])
        accs = [r["final_acc"] for r in sub if r["final_acc"] is not None]
        if len(accs) < 2:
            out.append(f"- {series}: fewer than two λ with an accuracy")
            continue
        if series.startswith("constant"):
            span = max(accs) - min(accs)
            out.append(f"- {series}: accuracy spans {span:.1%} over λ — " + ("**holds**" if span <= tol else "**does not hold**"))
        else:
            drop = accs[0] - accs[-1]
            out.append(f"- {series}: accuracy falls by {drop:.1%} from λ={sub[0]['λ']} to λ={sub[-1]['λ']} — "
                       + ("**holds**" if drop > tol else "**does not hold**"))
    return "\n".join(out)


def verdict_e(rows: list) -> str:
    """Each compressor's price: its median steps to target over uncompressed sync's."""
    base = next((r for r in rows if r["compressor"] == "uncompressed sync"), None)
    if base is None or base["steps_to_target"] is None:
        return "- uncompressed sync did not reach the target: no price to compute"
    ok = 0
    for r in rows:
        s = r["steps_to_target"]
        r["steps vs sync"] = None if s is None else round(s / base["steps_to_target"], 3)
        ok += s is None or s >= base["steps_to_target"]
    others = len(rows) - 1
    ok -= 1  # the baseline itself
    law = [(r["predicted_steps"], r["steps_to_target"]) for r in rows
           if r.get("predicted_steps") and r["steps_to_target"] and r is not base]
    errs = sorted(abs(p / m - 1) for p, m in law)
    return (f"- {ok} of {others} compressors need at least as many steps as uncompressed sync "
            f"({base['steps_to_target']}) — " + ("**holds**" if ok == others else f"**holds for {ok} of {others}**")
            + (f"\n- the planner's time-to-target law (predicted_steps, docs/time_to_target.md) against the "
               f"{len(errs)} compressors that reached the target: median |error| {statistics.median(errs):.0%}, "
               f"largest {errs[-1]:.0%}" if errs else ""))


def verdicts(tables: dict, tol: float) -> dict:
    """``{table: text}``: the claim and its verdict for every table present."""
    fns = {"a": lambda r: verdict_a(r, tol), "b": verdict_b, "c": verdict_c, "d": lambda r: verdict_d(r, tol),
           "e": verdict_e}
    return {t: f"Claim: {CLAIMS[t]}.\n\n{fns[t](rows)}" for t, rows in tables.items() if rows}
