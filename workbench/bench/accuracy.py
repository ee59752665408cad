"""Suite ``accuracy``: the papers' accuracy findings on the hard task (``data=digits_hard``,
docs/accuracy.md), five tables, each with the claim it tests and a verdict computed from its rows.

    python -m workbench.bench accuracy --only a --write   # (a) large-batch limit: scaling rules vs global batch
    python -m workbench.bench accuracy --only b --write   # (b) Shallue's regimes: steps to target vs batch
    python -m workbench.bench accuracy --only c --write   # (c) sync vs async paradigms on 4 and 8 processes
    python -m workbench.bench accuracy --only d --write   # (d) Rudra's μλ: accuracy vs λ, constant and growing μλ
    python -m workbench.bench accuracy --only e --write   # (e) every registered compressor's price in steps
    python -m workbench.bench accuracy --from-runs --write  # the tables again from the stored runs
    python -m workbench.bench accuracy --only c --resume --stop-after 150 --write   # over several sessions
    python -m workbench.bench accuracy --tiny             # CI smoke: 1 000 images, 1 seed, 2 configs a table

Every configuration runs once per seed (``--seeds``, interleaved: all configurations of a seed, then
the next seed); a row shows the median over seeds and each measure's min–max. Steps and time to
target come from each run's ``metrics.jsonl``: its first evaluation at or above ``--target`` ("n.r.":
not reached by the run's last step, the ``cap`` column). Runs go to
``<out>/accuracy/<table>/runs/``, the list of a table's runs to ``<out>/accuracy/<table>/index.json``
(what ``--from-runs`` and :func:`load` read; with ``--index-dir DIR``, ``DIR/<table>.json``), the
report to ``<out>/accuracy/<table>/``. Each index entry keeps its run's evaluations, final accuracy
and status, so the tables and ``--resume`` need no run directory: the campaigns keep their indexes
in ``experiments/accuracy-runs/`` (in git) and go on from a fresh checkout. ``--tiny``
writes to ``<out>/accuracy-tiny/`` instead. ``--resume`` keeps the runs a table's index already holds
that ended (completed or diverged) with the same overrides and seed, and runs the rest;
``--stop-after MINUTES`` starts no run after that long, so a session ends with whole runs and a
table of them (the notes say how many are missing): a campaign of hours is the same command again.

(a) ``trainer=sync`` on ``--nproc`` ranks, global batch ``--batches``, ``--epochs`` passes, the learning
rate scaled from 64 by ``optim.scale_lr=linear``, linear with ``--warmup-epochs`` of warm-up, and
``sqrt``; gns: the median of the run's logged gradient noise scale. (b) the same with linear + warm-up,
up to ``min(--max-steps, --max-epochs passes)`` steps. (c) per-worker batch ``--batch``, ``--max-steps``;
PS-based paradigms take one of the processes as their server. In (b) and in (c)'s sync, BMUF and local
SGD (whose ranks evaluate together) a run ends at the target (``trainer.stop_at_accuracy``): its
steps and time to target are those of a full run, its final accuracy the first at the target. (d) ``trainer=staleness``, λ-softsync
with α₀/τ, λ + 1 processes, ``--epochs`` passes; constant μλ = ``--global-batch``; growing: μ fixed at
``--global-batch``. (e) ``trainer=compressed`` with each registered compressor at its bench settings
against ``trainer=sync``, ``--nproc-e`` ranks.
"""
from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path

import workbench
from workbench.analysis import accuracy as acc
from workbench.bench import suite

TABLES = ["a", "b", "c", "d", "e"]
TITLES = {"a": "large-batch limit", "b": "Shallue's regimes", "c": "sync vs async",
          "d": "Rudra's μλ", "e": "compression's price in steps"}
RULES = {"linear": ["optim.scale_lr=linear"], "linear+warm-up": ["optim.scale_lr=linear"], "sqrt": ["optim.scale_lr=sqrt"]}


