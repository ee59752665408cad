"""Suite ``planner``: the performance model against measurement, every paradigm, per model.

    python -m workbench.bench planner --write                        # small_cnn and resnet18, 3 ranks, loopback
    python -m workbench.bench planner --models vgg16 --workers 4
    python -m workbench.bench planner --tiny                         # CI smoke: small_cnn, 2 ranks, sync and ps

For each model: ``python -m workbench.plan <model> --verify`` on loopback (the profile, then every
paradigm for 12 + 8 steps, ``workbench/plan.py``), one row per paradigm with the predicted and
measured step time, the error, and predicted vs measured bytes per worker per step (exact unless a
row says otherwise). The notes give the error distribution (median and 90th percentile of |error|).
Step times depend on the machine and its load (quoted with the table); bytes do not. The emulated
bandwidths of the planner issue (``network=emulated``, root) are not part of this suite yet.
"""
from __future__ import annotations

import math
import statistics
from pathlib import Path

from workbench.bench import report

MODELS = ("small_cnn", "resnet18")


def main(argv=None) -> None:
    p = report.parser("planner", __doc__, "small_cnn, 2 ranks, sync and ps")
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--workers", type=int, default=3, help="processes per run (cluster.nproc)")
    p.add_argument("--batch", type=int, default=16, help="samples per worker per step")
    p.add_argument("--only", default="", help="paradigm labels or prefixes (default: every one)")
    a = p.parse_args(argv)
    if a.tiny:
        a.models, a.workers, a.only = "small_cnn", 2, "sync,ps"
    from workbench.plan import LOOPBACK, _plan_rows, verify
    out = Path(a.out) / "planner"
    only = [o for o in a.only.split(",") if o]
    rows = []
    for model in a.models.split(","):
        ov = [f"model={model}", *report.data_overrides(model, a.batch), "cluster.timeout_s=600",
              f"output_root={out / 'runs'}"]
        plan_rows, (vs, prof) = _plan_rows(ov, [LOOPBACK], [a.workers], None, 1.0, "50us", only, str(out), print)
        for r in verify(plan_rows, vs, out / "runs"):
            row = {"model": model, "paradigm": r["paradigm"], "N": a.workers,
                   "predicted ms": 1e3 * r["predicted_step_s"], "measured ms": 1e3 * r["measured_step_s"] if "measured_step_s" in r else None,
                   "error": f"{100 * r['error']:+.1f} %" if "error" in r else r.get("measured_status"),
                   "predicted B/step": round(r["predicted_bytes_per_step"]),
                   "measured B/step": round(r["measured_bytes_per_step"]) if "measured_bytes_per_step" in r else None,
                   "bytes": "exact" if r.get("bytes_error") == 0 else (f"{100 * r['bytes_error']:+.3f} %" if "bytes_error" in r else ""),
                   "bottleneck": r["bottleneck"], "_err": r.get("error")}
            rows.append(row)
            report.progress({k: v for k, v in row.items() if k != "_err"})
    errs = sorted(abs(r["_err"]) for r in rows if r["_err"] is not None)
    notes = ""
    if errs:
        p90 = errs[min(len(errs) - 1, math.ceil(0.9 * len(errs)) - 1)]
        notes = (f"Step time |error| over {len(errs)} runs: median {100 * statistics.median(errs):.1f} %, "
                 f"90th percentile {100 * p90:.1f} % (target: 10 % and 20 %). Bytes exact in "
                 f"{sum(r['bytes'] == 'exact' for r in rows)}/{len(rows)} rows.")
    cols = ["model", "paradigm", "N", "predicted ms", "measured ms", "error", "predicted B/step", "measured B/step",
            "bytes", "bottleneck"]
    t = report.Table(f"planner_N{a.workers}", f"Planner: predicted vs measured step time and bytes per worker per step, "
                     f"{a.workers} ranks on loopback, batch {a.batch} per worker", rows, cols)
    cmd = ("python -m workbench.bench planner " + " ".join(argv if argv is not None else [])).strip()
    path = report.write("planner", "Planner: model vs measured", cmd, [t], notes=notes, out_root=a.out,
                        benchmarks_md=report.ROOT / "BENCHMARKS.md" if a.write else None)
    print(f"\n{t.markdown()}\n\n{notes}\n\nreport: {path / 'report.html'}")


if __name__ == "__main__":
    main()
