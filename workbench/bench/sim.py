"""Suite ``sim``: the discrete-event simulator (``workbench/sim``) checked against real runs at small λ,
then the papers' figures at their scale.

    python -m workbench.bench sim --write                   # λ = 2, 4, 8 real vs simulated; then the papers' scale
    python -m workbench.bench sim --lams 2,4 --steps 50      # quicker
    python -m workbench.bench sim --tiny                     # CI smoke: λ = 2, 30 steps, the small CNN throughout

1. Validation (:mod:`workbench.sim.validate`): at each λ, ``trainer=staleness`` for real on this machine
   (λ workers + 1 server, the small CNN on the digits, batch 16, ``--steps`` steps, no evaluation) under
   hardsync, 1-softsync, async and async with a straggler (rank 1 sleeping ``--delay`` s per step),
   and the same simulated from this machine's profile: τ histograms, ⟨τ⟩, max τ, samples/s, errors.
2. Rudra (:func:`workbench.sim.papers.rudra_tau`): ⟨τ⟩ against n at λ = 30, the small CNN's profile,
   100 Gbit/s (so that the workers, not the server's link, set the pace), 8 server shards, cv = 0.1.
3. Hardsync vs n-softsync vs async at λ = 30 and 60 with one straggler (2x slower), one server, 100 Gbit/s.
4. Stanza's best n_f and its speed-up over the PS, and 5. each compressor's crossover against N, for
   ``--gpu-model`` (VGG-16 at 32x32) with this machine's compute divided by ``--speedup`` (GPU-class
   compute: a stated assumption, shown with the compute time it implies), at 10 Gbit/s.
"""
from __future__ import annotations

from pathlib import Path

from workbench.bench import suite
from workbench.perfmodel.collectives import GBIT

TITLE = "Simulator: small-λ validation and the papers' scale"


def main(argv=None) -> None:
    p = suite.parser("sim", __doc__, "λ = 2, 30 steps, the small CNN throughout")
    p.add_argument("--lams", default="2,4,8", help="λ values of the validation (real runs)")
    p.add_argument("--steps", type=int, default=100, help="steps per worker in each validation run")
    p.add_argument("--delay", type=float, default=0.05, help="the straggler's extra seconds per step (validation)")
    p.add_argument("--gpu-model", default="vgg16", help="model of the Stanza and compression tables")
    p.add_argument("--speedup", type=float, default=50.0, help="this machine's compute divided by this (GPU-class)")
    a = p.parse_args(argv)
    lams = [int(x) for x in a.lams.split(",") if x.strip()]
    if a.tiny:
        lams, a.steps, a.gpu_model, a.speedup = [2], 30, "small_cnn", 1.0
    out = Path(a.out) / "sim"
    from workbench.sim import papers, validate
    val = validate.compare(lams, a.steps, a.delay, out)
    small = validate.profile_for(4 if not a.tiny else 2, out)
    sim_steps = 30 if a.tiny else 200
    # 100 Gbit/s: the small CNN's workers, not the server's link, set the pace, as in Rudra's cluster
    tau = papers.rudra_tau(small, lam=30, servers=8, steps=sim_steps, bandwidth=100 * GBIT)
    strag = papers.straggler_throughput(small, steps=sim_steps // 2, bandwidth=100 * GBIT)
    gpu = papers.profile_with_codecs(a.gpu_model, a.speedup, suite.ROOT / "experiments")
    stanza = papers.stanza_vs_ps(gpu, workers=(16, 32, 64), bandwidth=10 * GBIT)
    cross = papers.crossover_vs_workers(gpu)
    tables = [
        suite.Table("validation", f"1. Validation at λ = {', '.join(map(str, lams))} on this machine: real `trainer=staleness` "
                     f"runs ({a.steps} steps per worker) against the simulator fed this machine's profile", val),
        suite.Table("rudra_tau", "2. Rudra's ⟨τ⟩ against n at λ = 30 (simulated; small CNN profile, 100 Gbit/s, "
                     "8 server shards, cv 0.1)", tau),
        suite.Table("straggler", "3. Throughput with one straggler (worker 0, 2x slower) at λ = 30 and 60 "
                     "(simulated; small CNN profile, 100 Gbit/s, one server, cv 0.1; samples/s until the first worker is done)", strag),
        suite.Table("stanza_vs_ps", f"4. Stanza's best n_f and speed-up over the PS, {a.gpu_model} at 10 Gbit/s, "
                     f"compute ÷{a.speedup:g} ({1e3 * gpu.compute_s(1):.1f} ms per batch of {gpu.batch})", stanza),
        suite.Table("crossover", f"5. Compression crossover against workers, {a.gpu_model}, compute ÷{a.speedup:g}: "
                     "each compressor beats all-reduce on links slower than this", cross),
    ]
    ok = [r for r in val if "TV distance" in r]
    def pct(col):
        e = sorted(abs(float(r[col].rstrip(" %"))) for r in ok)
        return f"{e[0]:.0f}–{e[-1]:.0f} % (median {e[len(e) // 2]:.0f} %)"
    notes = ""
    if ok:
        notes = (f"Validation over {len(ok)} runs: |⟨τ⟩ real − ⟨τ⟩ sim| ≤ "
                 f"{max(abs(r['⟨τ⟩ real'] - r['⟨τ⟩ sim']) for r in ok):.2f}; total-variation distance between the "
                 f"real and simulated τ distributions ≤ {max(r['TV distance'] for r in ok):.2f} (median "
                 f"{sorted(r['TV distance'] for r in ok)[len(ok) // 2]:.2f}); samples/s |error| {pct('samples/s error')}. "
                 f"The planner's analytic samples/s of the same rows: |error| {pct('planner error')}. "
                 "The simulator prices these runs as the planner prices their rows (workbench.sim.spec.on_host): "
                 "compute at λ ranks on this host's cores, the training loop's bookkeeping and the point-to-point "
                 "line in the PS loop (perfmodel.loopback.loop_link), all from the profile; what it leaves out shows "
                 "in the hardsync rows (the in-loop line is the asynchronous loop's, where messages wait for cores "
                 "the other workers compute on) and the straggler rows (a sleeping worker frees the cores for the "
                 "rest). Tables 2–5 are predictions beyond this "
                 "machine, checked only as far as table 1 reaches: the protocol's staleness closely, throughput to "
                 "within the errors above.")
    cmd = "python -m workbench.bench sim " + " ".join(argv if argv is not None else [])
    path = suite.write("sim", TITLE, cmd.strip(), tables, papers.figures(val, tau, cross), notes=notes, out_root=a.out,
                        benchmarks_md=suite.ROOT / "BENCHMARKS.md" if a.write else None)
    for t in tables:
        print(f"\n{t.caption}\n\n{t.markdown()}")
    print(f"\n{notes}\n\nreport: {path / 'report.html'}")


if __name__ == "__main__":
    main()