def _ints(s: str) -> list:
    return [int(x) for x in str(s).split(",") if x]


def plan(t: str, a) -> list:
    """(config, overrides) of every run of table ``t`` for one seed."""
    n, ev = a.train_size, lambda steps: f"trainer.eval_every={max(1, steps // a.evals)}"  # noqa: E731
    out = []
    if t in "ab":
        for rule in (["linear+warm-up"] if t == "b" else a.rules.split(",")):
            for b in _ints(a.batches):
                steps = (math.ceil(a.epochs * n / b) if t == "a" else min(a.max_steps, math.ceil(a.max_epochs * n / b)))
                warm = math.ceil(a.warmup_epochs * n / b) if rule.endswith("warm-up") else 0
                out.append(({"rule": rule, "batch": b} if t == "a" else {"batch": b},
                            ["trainer=sync", f"cluster.nproc={a.nproc}", f"data.global_batch_size={b}", *RULES[rule],
                             f"optim.warmup_steps={warm}", f"trainer.max_steps={steps}", ev(steps),
                             *([f"trainer.stop_at_accuracy={a.target}"] if t == "b" else [])]))
    elif t == "c":
        for p in _ints(a.processes):
            lam = p - 1
            rows = {"sync": ["trainer=sync"], "ps hardsync": ["trainer=ps", "trainer.mode=sync"],
                    "async, compensated momentum": ["trainer=ps", "trainer.mode=async", "trainer.compensate_momentum=true"],
                    f"{max(1, lam // 2)}-softsync, α₀/τ": ["trainer=staleness", f"trainer.n={max(1, lam // 2)}",
                                                          "trainer.lr_modulation=per_gradient"],
                    "EASGD": ["trainer=easgd"], "BMUF": ["trainer=bmuf"], "local SGD": ["trainer=local_sgd"]}
            for name, ov in list(rows.items())[:a.limit]:
                stop = [f"trainer.stop_at_accuracy={a.target}"] if ov[0] in ("trainer=sync", "trainer=bmuf",
                                                                              "trainer=local_sgd") else []
                out.append(({"processes": p, "paradigm": name},
                            ov + [f"cluster.nproc={p}", f"data.batch_size={a.batch}", f"trainer.max_steps={a.max_steps}",
                                  ev(a.max_steps), *stop]))
    elif t == "d":
        for series in ("constant μλ", "growing μλ")[:1 if a.tiny else 2]:
            for lam in _ints(a.lams):
                mu = a.global_batch // lam if series.startswith("constant") else a.global_batch
                out.append(({"series": series, "λ": lam, "μ": mu, "μλ": mu * lam},
                            ["trainer=staleness", f"trainer.n={lam}", "trainer.lr_modulation=per_gradient",
                             f"cluster.nproc={lam + 1}", f"data.batch_size={mu}", f"trainer.epochs={a.epochs}",
                             "trainer.max_steps=0", f"trainer.eval_every={a.eval_every}"]))
    elif t == "e":
        from workbench.compress import COMPRESSORS
        common = [f"cluster.nproc={a.nproc_e}", f"data.batch_size={a.batch}", f"trainer.max_steps={a.max_steps}",
                  ev(a.max_steps)]
        out.append(({"compressor": "uncompressed sync"}, ["trainer=sync", *common]))
        out += [({"compressor": name}, ["trainer=compressed", f"compressor={name}", *c.bench_overrides, *common])
                for name, c in COMPRESSORS.items()]
        out = out[:a.limit]
    return [(cfg, ov) for cfg, ov in out][:a.limit]


FINAL = ("completed", "diverged")  # a run that ended: what --resume keeps


def index_path(t: str, a, out: Path) -> Path:
    """Where table ``t``'s index lives: ``<index-dir>/<t>.json`` with ``--index-dir`` (a folder kept
    in git, so that a campaign goes on from a fresh checkout), else ``<out>/index.json``."""
    return workbench.project_path(a.index_dir) / f"{t}.json" if getattr(a, "index_dir", None) else out / "index.json"


