"""Suite ``bytes``: bytes per worker per step of every paradigm, measured by the meter next to the
analytic count, per model.

    python -m workbench.bench bytes                                  # small_cnn, alexnet, vgg16, resnet18; N = 4
    python -m workbench.bench bytes --models vgg16 --write           # one model, and update BENCHMARKS.md
    python -m workbench.bench bytes --tiny                           # CI smoke: small_cnn, 2 workers, 3 compressors

Runs (N workers each, ``--steps`` steps, batch ``--batch`` per worker; small_cnn on the digits, the
others on CIFAR-size synthetic data, 3×32×32, 10 classes):

- ``trainer=sync``: ring all-reduce, analytic 2(N−1)/N·M each way (M = the parameters' bytes);
- ``trainer=ps`` (sync, N workers + 1 server): push M, pull M (plus 32-byte headers per server);
- ``trainer=stanza`` (N−1 CONV + 1 FC workers): a CONV worker's ring all-reduce of the conv part
  among N−1, plus its boundary activations and their gradients (``perfmodel.stanza``);
- ``trainer=compressed`` with each registered compressor: the payload its format implies for each of
  DDP's buckets (the compressor's ``payload_bytes``), times the collective's factor (all-reduce
  2(N−1)/N, all-gather N−1, plus the 8-byte length every all-gather exchanges first so that unequal
  payloads never hang); each run with the compressor's ``bench_overrides`` (the sparsifiers keep 1 %).

Each trainer's spec (:class:`workbench.spec.ParadigmSpec`) says which runs it contributes
(``bench_variants``) and its analytic count (``analytic_bytes``): a new trainer or compressor joins this suite without an edit here.

Measured = worker rank 0's metered bytes per training step (``ranks/rank0.jsonl``), the first two
steps left out (DDP rebuilds its buckets after step 1; PowerSGD compresses from step 2 on). Sent and
received are both in the CSV; the table shows sent (for these symmetric algorithms they are equal,
except the PS headers). Bytes are exact: they do not depend on the machine or its load, so one run
each is the figure; this suite times nothing (a few small steps are no throughput benchmark: the
timed suites, with their interleaved repeats, are).
"""
from __future__ import annotations

import json
from pathlib import Path

import workbench
from workbench.bench import suite
from workbench.compress import COMPRESSORS
from workbench.config import validate
from workbench.trainers import SPECS

MODELS = ("small_cnn", "alexnet", "vgg16", "resnet18")


def per_step(run, rank: int = 0, skip: int = 2) -> dict:
    """Mean bytes per training step of one rank by direction: payload, and control headers apart."""
    recs = [json.loads(l) for l in (run.path / "ranks" / f"rank{rank}.jsonl").read_text().splitlines()]
    recs = [r for r in recs if "step" in r and r.get("role") != "server" and r["step"] > skip] or recs
    n = max(1, len(recs))
    out = {"sent": 0.0, "recv": 0.0, "control": 0.0}
    for r in recs:
        for cat, c in r["comm"].items():
            if cat == "ps_control":
                out["control"] += (c["sent"] + c["recv"]) / n
            else:
                out["sent"] += c["sent"] / n
                out["recv"] += c["recv"] / n
    return out


def param_shapes(run) -> list:
    from workbench import data as data_mod
    from workbench.models import build_model
    cfg = run.config
    return [tuple(p.shape) for p in build_model(cfg, data_mod.DATASETS[cfg.data.name].spec(cfg.data)).parameters()]


def analytic_sent(run) -> float:
    """The trainer's own count (``ParadigmSpec.analytic_bytes``) of the bytes a worker sends per step."""
    return SPECS[run.config.trainer.name].analytic_bytes(run.config, run.summary, param_shapes(run))


def runs_for(N: int, compressors) -> list:
    """(label, kind, overrides) of one model's runs: every registered trainer's bytes variants
    (``ParadigmSpec.bench_variants``), those with a compressor only for the ``compressors`` asked and
    in their order; ``kind`` is the compressor's name for those, else the trainer's."""
    compressors = list(compressors)
    first = ["sync", "ps", "stanza"]  # the reference rows first, as in BENCHMARKS.md
    out = []
    for name in sorted(SPECS, key=lambda t: (first.index(t) if t in first else len(first), t)):
        plain, compressed = [], []
        for label, ov in SPECS[name].bench_variants(N):
            picked = [o.split("=", 1)[1] for o in ov if o.startswith("compressor=")]
            if not picked:
                plain.append((label, name, ov))
            elif picked[0] in compressors:
                compressed.append((label, picked[0], ov))
        out += plain + sorted(compressed, key=lambda r: compressors.index(r[1]))
    return out


