"""The planner suite's stored measurements: one file per (round, bandwidth) with its profile, what
each run measured and the drift guard's spans, written whole, so that a command run again
(``--resume``) keeps them and predicts them again with the model as it is now."""
from __future__ import annotations

from pathlib import Path
from typing import Optional


def unit_name(model: str, workers: int, batch: int, bandwidth: str, k: int, only: list) -> str:
    """The file of one (round, bandwidth)'s measurements under ``<out>/planner/rounds/``."""
    slug = lambda t: "".join(c if c.isalnum() else "_" for c in t)  # noqa: E731
    return f"{model}-N{workers}-b{batch}-{slug(bandwidth)}-r{k}" + (f"-{slug(','.join(only))}" if only else "") + ".json"


def save_unit(path: Path, prof, rows: list, drift: Optional[dict] = None) -> None:
    """One (round, bandwidth): its profile, what each run measured (``plan.verify_variant``'s
    keys) and the drift guard's spans (:func:`drift_ratio`), written whole (``runstore.write_json``)
    so an interrupted command leaves none half-written."""
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
    median of 3 releases for ResNet-18). None for a unit stored without the guard. The profile's
    span cannot stand in for the reference, and one span cannot stand for a unit: steps and spans
    move between launches within minutes (docs/notes/2026-12-06-bench-history.md)."""
    d = unit.get("drift")
    if not d:
        return None
    return (d["before_s"] + d["after_s"]) / 2 / d["reference_s"]


def unit_rows(unit: dict, overrides: list, bw: str, workers: int, only: list, out: Path):
    """A stored (round, bandwidth) predicted again by the model as it is now from its profile and
    scored against its runs; with the drift guard's ratio (:func:`drift_ratio`) also from the
    profile on a host that slow (``Profile.drifted``), whose error (``error_drifted``) the notes
    give beside the table's. The table keeps the profile as measured: the span the guard reads
    moves between launches more than the host drifts, so its correction does not make the errors
    smaller (docs/notes/2026-12-06-bench-history.md). Returns the rows and the runs' config (the
    crossovers are predicted on it)."""
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