def kept_entries(idx: Path) -> dict:
    """The entries of the index ``idx`` whose run ended, by (overrides, seed): what ``--resume``
    keeps. An entry's status is its stored record's, else its run's summary; entries from before
    the index recorded overrides are not matched (they run again)."""
    if not idx.exists():
        return {}
    from workbench.runs.store import read_json
    kept = {}
    for e in json.loads(idx.read_text())["entries"]:
        status = (e["record"]["status"] if "record" in e
                  else (read_json(idx.parent / e["run"] / "summary.json") or {}).get("status"))
        if "overrides" in e and status in FINAL:
            kept[(tuple(e["overrides"]), e["seed"])] = e
    return kept


def launch(t: str, a, out: Path, started: float | None = None) -> tuple:
    """Run table ``t``'s configurations for every seed, interleaved; return (and keep in
    ``index.json``) its entries, and how many runs ``--stop-after`` left (counted from ``started``,
    by default now)."""
    started = time.monotonic() if started is None else started
    base = ["data=digits_hard", f"data.augment={a.augment}", f"data.train_size={a.train_size}", f"data.test_size={a.test_size}",
            "model=small_cnn", "trainer.progress=false", f"cluster.timeout_s={a.timeout}", f"output_root={out / 'runs'}"]
    base.append(f"data.root={workbench.project_path(workbench.compose(base).data.root)}")  # one cache, wherever run from
    todo = plan(t, a)
    cfgs = [[workbench.compose(base + ov + [f"seed={s}"]) for _, ov in todo] for s in range(a.seeds)]  # all checked first
    idx = index_path(t, a, out)
    kept = kept_entries(idx) if a.resume else {}
    entries, missing, ran = [], 0, 0

    def save():  # after every run, with the kept runs not reached yet: a killed session loses none
        done = {(tuple(e.get("overrides", ())), e["seed"]) for e in entries}
        idx.parent.mkdir(parents=True, exist_ok=True)
        idx.write_text(json.dumps({"target": a.target, "entries": entries + [
            e for k, e in kept.items() if k not in done]}, indent=1))

    for s, seed_cfgs in enumerate(cfgs):
        for (cfg_cols, ov), cfg in zip(todo, seed_cfgs):
            if (tuple(ov), s) in kept:
                e = kept[(tuple(ov), s)]
                rec, run_dir = e.get("record"), idx.parent / e["run"]
                if t == "e" and cfg.trainer.name == "sync" and rec and "update_stats" not in rec \
                        and (run_dir / "model.pt").is_file():  # kept from before records held it; its run is here
                    rec.update(reference_fields(run_dir, cfg, todo, seed_cfgs))
                if t == "c" and rec and "update" not in rec:
                    rec.update(law_fields(cfg))
                entries.append({**e, "config": cfg_cols})
                continue
            if a.stop_after is not None and (a.stop_after == 0 or time.monotonic() - started > 60 * a.stop_after):
                missing += 1
                continue
            run = workbench.launch(cfg, progress=False, check=False)
            rec = acc.record(run.path)
            if t == "e" and cfg.trainer.name == "sync" and rec["status"] == "completed":
                rec.update(reference_fields(run.path, cfg, todo, seed_cfgs))
            if t == "c":
                rec.update(law_fields(cfg))
            entries.append({"table": t, "config": cfg_cols, "seed": s, "overrides": ov,
                            "run": os.path.relpath(run.path, idx.parent), "record": rec})
            ran += 1
            save()
            suite.progress({**cfg_cols, "seed": s, **acc.measures(rec, a.target)})
    save()
    if a.resume:
        print(f"--resume: ({t}) kept {len(entries) - ran} runs that ended, ran {ran}"
              + (f", left {missing} for a later session (--stop-after)" if missing else ""))
    return entries, missing


