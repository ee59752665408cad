"""Suite ``stanza``: Stanza's allocation sweep, n_f = 1..N−1 FC workers, the performance model's
predicted throughput next to the measured one, and data parallelism on the same processes.

    python -m workbench.bench stanza                                  # alexnet, N = 4, 8 steps per run
    python -m workbench.bench stanza --model alexnet --nproc 5 --write
    python -m workbench.bench stanza --model vgg16 --repeats 3 --write  # 3 interleaved rounds: medians + spread
    python -m workbench.bench stanza --tiny                           # CI smoke: small_cnn, N = 3, 4 steps

Each Stanza run profiles itself first (``trainer.profile=true``: conv and FC time per sample at each
concurrency, the boundary size, the network's bandwidth), then trains ``--steps`` steps with its fixed
n_f. Predicted: ``workbench.perfmodel.stanza.throughput`` on that run's own profile, and the docs/papers.md §2
reconstruction on the same inputs; measured: global batch / median step period after the first step
(``summary.json`` → ``stanza``). The last row is ``trainer=sync`` on the same N processes, against
the data-parallel prediction of the first run's profile. CIFAR-size synthetic data (3×32×32).
"""
from __future__ import annotations

from pathlib import Path

import workbench
from workbench.bench import suite
from workbench.config import validate


def main(argv=None) -> None:
    p = suite.parser("stanza", __doc__, "small_cnn on the digits, N = 3, 4 steps")
    p.add_argument("--model", default="alexnet")
    p.add_argument("--nproc", type=int, default=4, help="N processes: n_c + n_f")
    p.add_argument("--batch", type=int, default=32, help="samples per CONV worker per step")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--repeats", type=int, default=1, help="interleaved rounds over the allocations; medians + spread")
    a = p.parse_args(argv)
    if a.tiny:
        a.model, a.nproc, a.steps, a.batch = "small_cnn", 3, 4, 16
    report_dir = f"stanza-{a.model}-{a.nproc}p"
    out = Path(a.out) / report_dir
    base = [f"model={a.model}", *suite.data_overrides(a.model, a.batch, 1024), f"cluster.nproc={a.nproc}",
            f"trainer.max_steps={a.steps}", "trainer.eval_every=100000", "trainer.progress=false",
            "cluster.timeout_s=900", f"output_root={out / 'runs'}"]
    cfgs = [workbench.compose(base + ["trainer=stanza", f"trainer.fc_workers={n_f}", "trainer.profile=true"])
            for n_f in range(1, a.nproc)] + [workbench.compose(base + ["trainer=sync"])]
    for c in cfgs:
        validate(c)  # every run's config, before the first one starts
    rounds = []
    for i in range(a.repeats):  # interleaved: each allocation once per round
        print(f"stanza round {i + 1}/{a.repeats}: {len(cfgs)} runs ...", flush=True)
        rounds.append(sweep(cfgs, a.nproc))
    rows = suite.merge_repeats(rounds, "allocation", ["measured"])
    for r in rows:  # the error of the medians, not the median of the errors
        if r.get("measured") and r.get("predicted"):
            r["error"] = f"{100 * (r['measured'] / r['predicted'] - 1):+.0f} %"
    cols = ["allocation", "predicted", "predicted (paper's model, docs/papers.md §2)", "measured"]
    cols += ["measured spread", "error", "repeats", "status"] if a.repeats > 1 else ["error", "status"]
    t = suite.Table(f"sweep_{a.model}_{a.nproc}", f"{a.model}, N = {a.nproc} processes, b = {a.batch} per CONV "
                     f"worker, {a.steps} steps; samples/s (error = measured / predicted − 1)"
                     + (f"; medians of {a.repeats} interleaved rounds, spread: min–max" if a.repeats > 1 else ""), rows, cols)
    cmd = ("python -m workbench.bench stanza " + " ".join(argv if argv is not None else [])).strip()
    path = suite.write(report_dir, f"stanza allocation sweep: {a.model}, N={a.nproc}", cmd, [t], [figure(rows, a.model)],
                        notes=f"Predicted vs measured: {suite.within(rows, 'error')}.", out_root=a.out, benchmarks_md=suite.ROOT / "BENCHMARKS.md" if a.write else None)
    print(f"\n{t.markdown()}\n\nreport: {path / 'report.html'}")


def sweep(cfgs, nproc: int) -> list:
    """One round: every Stanza allocation, then data parallelism on the same processes."""
    rows, dp_pred = [], None
    for i, cfg in enumerate(cfgs[:-1], 1):
        print(f"stanza {i}/{len(cfgs)}: n_f = {cfg.trainer.fc_workers} ...", flush=True)
        run = workbench.launch(cfg, progress=False, check=False)
        st = run.summary.get("stanza")
        if run.summary.get("status") != "completed" or not st:
            rows.append({"allocation": f"n_f = {cfg.trainer.fc_workers}", "status": run.summary.get("status")})
            continue
        n_f = st["fc_workers"]
        dp_pred = dp_pred if dp_pred is not None else st.get("dp_samples_per_s")
        rows.append({"allocation": f"{st['conv_workers']} CONV + {n_f} FC",
                     "predicted": round(st["predicted_samples_per_s"], 1),
                     "predicted (paper's model, docs/papers.md §2)": round(st["paper_predicted_by_fc_workers"][str(n_f)], 1),
                     "measured": round(st["measured_steady_samples_per_s"], 1),
                     "error": f"{100 * st['prediction_error']:+.0f} %", "status": "completed"})
        suite.progress(rows[-1])
    print(f"stanza {len(cfgs)}/{len(cfgs)}: sync x{nproc} ...", flush=True)
    run = workbench.launch(cfgs[-1], progress=False, check=False)
    dp = suite.samples_per_s(run, skip=1) if run.summary.get("status") == "completed" else None
    if dp:
        rows.append({"allocation": f"sync x{nproc} (data parallel)", "predicted": round(dp_pred, 1) if dp_pred else None,
                     "measured": round(dp, 1), "error": f"{100 * (dp / dp_pred - 1):+.0f} %" if dp_pred else None,
                     "status": "completed"})
    return rows


def figure(rows, model):
    import plotly.graph_objects as go
    ok = [r for r in rows if r.get("measured") is not None]
    fig = go.Figure()
    fig.add_bar(name="predicted", x=[r["allocation"] for r in ok], y=[r.get("predicted") for r in ok])
    fig.add_bar(name="measured", x=[r["allocation"] for r in ok], y=[r["measured"] for r in ok])
    fig.update_layout(title=f"Stanza allocations, {model}: predicted vs measured", yaxis_title="samples/s",
                      barmode="group")
    return fig


if __name__ == "__main__":
    main()