def main(argv=None) -> None:
    p = suite.parser("bytes", __doc__, "small_cnn, 2 workers, 3 compressors")
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--workers", type=int, default=4, help="N")
    p.add_argument("--batch", type=int, default=4, help="samples per worker per step (Stanza's activations scale with it)")
    p.add_argument("--steps", type=int, default=4, help="the first 2 are left out")
    p.add_argument("--compressors", default=",".join(COMPRESSORS), help=f"any of {', '.join(COMPRESSORS)}")
    a = p.parse_args(argv)
    if a.tiny:
        a.models, a.workers, a.compressors = "small_cnn", 2, "none,topk,powersgd"
    models = a.models.split(",")
    report_dir = f"bytes-{a.workers}w"  # one report per N: a run at another N does not overwrite it
    out = Path(a.out) / report_dir
    rows, jobs = [], []
    for model in models:
        for label, _, ov in runs_for(a.workers, a.compressors.split(",")):
            cfg = workbench.compose(ov + suite.data_overrides(model, a.batch) + [
                f"model={model}", f"trainer.max_steps={a.steps}", "trainer.eval_every=100000", "trainer.progress=false",
                "cluster.timeout_s=600", f"output_root={out / 'runs'}"])
            validate(cfg)  # every run's config, before the first one starts
            jobs.append((model, label, cfg))
    for i, (model, label, cfg) in enumerate(jobs, 1):
        print(f"bytes {i}/{len(jobs)}: {model} {label} ...", flush=True)
        run = workbench.launch(cfg, progress=False, check=False)
        if run.summary.get("status") != "completed":
            rows.append({"model": model, "run": label, "status": run.summary.get("status")})
            continue
        m = per_step(run)
        an = analytic_sent(run)
        rows.append({"model": model, "run": label, "N": a.workers,
                     "sent_B": round(m["sent"]), "analytic_sent_B": round(an),
                     "measured/analytic": round(m["sent"] / an, 4) if an else None,
                     "recv_B": round(m["recv"]), "control_B": round(m["control"]),
                     "status": "completed"})
        suite.progress(rows[-1])
    for r in rows:  # reductions against the PS and the ring of the same model
        ref = {x["run"].split(" ")[0]: x.get("sent_B") for x in rows if x["model"] == r["model"]}
        if r.get("sent_B"):
            r["PS/this"] = round(ref["ps"] / r["sent_B"], 2) if ref.get("ps") else None
            r["ring/this"] = round(ref["sync"] / r["sent_B"], 2) if ref.get("sync") else None
    cols = ["model", "run", "N", "sent_B", "analytic_sent_B", "measured/analytic", "recv_B", "control_B",
            "PS/this", "ring/this", "status"]
    t = suite.Table(f"bytes_N{a.workers}", f"Bytes per worker per step, N = {a.workers}, batch {a.batch} per worker "
                     f"(B = bytes; PS/this and ring/this: how many times fewer bytes than the PS and the ring)", rows, cols)
    cmd = ("python -m workbench.bench bytes " + " ".join(argv if argv is not None else [])).strip()
    exact = sum(1 for r in rows if r.get("sent_B") is not None and r["sent_B"] == r.get("analytic_sent_B"))
    note = f"Measured equals analytic to the byte in {exact} of {sum(1 for r in rows if r.get('sent_B') is not None)} runs."
    path = suite.write(report_dir, f"bytes per worker per step, N={a.workers}", cmd, [t], [figure(rows)], notes=note, out_root=a.out,
                        benchmarks_md=suite.ROOT / "BENCHMARKS.md" if a.write else None)
    print(f"\n{t.markdown()}\n\nreport: {path / 'report.html'}")


def figure(rows):
    import plotly.graph_objects as go
    fig = go.Figure()
    for model in dict.fromkeys(r["model"] for r in rows):
        sub = [r for r in rows if r["model"] == model and r.get("sent_B")]
        fig.add_bar(name=model, x=[r["run"] for r in sub], y=[r["sent_B"] for r in sub])
    fig.update_layout(title="Bytes sent per worker per step (measured)", yaxis_type="log", yaxis_title="bytes",
                      barmode="group")
    return fig


if __name__ == "__main__":
    main()
