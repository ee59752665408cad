"""The bandwidth suite's index per model (``<out>/bandwidth-<model>-<N>w/index.json``): which runs
ran where, the link probes, the settings and the profile; what ``--resume`` keeps and
``--from-runs`` rebuilds the tables from."""
from __future__ import annotations

import json
from pathlib import Path

from workbench.runs import store as runstore
from workbench.runs.handle import Run


def recorded(profile_at, model) -> bool:
    """Whether the sweep's index names a profile of ``model`` that is still on disk."""
    return bool(profile_at.get(model)) and Path(profile_at[model]).exists()


def save_index(out, settings, probes, profile, entries, model) -> None:
    """What ran where for one model (its runs, link probes, settings and profile): what --resume
    keeps and --from-runs rebuilds from. Written after every run, atomically: a sweep stopped
    (or a disk filled) mid-write leaves the previous index, not half of one."""
    mine = [e for e in entries if e["model"] == model]
    out.mkdir(parents=True, exist_ok=True)
    runstore.write_json(out / "index.json", {
        "settings": settings, "probes": {r: probes[r] for r in dict.fromkeys(e["rate"] for e in mine)},
        "profile": profile, "runs": mine})


def kept_runs(plan, out_of, settings, probes, profile_at) -> dict:
    """The completed runs of each model's last sweep, by (model, rate, kind, round), for --resume;
    their link probes go into ``probes``, the sweep's profile into ``profile_at``. A sweep under
    other settings is refused in one line."""
    done = {}
    for model in plan:
        index = out_of(model) / "index.json"
        if not index.exists():
            continue
        saved = json.loads(index.read_text())
        # sweeps from before the planner's predictions also recorded their utility-model run's rate;
        # added rates are more of the same sweep (its other runs kept), fewer would drop measured rows
        theirs = {k: v for k, v in (saved.get("settings") or {}).items() if k != "calibrate_at"}
        mine = settings[model]
        if {**theirs, "rates": None} != {**mine, "rates": None} or not set(theirs.get("rates", ())) <= set(mine["rates"]):
            raise SystemExit(f"error: --resume: {index} is a sweep with other settings ({saved.get('settings')}), "
                             f"not {mine}; rerun without --resume")
        added = [r for r in mine["rates"] if r not in theirs["rates"]]
        if added:
            print(f"resume {model}: adds the rates {', '.join(added)} to its sweep of {', '.join(theirs['rates'])}", flush=True)
        probes.update(saved["probes"])
        profile_at[model] = saved.get("profile")
        kept = [e for e in saved["runs"] if e["kind"] != "calibration" and Run(e["run_dir"]).status == "completed"]
        done.update({(e["model"], e["rate"], e["kind"], e.get("round", 0)): e for e in kept})
        print(f"resume {model}: {len(kept)} completed runs kept from {index}", flush=True)
    return done


def runs_span(entries) -> str:
    """When the runs started, first to last, from their directories (``runs/<date>/<time>_…``)."""
    stamps = sorted(f"{Path(e['run_dir']).parent.name} {Path(e['run_dir']).name[:8].replace('-', ':')}" for e in entries)
    if not stamps:
        return "?"
    last = stamps[-1][11:16] if stamps[-1][:10] == stamps[0][:10] else f" {stamps[-1][:16]}"
    return f"{stamps[0][:16]}–{last} UTC"