def reference_fields(run_dir, cfg, todo, seed_cfgs) -> dict:
    """What table (e)'s predicted steps need of a seed's uncompressed sync run besides its
    evaluations: its global batch and workers, and each compressor's ρ, ω (or None) measured on its
    final weights (:mod:`workbench.plan.update_stats`)."""
    from workbench.data import global_batch_size
    from workbench.plan.update_stats import measure
    comps = {cols["compressor"]: c.compressor for (cols, _), c in zip(todo, seed_cfgs) if c.trainer.name == "compressed"}
    stats = measure(run_dir, comps)
    n = int(cfg.cluster.nproc)
    return {"global_batch": global_batch_size(cfg, n), "workers": n,
            "update_stats": {k: None if s is None else [s.rho, s.omega, s.error_feedback, s.delta] for k, s in stats.items()}}


def law_fields(cfg) -> dict:
    """What table (c)'s predicted steps need of a run besides its evaluations: the samples of a
    worker step, its workers, and the update its paradigm declares (``[rate, staleness]``; None: no
    law, ``ParadigmSpec.update_law``)."""
    from workbench.plan.to_target import declared_update
    batch, w, up = declared_update(cfg)
    return {"global_batch": batch, "workers": w, "update": None if up is None else [up.rate, up.staleness]}


def load(dirs, target: float | None = None, tol: float = 0.01) -> tuple:
    """``(tables, verdicts)`` from stored tables: each of ``dirs`` (paths or globs, relative to the
    project root) a table's index (``--index-dir``'s ``<t>.json``) or a directory holding an
    ``index.json``; ``target`` defaults to the stored one."""
    import glob
    tables = {}
    for pattern in [dirs] if isinstance(dirs, (str, Path)) else dirs:
        for d in sorted(glob.glob(str(workbench.project_path(str(pattern))), recursive=True)):
            idx = Path(d) / "index.json" if Path(d).is_dir() else Path(d)
            if idx.suffix == ".json" and idx.exists():
                stored = json.loads(idx.read_text())
                tables.update(acc.aggregate(stored["entries"], target or stored["target"], idx.parent))
    return tables, acc.verdicts(tables, tol)


