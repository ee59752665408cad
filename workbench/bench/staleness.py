"""Suite ``staleness``: time to a target accuracy on the digits for synchronous all-reduce, hardsync,
n-softsync (several n, with and without learning-rate modulation, with the SSP bound) and async,
with and without a straggler — Rudra's experiment (docs/papers.md §1) on one machine — and Alchemist's
model-averaging trainers (EASGD, BMUF, local SGD) beside them: which reaches the target first, and
after how many bytes sent per worker.

    python -m workbench.bench staleness                       # λ = 4 workers (+1 server), 300 steps each
    python -m workbench.bench staleness --workers 8 --write   # λ = 8, and update BENCHMARKS.md
    python -m workbench.bench staleness --repeats 3 --write   # 3 interleaved rounds: medians and spread
    python -m workbench.bench staleness --tiny                # the CI smoke version (2 workers, 3 protocols)

λ workers + 1 server (``trainer=sync`` runs on the λ workers alone), batch 16 per worker, the default
optimizer. Each run evaluates every 10 steps on rank 0; "time to target" is the wall time from the
first step (evaluation included) to the first evaluation at or above ``--target``. "samples/s" counts
every gradient any worker computed per second of rank 0's loop; "updates/s" is the servers'; the τ
histogram counts applied gradients of staleness 0, 1, 2, … The straggler is worker rank 1, sleeping
``--delay`` seconds after each of its steps (``inject.straggler_ranks``/``straggler_delay_s``).
"""
from __future__ import annotations

import statistics
from pathlib import Path

import workbench
from workbench.bench import suite


