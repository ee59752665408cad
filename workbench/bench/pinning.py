"""Suite ``pinning``: the same runs with each rank's threads pinned to its own cores
(``testbed.pin=true``) and not pinned (the default), on loopback, in interleaved rounds: the measured
step of each paradigm both ways, and the planner's error both ways (each round profiles anew,
pinned as its runs are).

    python -m workbench.bench pinning                          # small_cnn, 2 ranks, 3 rounds
    python -m workbench.bench pinning --repeats 5 --write      # the BENCHMARKS.md section
    python -m workbench.bench pinning --tiny                   # CI smoke: sync and fp16, 1 round

Why it is measured: with 2 ranks on 2 cores and nothing pinned, the scheduler moves a rank's threads
(the training loop, the compression hook's thread, gloo's) between the cores, and the same run's step
differs from one launch to the next; pinned, the compressors run steadier and faster, and gloo's
device thread runs under ``SCHED_BATCH`` so that it does not stall ``sync``'s all-reduce
(docs/notes/2026-12-05-ranks-pinned.md, docs/notes/2026-12-05-gloo-device-thread-sched-batch.md; the measurements:
docs/notes/2026-12-06-bench-history.md).
Which of the two goes first alternates by round, so a host that drifts favours neither.
Pinning needs as many cores as ranks: with more ranks than cores both columns run unpinned.
"""
from __future__ import annotations

import os
import statistics
from pathlib import Path

from workbench.bench import suite


def main(argv=None) -> None:
    p = suite.parser("pinning", __doc__, "small_cnn, 2 ranks, sync and compressed/fp16, one round")
    p.add_argument("--model", default="small_cnn")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--batch", type=int, default=16, help="samples per worker per step")
    p.add_argument("--only", default="sync,compressed", help="paradigm labels or prefixes")
    p.add_argument("--repeats", type=int, default=3, help="interleaved rounds, each pinned and not")
    a = p.parse_args(argv)
    if a.tiny:
        a.only, a.repeats = "sync,compressed/fp16", 1
    from workbench.plan import LOOPBACK, _plan_rows, verify
    report_dir = f"pinning-{a.model}-{a.workers}ranks"
    out = Path(a.out) / report_dir
    only = [o for o in a.only.split(",") if o]
    base = [f"model={a.model}", *suite.data_overrides(a.model, a.batch), "cluster.timeout_s=600",
            f"output_root={out / 'runs'}"]
    got: dict = {}  # (paradigm, pinned) -> [(measured s, error), ...]
    pinned_at: dict = {}
    for k in range(a.repeats):
        for j, pin in enumerate((True, False) if k % 2 == 0 else (False, True)):
            print(f"pinning {2 * k + j + 1}/{2 * a.repeats}: {'pinned' if pin else 'not pinned'}, round {k + 1} ...",
                  flush=True)
            ov = base + [f"testbed.pin={str(pin).lower()}"]
            rows, (vs, prof) = _plan_rows(ov, [LOOPBACK], [a.workers], None, 1.0, "50us", only, str(out), print,
                                          refresh=True)
            pinned_at[pin] = bool(prof.machine.get("pinned"))
            for r in verify(rows, vs, out / "runs"):
                if r.get("measured_step_s"):
                    got.setdefault((r["paradigm"], pin), []).append((r["measured_step_s"], r["error"]))
    rows = []
    for label in dict.fromkeys(lbl for lbl, _ in got):
        on, off = got.get((label, True), []), got.get((label, False), [])
        row = {"paradigm": label}
        for name, xs in (("pinned", on), ("not pinned", off)):
            if xs:
                ms = [1e3 * m for m, _ in xs]
                row[f"{name}: step ms"] = round(statistics.median(ms), 2)
                row[f"{name}: spread"] = f"{min(ms):.2f}–{max(ms):.2f}"
                row[f"{name}: model's |error|"] = f"{100 * statistics.median(abs(e) for _, e in xs):.1f} %"
        if on and off:
            row["not pinned ÷ pinned"] = round(statistics.median(m for m, _ in off) / statistics.median(m for m, _ in on), 2)
        rows.append(row)
        suite.progress(row)
    cols = ["paradigm", "pinned: step ms", "pinned: spread", "not pinned: step ms", "not pinned: spread",
            "not pinned ÷ pinned", "pinned: model's |error|", "not pinned: model's |error|"]
    t = suite.Table(f"pinning_{a.model}_{a.workers}", f"{a.model}, {a.workers} ranks on loopback, batch {a.batch} per "
                     f"worker: rank 0's median step of each run (about a second of steps), medians over {a.repeats} "
                     f"interleaved rounds and their spread (min–max); the model's |error| = |predicted ÷ measured − 1| "
                     f"from each round's own profile, median over the rounds", rows, cols)
    errs = {pin: sorted(abs(e) for (_, q), xs in got.items() if q == pin for _, e in xs) for pin in (True, False)}
    notes = (f"Ranks pinned in the pinned column: {pinned_at.get(True, False)} (this host has "
             f"{len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else os.cpu_count()} cores for "
             f"{a.workers} ranks). The model's |error| over every run: pinned median "
             f"{100 * _median(errs[True]):.1f} %, not pinned {100 * _median(errs[False]):.1f} % ({len(errs[True]) + len(errs[False])} runs). "
             f"The host's 1-minute load as the suite ended: {os.getloadavg()[0]:.1f}.")
    cmd = ("python -m workbench.bench pinning " + " ".join(argv if argv is not None else [])).strip()
    path = suite.write(report_dir, f"Ranks pinned to their cores or not: {a.model}, {a.workers} ranks", cmd, [t], [],
                        notes=notes, out_root=a.out,
                        benchmarks_md=suite.ROOT / "BENCHMARKS.md" if a.write else None)
    print(f"\n{t.markdown()}\n\n{notes}\n\nreport: {path / 'report.html'}")


def _median(xs) -> float:
    return statistics.median(xs) if xs else float("nan")


if __name__ == "__main__":
    main()
