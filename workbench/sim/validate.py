"""The simulator against real runs at small λ: the same protocol, workers and steps, once for real
(``trainer=staleness`` on this machine's processes) and once simulated from this machine's profile.

Per run: the real τ histogram, ⟨τ⟩, max τ and samples/s (the servers' gradients × batch over rank 0's
training time) beside the simulator's, with the errors: |Δ⟨τ⟩|, the total-variation distance between
the two τ distributions (½ Σ|p − q|: 0 identical, 1 disjoint) and the samples/s error, and the
planner's analytic samples/s of the same row. The simulator prices each run as the planner prices its
row (:func:`spec_here`, :func:`workbench.sim.spec.on_host`): the profile (λ + 1 ranks, with the loops
the planner times: the parameter server's and the training loop's bookkeeping) gives each worker's
compute at λ ranks computing at once, the bookkeeping, the optimizer and the in-loop line α', β'
(``perfmodel.loopback.loop_link``); the row's "sim model" says which line. Only the compute *spread*
(cv) is taken from a real run: a lognormal fitted to the middle half (:func:`robust_cv`) of rank 0's
step times in the asynchronous run at that λ, where a worker waits for nobody. Rank 0's median step,
real and simulated, is shown beside the profile's compute. Samples/s count, as the staleness benchmark
does, every applied gradient per second of rank 0's loop.
"""
from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import List, Optional, Sequence

from workbench.sim.ps import simulate
from workbench.sim.spec import SimSpec, on_host

BATCH = 16


def protocols(lam: int, delay: float) -> list:
    """(label, overrides, SimSpec fields) of the runs compared at λ workers."""
    rows = [("hardsync", ["trainer.protocol=hardsync"], dict(protocol="hardsync")),
            ("1-softsync", ["trainer.n=1"], dict(n=1))]
    rows.append((f"{lam}-softsync (async)", [f"trainer.n={lam}"], dict(n=lam)))
    if delay > 0:
        rows.append((f"{lam}-softsync, straggler +{delay:g} s", [f"trainer.n={lam}", "inject.straggler_ranks=[1]",
                                                                   f"inject.straggler_delay_s={delay}"],
                     dict(n=lam, stragglers=((1, 1.0, delay),))))
    return rows


def tv_distance(p: Sequence[int], q: Sequence[int]) -> float:
    """Total-variation distance between two histograms (normalised here)."""
    sp, sq = sum(p) or 1, sum(q) or 1
    n = max(len(p), len(q))
    return 0.5 * sum(abs((p[i] if i < len(p) else 0) / sp - (q[i] if i < len(q) else 0) / sq) for i in range(n))


def step_times(records) -> List[float]:
    """Rank 0's seconds per step (the first 2 left out: warm-up)."""
    return [r["step_time"] for r in records if r.get("kind") == "train" and r["step"] > 2]


def robust_cv(xs: Sequence[float]) -> float:
    """The coefficient of variation of a lognormal fitted to the middle half of ``xs`` (σ from the
    interquartile range of log x): the typical spread, not the few steps another process stalled."""
    logs = sorted(math.log(x) for x in xs if x > 0)
    if len(logs) < 4:
        return 0.0
    q = statistics.quantiles(logs, n=4)
    sigma = (q[2] - q[0]) / 1.349
    return math.sqrt(math.expm1(sigma * sigma))


def run_cfg(lam: int, overrides: List[str], steps: int, out: Path):
    """The config of one real run: ``trainer=staleness`` on λ workers and one server."""
    import workbench
    # momentum compensated for the implied momentum of asynchrony, so that async at λ = 4 and 8 does not
    # diverge (the timing and the protocol's decisions do not depend on it)
    return workbench.compose(["trainer=staleness", "trainer.compensate_momentum=true", *overrides, f"cluster.nproc={lam + 1}",
                              f"trainer.max_steps={steps}", "trainer.eval_every=100000", f"data.batch_size={BATCH}",
                              "trainer.progress=false", "checkpoint.every=0", "cluster.timeout_s=300", f"output_root={out}"])


def real_run(lam: int, overrides: List[str], steps: int, out: Path):
    import workbench
    return workbench.launch(run_cfg(lam, overrides, steps, out), progress=False, check=False)


def row_here(prof, cfg, lam: int):
    """The run ``cfg``'s row as the planner sees it: loopback, λ + 1 ranks, the run's stragglers
    (``plan.rows.cluster_for``)."""
    from workbench.plan.rows import LOOPBACK, cluster_for
    return cluster_for(cfg, prof, lam + 1, LOOPBACK, 0.0)


def spec_here(prof, cfg, lam: int, **kw) -> SimSpec:
    """The simulated twin of the run ``cfg`` on this host, priced by :func:`workbench.sim.spec.on_host`
    from the same profile terms as the planner's ``ps_async``."""
    return on_host(prof, row_here(prof, cfg, lam), 1, **kw)


