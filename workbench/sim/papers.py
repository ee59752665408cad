"""The papers' figures at their scale, from a calibrated profile: each function returns table rows
(dicts), for ``python -m workbench.bench sim`` and notebook 60.

- :func:`rudra_tau`: Rudra's ⟨τ⟩ against n at λ = 30 (the paper: ⟨τ⟩ ≈ n, τ rarely beyond 2n);
- :func:`straggler_throughput`: hardsync vs n-softsync vs async at λ = 30, 60 with one straggler;
- :func:`stanza_vs_ps`: Stanza's best n_f and its speed-up over the parameter server;
- :func:`crossover_vs_workers`: each compressor's crossover link rate against the worker count.

The asynchronous rows are simulated (:func:`workbench.sim.simulate`); hardsync is simulated and
also given by the analytic model (:func:`workbench.perfmodel.paradigms.ps_sync`) as a cross-check;
Stanza and the compressors are the analytic models of :mod:`workbench.perfmodel`.
"""
from __future__ import annotations

from typing import List, Sequence

from workbench.perfmodel import paradigms as P
from workbench.perfmodel.collectives import GBIT
from workbench.sim.ps import simulate
from workbench.sim.spec import from_profile


def rudra_tau(prof, lam: int = 30, ns: Sequence[int] = (1, 2, 4, 8, 15, 30), bandwidth: float = 10 * GBIT,
              latency: float = 50e-6, steps: int = 200, cv: float = 0.1, servers: int = 1, seed: int = 0) -> List[dict]:
    rows = []
    for n in ns:
        r = simulate(from_profile(prof, lam, bandwidth, latency, n=n, steps=steps, cv=cv, servers=servers, seed=seed))
        h = r["staleness_hist"]
        n_eff = lam / (lam // n)  # c = ⌊λ/n⌋: the n the protocol actually runs
        beyond = sum(h[int(2 * n_eff) + 1:]) / max(1, sum(h))
        rows.append({"λ": lam, "n": n, "c": lam // n, "⟨τ⟩": round(r["mean_staleness"], 2),
                     "⟨τ⟩ / (λ/c)": round(r["mean_staleness"] / n_eff, 2), "max τ": r["max_staleness"],
                     "P(τ > 2λ/c)": f"{100 * beyond:.2f} %", "updates/s": round(r["updates_per_s"], 1),
                     "server busy": f"{100 * r['server_utilisation']:.0f} %"})
    return rows


def straggler_throughput(prof, lams: Sequence[int] = (30, 60), slowdown: float = 2.0, bandwidth: float = 10 * GBIT,
                         latency: float = 50e-6, steps: int = 100, cv: float = 0.1, seed: int = 0) -> List[dict]:
    rows = []
    for lam in lams:
        for label, kw in (("hardsync", dict(protocol="hardsync")), ("1-softsync", dict(n=1)),
                          (f"{lam // 2}-softsync", dict(n=lam // 2)), (f"{lam}-softsync (async)", dict(n=lam))):
            got = {}
            for strag in (False, True):
                st = ((0, slowdown, 0.0),) if strag else ()
                got[strag] = simulate(from_profile(prof, lam, bandwidth, latency, steps=steps, cv=cv, seed=seed,
                                                   stragglers=st, **kw))
            r = got[True]
            row = {"λ": lam, "protocol": label, "samples/s": round(r["samples_per_s"]),
                   "no straggler": round(got[False]["samples_per_s"]),
                   "straggler cost": f"{100 * (1 - r['samples_per_s'] / got[False]['samples_per_s']):.0f} %",
                   "updates/s": round(r["updates_per_s"], 1), "⟨τ⟩": round(r["mean_staleness"], 2),
                   "max τ": r["max_staleness"], "server busy": f"{100 * r['server_utilisation']:.0f} %"}
            if kw.get("protocol") == "hardsync":
                cl = P.Cluster(lam + 1, bandwidth, latency, stragglers=((0, slowdown, 0.0),))
                row["analytic samples/s"] = round(P.ps_sync(prof, cl).samples_per_s)
            rows.append(row)
    return rows


def stanza_vs_ps(prof, workers: Sequence[int] = (16, 32, 64), bandwidth: float = 10 * GBIT,
                 latency: float = 50e-6, steps: int = 100) -> List[dict]:
    """For N processes on one link each: Stanza's best split (n_f FC workers of N) against the
    parameter server on the same N (N − 1 workers and one server; hardsync analytic, async simulated)."""
    rows = []
    for w in workers:
        cl = P.Cluster(w, bandwidth, latency)
        stanza = {k: P.stanza(prof, cl, fc_workers=k).samples_per_s for k in range(1, w)}
        best = max(stanza, key=stanza.get)
        ps_sync = P.ps_sync(prof, cl).samples_per_s
        ps_async = simulate(from_profile(prof, w - 1, bandwidth, latency, steps=steps))["samples_per_s"]
        sync = P.sync(prof, cl).samples_per_s
        rows.append({"N": w, "best n_f": best, "Stanza samples/s": round(stanza[best]),
                     "ps/sync samples/s": round(ps_sync), "ps/async samples/s (sim)": round(ps_async),
                     "speed-up over the PS": f"{stanza[best] / max(ps_sync, ps_async):.2f}x",
                     "sync (all-reduce) samples/s": round(sync)})
    return rows


def crossover_vs_workers(prof, workers: Sequence[int] = (2, 4, 8, 16, 32, 64, 128, 256, 1024),
                         latency: float = 50e-6) -> List[dict]:
    """Each compressor's crossover (the link rate below which it beats plain all-reduce), by N."""
    rows = []
    for w in workers:
        row = {"N": w}
        for comp in sorted(prof.codecs):
            x = P.crossover_bps(prof, P.Cluster(w, GBIT, latency), comp)
            row[comp] = "never" if x is None else ("always" if x == float("inf") else f"{x / 1e9:.3g} Gbit/s")
        rows.append(row)
    return rows


def profile_with_codecs(model: str, speedup: float = 1.0, root="experiments", batch: int = 16, log=print):
    """This machine's profile of ``model`` on the digits (resized to 32x32 for VGG-16, as in the README's
    ``python -m workbench.plan model=vgg16 data.resize=32``) with every compressor's codec, as the
    planner measures and caches it; compute ÷ ``speedup``."""
    from workbench.plan import _plan_rows
    ov = [f"model={model}", f"data.batch_size={batch}"] + (["data.resize=32"] if model == "vgg16" else [])
    _, (_, prof) = _plan_rows(ov, ["10gbit"], [2], None, speedup, "50us", ["compressed"], str(root), log)
    return prof


def figures(val, tau, cross) -> list:
    """Plotly figures: the validation's τ distributions (real vs simulated), Rudra's ⟨τ⟩ against n,
    and the compression crossover against N."""
    import plotly.graph_objects as go
    figs = []
    h = go.Figure()
    for r in val:
        if "τ hist real" not in r:
            continue
        for kind in ("real", "sim"):
            counts = [int(c) for c in r[f"τ hist {kind}"].split()]
            tot = sum(counts) or 1
            h.add_bar(name=f"λ={r['λ']} {r['protocol']} ({kind})", x=list(range(len(counts))), y=[c / tot for c in counts])
    h.update_layout(title="Staleness τ of applied gradients: real run vs simulator", xaxis_title="τ",
                    yaxis_title="fraction of gradients", barmode="group")
    figs.append(h)
    t = go.Figure()
    t.add_scatter(x=[r["n"] for r in tau], y=[r["⟨τ⟩"] for r in tau], name="⟨τ⟩ simulated", mode="lines+markers")
    t.add_scatter(x=[r["n"] for r in tau], y=[r["λ"] / r["c"] for r in tau], name="λ/c (Rudra: ⟨τ⟩ ≈ n)", mode="lines")
    t.update_layout(title=f"Rudra at λ = {tau[0]['λ'] if tau else ''}: ⟨τ⟩ against n", xaxis_title="n", yaxis_title="⟨τ⟩")
    figs.append(t)
    c = go.Figure()
    for comp in [k for k in (cross[0] if cross else {}) if k != "N"]:
        ys = [float(r[comp].split()[0]) if r[comp].endswith("Gbit/s") else None for r in cross]
        c.add_scatter(x=[r["N"] for r in cross], y=ys, name=comp, mode="lines+markers")
    c.update_layout(title="Compression crossover against workers (below the line the compressor wins)",
                    xaxis_title="workers N", xaxis_type="log", yaxis_title="Gbit/s", yaxis_type="log")
    figs.append(c)
    return figs