def protocols(lam: int, tiny: bool = False) -> list:
    """(label, overrides, processes) of each protocol for λ workers."""
    ps = lam + 1
    rows = [("sync (all-reduce)", ["trainer=sync"], lam),
            ("hardsync (ps sync)", ["trainer=ps", "trainer.mode=sync"], ps),
            (f"async (Downpour) = {lam}-softsync", ["trainer=ps", "trainer.mode=async", "trainer.compensate_momentum=false"], ps)]
    if tiny:
        return rows
    mids = sorted({n for n in (1, 2, lam // 2) if 1 <= n < lam})
    rows += [(f"{n}-softsync (c={lam // n})", ["trainer=staleness", f"trainer.n={n}"], ps) for n in mids]
    rows += [(f"{lam}-softsync, lr/τ", ["trainer=staleness", f"trainer.n={lam}", "trainer.lr_modulation=per_gradient"], ps),
             (f"{lam}-softsync, lr/⟨τ⟩", ["trainer=staleness", f"trainer.n={lam}", "trainer.lr_modulation=mean"], ps),
             (f"{lam}-softsync, s=1 (SSP block)", ["trainer=staleness", f"trainer.n={lam}", "trainer.max_staleness=1"], ps),
             ("EASGD (async, 1 server)", ["trainer=easgd"], ps),
             ("BMUF", ["trainer=bmuf"], lam),
             ("local SGD", ["trainer=local_sgd"], lam)]
    return rows


def run_one(label, overrides, nproc, straggler, a, out: Path) -> dict:
    extra = ["inject.straggler_ranks=[1]", f"inject.straggler_delay_s={a.delay}"] if straggler else []
    cfg = workbench.compose(overrides + [f"cluster.nproc={nproc}", f"trainer.max_steps={a.max_steps}",
                                         "trainer.eval_every=10", "data.batch_size=16", "trainer.progress=false",
                                         "cluster.timeout_s=300", f"output_root={out / 'runs'}", *extra])
    run = workbench.launch(cfg, progress=False, check=False)
    s = run.summary
    records = run.records()
    hit = next((r for r in records if r.get("kind") == "eval" and r["test_accuracy"] >= a.target), None)
    # rank 0 is a worker in every trainer, so its records' bytes are one worker's
    sent = sum(r.get("bytes_sent", 0) for r in records if r.get("kind") == "train" and hit and r["step"] <= hit["step"])
    ps = s.get("ps") or {}
    grads = ps["gradients"] * s["batch_per_worker"] if ps else s.get("samples", 0)
    t = s.get("train_time_s") or 0
    return {"protocol": label, "straggler": f"rank 1 +{a.delay}s/step" if straggler else "none",
            "time_to_target_s": round(hit["time"], 2) if hit else None, "steps_to_target": hit["step"] if hit else None,
            "MiB_to_target": round(sent / 2**20, 2) if hit else None,
            "final_acc": round(s.get("final_test_accuracy") or 0, 4), "wall_s": round(t, 1),
            "samples_per_s": round(grads / t) if t else None,
            "updates_per_s": round(ps["updates_per_s"], 1) if ps.get("updates_per_s") else None,
            "mean_tau": round(ps["staleness_mean"], 2) if ps else None, "max_tau": ps.get("staleness_max"),
            "tau_hist": " ".join(map(str, ps.get("staleness_hist", []))), "status": s["status"], "run": run.path.name}


TIMED = ["time_to_target_s", "samples_per_s", "updates_per_s"]


def merge(rounds: list) -> list:
    """Medians over rounds per (protocol, straggler), the τ histogram bin by bin."""
    if len(rounds) == 1:
        return rounds[0]
    key = lambda r: (r["protocol"], r["straggler"])  # noqa: E731
    hists = {}
    for rows in rounds:
        for r in rows:
            hists.setdefault(key(r), []).append([int(c) for c in r["tau_hist"].split()])
    merged = suite.merge_repeats([[{k: v for k, v in r.items() if k not in ("tau_hist", "run")} for r in rows]
                                   for rows in rounds], key, TIMED)
    for r in merged:
        hs = hists[key(r)]
        width = max(map(len, hs))
        r["tau_hist"] = " ".join(str(round(statistics.median(h[i] if i < len(h) else 0 for h in hs)))
                                 for i in range(width))
    return merged


def figures(rows, target):
    import plotly.graph_objects as go
    fig = go.Figure()
    for strag in dict.fromkeys(r["straggler"] for r in rows):
        sub = [r for r in rows if r["straggler"] == strag]
        fig.add_bar(name=f"straggler: {strag}", x=[r["protocol"] for r in sub],
                    y=[r["time_to_target_s"] for r in sub])
    fig.update_layout(title=f"Time to {target:.0%} test accuracy (missing bar: never reached)",
                      yaxis_title="seconds", barmode="group")
    hist = go.Figure()
    for r in rows:
        if r["tau_hist"] and r["straggler"] == "none":
            counts = [int(c) for c in r["tau_hist"].split()]
            hist.add_bar(name=r["protocol"], x=list(range(len(counts))), y=counts)
    hist.update_layout(title="Staleness τ of applied gradients (no straggler)", xaxis_title="τ",
                       yaxis_title="gradients", barmode="group")
    return [fig, hist]


def main(argv=None) -> None:
    p = suite.parser("staleness", __doc__, "2 workers, 3 protocols, 20 steps")
    p.add_argument("--workers", type=int, default=4, help="λ, the workers (the PS runs add one server)")
    p.add_argument("--target", type=float, default=0.90, help="target test accuracy")
    p.add_argument("--delay", type=float, default=0.05, help="the straggler's extra seconds per step")
    p.add_argument("--max-steps", type=int, default=300)
    p.add_argument("--repeats", type=int, default=1, help="interleaved rounds over all protocols; the table "
                   "shows medians and each timed column's min–max")
    a = p.parse_args(argv)
    if a.tiny:
        a.workers, a.max_steps, a.target = 2, 20, 0.5
    report_dir = f"staleness-{a.workers}w"
    out = Path(a.out) / report_dir
    rounds = []
    total = a.repeats * 2 * len(protocols(a.workers, a.tiny))
    for i in range(a.repeats):  # interleaved: every protocol once per round, so load drifts touch all alike
        rounds.append([])
        for straggler in (False, True):
            for label, ov, nproc in protocols(a.workers, a.tiny):
                print(f"staleness {i * total // a.repeats + len(rounds[-1]) + 1}/{total}: {label}"
                      f"{', a straggler' if straggler else ''} ...", flush=True)
                rounds[-1].append(run_one(label, ov, nproc, straggler, a, out))
                suite.progress(rounds[-1][-1])
    rows = merge(rounds)
    cmd = "python -m workbench.bench staleness " + " ".join(argv if argv is not None else [])
    t = suite.Table(f"time_lambda{a.workers}", f"λ = {a.workers} workers on the digits, {a.max_steps} steps, "
                     f"target {a.target:.0%}" + (f", medians of {a.repeats} interleaved rounds (spread: min–max; "
                     "repeats: rounds that reached the target / rounds)" if a.repeats > 1 else ""), rows)
    reached = [r for r in rows if r["time_to_target_s"] is not None]
    first = min(reached, key=lambda r: r["time_to_target_s"], default=None)
    note = (f"{len(reached)} of {len(rows)} runs reached {a.target:.0%}"
            + (f"; first: {first['protocol']} (straggler: {first['straggler']}) in {first['time_to_target_s']} s, "
               f"{first['MiB_to_target']} MiB sent per worker." if first else "."))
    path = suite.write(report_dir, f"staleness: time to {a.target:.0%}, λ={a.workers}", cmd.strip(), [t],
                        figures(rows, a.target), notes=note, out_root=a.out,
                        benchmarks_md=suite.ROOT / "BENCHMARKS.md" if a.write else None)
    print(f"\n{t.markdown()}\n\nreport: {path / 'report.html'}")


if __name__ == "__main__":
    main()