def planner_samples_per_s(prof, cfg, lam: int, fields: dict) -> float:
    """The planner's analytic samples/s of the same row (``paradigms.staleness``), for comparison."""
    from workbench.perfmodel import paradigms as P
    hard = fields.get("protocol") == "hardsync"
    return P.staleness(prof, row_here(prof, cfg, lam), 1, n=fields.get("n") or lam, hardsync=hard).samples_per_s


def profile_for(lam: int, root: Path, log=print):
    """This machine's profile of the small CNN with λ + 1 ranks (cached under ``root``/profiles), with
    the loops the planner times for its rows on this host (``plan.rows.profile_loops``: the
    parameter server's, and the training loop's bookkeeping), which :func:`spec_here` prices from."""
    import workbench
    from workbench.perfmodel.profile import load_or_measure
    from workbench.plan.rows import profile_loops
    cfg = workbench.compose([f"data.batch_size={BATCH}", f"cluster.nproc={lam + 1}"])
    return load_or_measure(cfg, lam + 1, None, root=str(root), log=log, loop_fns=profile_loops(cfg, {}))


def compare(lams: Sequence[int] = (2, 4), steps: int = 100, delay: float = 0.05, out: Optional[Path] = None,
            log=print) -> List[dict]:
    """Run every protocol of :func:`protocols` for real and simulated at each λ; one row each."""
    out = Path(out or "experiments/bench/sim")
    rows = []
    for lam in lams:
        prof = profile_for(lam, out, log)
        runs = [(label, fields, ov, real_run(lam, ov, steps, out / "runs")) for label, ov, fields in protocols(lam, delay)]
        # the spread: rank 0's step times in the asynchronous run, where a worker waits for nobody
        async_run = next((r for label, f, ov, r in runs if f.get("n") == lam and not f.get("stragglers")), None)
        cv = robust_cv(step_times(async_run.records())) if async_run is not None and async_run.summary.get("ps") else 0.0
        for label, fields, ov, run in runs:
            s = run.summary
            ps = s.get("ps") or {}
            if s.get("status") != "completed" or not ps:
                rows.append({"λ": lam, "protocol": f"{label} (run {s.get('status')})", "run": run.path.name})
                continue
            # the run's row as the planner prices it: compute at λ ranks on these cores, bookkeeping, the
            # in-loop line (the stragglers come from the run's own config)
            fields = {k: v for k, v in fields.items() if k != "stragglers"}
            cfg = run_cfg(lam, ov, steps, out / "runs")
            spec = spec_here(prof, cfg, lam, steps=steps, cv=min(cv, 10.0), seed=lam, **fields)
            sim = simulate(spec)
            planner_sps = planner_samples_per_s(prof, cfg, lam, fields)
            # as the staleness benchmark counts: every gradient applied, per second of rank 0's loop
            real_sps = ps["gradients"] * BATCH / s["train_time_s"]
            sim_sps = sim["gradients_applied"] * BATCH / sim["done_s"][0]
            rows.append({"λ": lam, "protocol": label, "steps": steps,
                         "sim model": f"in-loop line α' {1e3 * spec.latency:.2f} ms, M/β' {1e3 * spec.model_bytes / spec.bandwidth:.2f} ms",
                         "compute + bookkeeping ms (profile, λ ranks)": round(1e3 * spec.compute_s, 1),
                         "cv": round(cv, 2),
                         "rank 0 step ms (real / sim)": f"{1e3 * statistics.median(step_times(run.records())):.1f} / "
                                                        f"{1e3 * sim['done_s'][0] / steps:.1f}",
                         "⟨τ⟩ real": round(ps["staleness_mean"], 2), "⟨τ⟩ sim": round(sim["mean_staleness"], 2),
                         "max τ real": ps["staleness_max"], "max τ sim": sim["max_staleness"],
                         "τ hist real": " ".join(map(str, ps["staleness_hist"])),
                         "τ hist sim": " ".join(map(str, sim["staleness_hist"])),
                         "TV distance": round(tv_distance(ps["staleness_hist"], sim["staleness_hist"]), 3),
                         "samples/s real": round(real_sps), "samples/s sim": round(sim_sps),
                         "samples/s error": f"{100 * (sim_sps / real_sps - 1):+.0f} %",
                         "samples/s planner": round(planner_sps),
                         "planner error": f"{100 * (planner_sps / real_sps - 1):+.0f} %", "run": run.path.name})
            log(f"λ={lam} {label}: ⟨τ⟩ {rows[-1]['⟨τ⟩ real']} real, {rows[-1]['⟨τ⟩ sim']} sim; "
                f"samples/s {rows[-1]['samples/s real']} real, {rows[-1]['samples/s sim']} sim")
    return rows