def figures(tables: dict) -> dict:
    """One plotly figure per table present: (a) final accuracy vs global batch per rule with the noise
    scale, (b) steps to target vs batch on log–log with the perfect-scaling line, (c) time and steps to
    target per paradigm, (d) accuracy vs λ, (e) steps to target per compressor."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots
    figs = {}
    if tables.get("a"):
        f = make_subplots(specs=[[{"secondary_y": True}]])
        for rule in dict.fromkeys(r["rule"] for r in tables["a"]):
            sub = [r for r in tables["a"] if r["rule"] == rule]
            f.add_scatter(x=[r["batch"] for r in sub], y=[r["final_acc"] for r in sub], name=rule, mode="lines+markers")
            f.add_scatter(x=[r["batch"] for r in sub], y=[r["gns"] for r in sub], name=f"B_noise ({rule})",
                          mode="markers", marker_symbol="x", secondary_y=True)
        f.update_xaxes(type="log", title="global batch")
        f.update_yaxes(title="final test accuracy", secondary_y=False)
        f.update_yaxes(title="gradient noise scale", type="log", secondary_y=True)
        figs["a"] = f.update_layout(title="(a) final accuracy at a fixed epoch budget vs global batch")
    if tables.get("b"):
        sub = sorted((r for r in tables["b"] if r["steps_to_target"]), key=lambda r: r["batch"])
        f = go.Figure().add_scatter(x=[r["batch"] for r in sub], y=[r["steps_to_target"] for r in sub],
                                    name="measured", mode="lines+markers")
        if sub:
            f.add_scatter(x=[r["batch"] for r in sub], y=[sub[0]["steps_to_target"] * sub[0]["batch"] / r["batch"]
                                                          for r in sub], name="perfect scaling", line_dash="dash")
        figs["b"] = f.update_layout(title="(b) steps to target vs global batch", xaxis_type="log", yaxis_type="log",
                                    xaxis_title="global batch", yaxis_title="steps to target")
    if tables.get("c"):
        f = make_subplots(rows=1, cols=2, subplot_titles=("time to target (s)", "steps to target"))
        for p in dict.fromkeys(r["processes"] for r in tables["c"]):
            sub = [r for r in tables["c"] if r["processes"] == p]
            for col, y in ((1, "time_to_target_s"), (2, "steps_to_target")):
                f.add_bar(x=[r["paradigm"] for r in sub], y=[r[y] for r in sub], name=f"{p} processes", row=1, col=col,
                          showlegend=col == 1)
        figs["c"] = f.update_layout(title="(c) sync vs async: to target (missing bar: not reached)")
    if tables.get("d"):
        f = go.Figure()
        for s in dict.fromkeys(r["series"] for r in tables["d"]):
            sub = [r for r in tables["d"] if r["series"] == s]
            f.add_scatter(x=[r["λ"] for r in sub], y=[r["final_acc"] for r in sub], name=s, mode="lines+markers")
        figs["d"] = f.update_layout(title="(d) accuracy vs λ", xaxis_title="λ (workers)", yaxis_title="final test accuracy")
    if tables.get("e"):
        rows = tables["e"]
        f = go.Figure().add_bar(x=[r["compressor"] for r in rows], y=[r["steps_to_target"] for r in rows], name="measured")
        if any(r.get("predicted_steps") for r in rows):
            f.add_bar(x=[r["compressor"] for r in rows], y=[r.get("predicted_steps") for r in rows],
                      name="predicted (time-to-target law)")
        figs["e"] = f.update_layout(title="(e) steps to target per compressor (missing bar: not reached)",
                                    yaxis_title="steps to target", yaxis_type="log")
    return figs


def parse(argv=None):
    p = suite.parser("accuracy", __doc__, "1 000 images, 1 seed, a few steps, 2 configurations a table")
    p.add_argument("--only", default=",".join(TABLES), help="tables to run, e.g. a,c (default: all five)")
    p.add_argument("--from-runs", action="store_true", help="rebuild the tables from their indexes")
    p.add_argument("--index-dir", default=None, metavar="DIR", help="keep each table's index (every run's "
                   "evaluations) in DIR/<t>.json instead of <out>/accuracy/<t>/index.json: a folder kept in git "
                   "(experiments/accuracy-runs) lets a campaign go on from a fresh checkout")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--target", type=float, default=0.90, help="target test accuracy")
    p.add_argument("--tolerance", type=float, default=0.01, help="accuracy a claim may lose and still hold")
    p.add_argument("--train-size", type=int, default=100000)
    p.add_argument("--test-size", type=int, default=5000)
    p.add_argument("--augment", default="medium", help="data.augment: light | medium | strong")
    p.add_argument("--nproc", type=int, default=2, help="(a), (b): ranks")
    p.add_argument("--batches", default="64,128,256,512,1024,2048,4096,8192", help="(a), (b): global batches")
    p.add_argument("--rules", default="linear,linear+warm-up,sqrt", help="(a): " + ", ".join(RULES))
    p.add_argument("--epochs", type=float, default=3, help="(a), (d): the fixed epoch budget")
    p.add_argument("--warmup-epochs", type=float, default=0.5, help="(a), (b): warm-up of the linear rule")
    p.add_argument("--max-epochs", type=float, default=10, help="(b): step cap in passes")
    p.add_argument("--max-steps", type=int, default=3000, help="(b), (c), (e): step cap")
    p.add_argument("--evals", type=int, default=40, help="(a), (b), (c), (e): evaluations per run")
    p.add_argument("--processes", default="4,8", help="(c): processes per run")
    p.add_argument("--batch", type=int, default=32, help="(c), (e): batch per worker")
    p.add_argument("--lams", default="1,2,4,8", help="(d): λ")
    p.add_argument("--global-batch", type=int, default=128, help="(d): μλ of the constant series, μ of the growing")
    p.add_argument("--eval-every", type=int, default=50, help="(d): steps between evaluations")
    p.add_argument("--nproc-e", type=int, default=4, help="(e): ranks")
    p.add_argument("--timeout", type=int, default=7200, help="cluster.timeout_s of every run")
    p.add_argument("--resume", action="store_true", help="keep the runs each table's index holds that ended with "
                   "the same overrides and seed; run the rest")
    p.add_argument("--stop-after", type=float, default=None, metavar="MINUTES",
                   help="start no run after this long (whole runs kept; the same command again adds the rest)")
    p.add_argument("--configs", type=int, default=0, help="run only each table's first N configurations (0: all; "
                   "--tiny: 2)")
    a = p.parse_args(argv)
    a.limit = a.configs or None
    if a.tiny:
        a.seeds, a.train_size, a.test_size, a.target, a.limit, a.augment = 1, 1000, 200, 0.3, a.configs or 2, "light"
        a.batches, a.rules, a.epochs, a.max_steps, a.max_epochs, a.evals = "64,128", "linear+warm-up", 1, 12, 1, 4
        a.processes, a.lams, a.global_batch, a.eval_every, a.nproc_e = "2", "1,2", 32, 4, 2
    if a.stop_after is not None and a.stop_after < 0:
        raise workbench.ConfigError(f"invalid value {a.stop_after!r} for --stop-after: must be >= 0 minutes")
    if a.from_runs and (a.resume or a.stop_after is not None):
        raise workbench.ConfigError("--from-runs runs nothing: it takes neither --resume nor --stop-after")
    if any(t not in TABLES for t in a.only.split(",")):
        raise workbench.ConfigError(f"invalid value {a.only!r} for --only: choose from {', '.join(TABLES)}")
    if any(r not in RULES for r in a.rules.split(",")):
        raise workbench.ConfigError(f"invalid value {a.rules!r} for --rules: choose from {', '.join(RULES)}")
    return a


def main(argv=None) -> tuple:
    """Run (or with ``--from-runs`` read) the selected tables, write their reports; return
    ``(tables, verdicts)``."""
    a = parse(argv)
    name = "accuracy-tiny" if a.tiny else "accuracy"  # a smoke run never replaces a campaign's tables
    root = Path(a.out).resolve() / name
    tables, missing, started = {}, {}, time.monotonic()
    for t in [t for t in TABLES if t in a.only.split(",")]:
        if not a.from_runs:
            missing[t] = launch(t, a, root / t, started)[1]
        tables.update(load([index_path(t, a, root / t)], a.target)[0])
    notes = acc.verdicts(tables, a.tolerance)
    for t, n in missing.items():
        if n:
            notes[t] = (f"**{n} runs not measured yet** (--stop-after); run the same command with --resume to add "
                        f"them. " + notes.get(t, ""))
    cmd = "python -m workbench.bench accuracy " + " ".join(argv if argv is not None else [])
    figs = figures(tables)
    for t, rows in tables.items():
        tab = suite.Table(f"table_{t}", f"({t}) {TITLES[t]}: target {a.target:.0%}, medians over seeds (spread: "
                           "min–max; n.r.: not reached by the cap)", rows)
        path = suite.write(f"{name}/{t}", f"{name} ({t}): {TITLES[t]}", cmd.strip(), [tab],
                            [figs[t]] if t in figs else [], notes=notes.get(t, ""), out_root=a.out,
                            benchmarks_md=suite.ROOT / "BENCHMARKS.md" if a.write else None)
        print(f"\n{tab.markdown()}\n\n{notes.get(t, '')}\n\nreport: {path / 'report.html'}")
    return tables, notes
