"""Which way of distributing training wins for this model, cluster and network, and why: every
registered paradigm ranked by the calibrated performance model (:mod:`workbench.perfmodel`) before
anything runs, and, with ``--verify``, checked against short real runs here.

Runbook
-------
Plan (the same Hydra overrides as a run; ``--workers`` are processes, ``cluster.nproc``, the same
for every paradigm: a parameter server spends ``trainer.num_servers`` of them on servers, Stanza
splits them into CONV and FC workers)::

    python -m workbench.plan model=vgg16 data.resize=32 cluster.nproc=8 --bandwidth 1gbit,10gbit,100gbit
    python -m workbench.plan model=resnet18 data=synthetic --workers 4,8,16 --bandwidth 10gbit --json plan.json
    python -m workbench.plan cluster.nproc=3 --verify --json verify.json        # also runs each paradigm here
    python -m workbench.plan cluster.nproc=3 --verify --only sync,ps/async,compressed/topk
    python -m workbench.plan model=vgg16 --bandwidth 10gbit --speedup 20        # compute 20x faster (a GPU)
    python -m workbench.plan model=vgg16 --bandwidth 10gbit --profile gpu.json  # a profile taken on a GPU box

- ``--bandwidth``: each node's link, tc units (``100mbit``, ``1gbit``, ``10gbit``), comma separated;
  ``loopback`` is this machine with every rank on it (the default with ``--verify``). On a link,
  each rank is its own host of this machine's speed (``--speedup`` divides its compute).
  ``emulated:<rate>`` is this machine again, every rank behind its own link shaped to the rate
  (``network=emulated``): its ranks share the cores as on loopback; ``--verify`` runs those rows
  on the emulated network (root)::

      sudo python -m workbench.plan cluster.nproc=3 --bandwidth loopback,emulated:100mbit,emulated:1gbit --verify
- ``--latency``: per message on a link (default ``50us``); loopback uses the measured one.
- ``--only``: paradigm labels or prefixes (``staleness`` selects every ``staleness/n=…``).
- ``trainer=X`` among the overrides plans only X's variants, with your ``trainer.*`` keys.

What it prints per (workers, bandwidth): rank, paradigm (the dashboards' label), predicted step
time and samples/s, bytes per worker per step (rank 0, every meter category, sent), the bottleneck
(compute, link, host codec, server), and a compressor's crossover (the link rate below which it
beats ``sync``). ``--json FILE`` writes every row: ``paradigm, workers, bandwidth_bps,
predicted_step_s, predicted_samples_per_s, predicted_bytes_per_step`` (bytes sent per worker per
step), ``predicted_bytes_by_category``, ``bottleneck``, ``crossover_bps``, and with ``--verify``
``measured_step_s, measured_bytes_per_step, measured_bytes_by_category, error`` (predicted /
measured − 1, of the step time) and ``bytes_error``. A verification runs 12 warm-up steps, then
whole periods of 8 steps (BMUF's block, EASGD's period) filling about a second of predicted
steps (at most 400), and measures rank 0's median step (the mean where the bytes vary by step).

At scale (``--workers 30,64,1024``): on a link, the asynchronous paradigms (``ps/async``,
``staleness/n=…``, ``easgd/async``) come from the discrete-event simulator (:mod:`workbench.sim`:
the real protocol code in simulated time, ≤ 20 000 pushes per row) and their rows gain
``mean_staleness``, ``max_staleness`` and ``staleness_hist``; the synchronous ones stay analytic.
A trainer with more than 64 variants is planned at its 1st, 2nd, 4th, … and last (n = 1, 2, 4, …, λ).

The profile
-----------
The compute side, the loopback link and each compressor's codec are measured once per machine,
model, input shape, batch and rank count by :mod:`workbench.perfmodel.profile` (a few seconds for
the small CNN, longer for VGG-16 on a loaded CPU) and cached as
``experiments/profiles/<host>-<model>-<shape>-b<batch>-r<ranks>.json`` with what it was measured on
(host, cores, torch, load average). ``--refresh-profile`` measures again. To plan for hardware that
is not here, take a profile there (``python -m workbench.plan … --save-profile FILE`` on that machine)
and pass ``--profile FILE``, or scale this machine's compute with ``--speedup``.

Exit status: 0; 2 for bad input (unknown trainer or compressor, a bandwidth that does not parse,
workers < 1, a profile of another model, an ``--only`` matching nothing): one line, before anything
is profiled or launched.

Python (notebooks, the dashboards' what-if curves)::

    from workbench.plan import plan
    df = plan(workbench.compose(["model=small_cnn"]), bandwidths=["1gbit", "10gbit"], workers=[4, 8])

The model and where it was wrong before: docs/planner.md.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from omegaconf import DictConfig, OmegaConf

from workbench.core import ConfigError, world_size
from workbench.perfmodel.paradigms import Cluster, Prediction
from workbench.perfmodel.profile import Profile, ProfileError, load_or_measure, profile_key

LOOPBACK = "loopback"
EMULATED = "emulated:"  # emulated:<rate>: this machine's ranks, each behind its own shaped link (network=emulated)
DEFAULT_BANDWIDTHS = ("1gbit", "10gbit", "100gbit")
VERIFY_SKIP = 12  # steps left out of a verification run (DDP's bucket rebuild, PowerSGD's start)
VERIFY_STEPS = 8  # steps measured after them, at least: a whole number of BMUF blocks and EASGD periods
VERIFY_SECONDS = 1.0  # ... and as many more whole periods as fill about this long (predicted): a
# median of 8 small-CNN steps of 5-15 ms is one scheduler quantum's noise (randomk measured 12.9 ms
# in 8 steps, 9.2-9.7 ms over 400)
VERIFY_MAX_STEPS = 400


@dataclass
class Variant:
    trainer: str
    overrides: List[str]
    cfg: DictConfig
    label: str
    model: Callable[..., Prediction]
    options: dict


# ---------------------------------------------------------------------------------------------
# Input

def parse_bandwidths(text) -> List[str]:
    items = [t.strip() for t in (text.split(",") if isinstance(text, str) else text) if str(t).strip()]
    if not items:
        raise ConfigError("invalid value '' for --bandwidth: a rate like 1gbit, 10gbit, loopback or emulated:100mbit")
    for t in items:
        if t != LOOPBACK:
            from workbench.network import parse_rate
            parse_rate(t[len(EMULATED):] if t.startswith(EMULATED) else t, "--bandwidth")
    return items


def here(bw: str) -> bool:
    """A bandwidth whose cluster is this machine (every rank shares its cores): loopback or emulated:<rate>."""
    return bw == LOOPBACK or bw.startswith(EMULATED)


def parse_workers(text) -> List[int]:
    items = text.split(",") if isinstance(text, str) else list(text)
    out = []
    for t in items:
        try:
            w = int(str(t).strip())
        except ValueError:
            raise ConfigError(f"invalid value {t!r} for --workers: comma-separated integers >= 1") from None
        if w < 1:
            raise ConfigError(f"invalid value {w} for --workers: must be >= 1")
        out.append(w)
    return out


def bandwidth_bps(bw: str, prof: Optional[Profile] = None) -> float:
    """Bits/s of a bandwidth choice (loopback: the profiled point-to-point rate)."""
    if bw == LOOPBACK:
        return 8 * prof.beta if prof is not None else math.nan
    from workbench.network import parse_rate
    return parse_rate(bw[len(EMULATED):] if bw.startswith(EMULATED) else bw, "--bandwidth")


def _split_overrides(overrides: Sequence[str]) -> Tuple[List[str], List[str], Optional[str]]:
    """(shared, trainer keys, trainer choice): ``trainer=X`` and ``trainer.*`` / ``compressor*``
    belong to a paradigm; everything else (model, data, cluster, optim) is shared by all."""
    shared, keys, choice = [], [], None
    for o in overrides:
        k = o.split("=", 1)[0].lstrip("+~")
        if k == "trainer":
            choice = o.split("=", 1)[1]
        elif k.startswith("trainer.") or k.startswith("compressor"):
            keys.append(o)
        else:
            shared.append(o)
    if choice is None and any(o.split("=", 1)[0] == "compressor" for o in keys):
        choice = "compressed"  # a compressor is a choice of trainer=compressed
    return shared, keys, choice


def variants(overrides: Sequence[str], ranks: int) -> Tuple[List[Variant], List[str]]:
    """Every registered trainer's planned variants on ``ranks`` processes, composed with the
    shared overrides (and, for the trainer chosen with ``trainer=X``, the user's trainer keys).
    Returns the variants and the one-line reasons of those left out (invalid here)."""
    from workbench.config import validate
    from workbench.trainers import TRAINERS, paradigm_of
    shared, keys, choice = _split_overrides(overrides)
    if choice is not None and choice not in TRAINERS:
        raise ConfigError(f"unknown trainer {choice!r}; choose from {', '.join(TRAINERS)}")
    from workbench.compress import COMPRESSORS
    names = list(COMPRESSORS)
    for o in keys:
        k, _, v = o.partition("=")
        if k == "compressor" and v not in names:
            raise ConfigError(f"unknown compressor {v!r}; choose from {', '.join(names)}")
    out, skipped, seen = [], [], set()
    for name in TRAINERS:
        if choice is not None and name != choice:
            continue
        cls = TRAINERS[name]
        for vo in _thin(cls.plan_variants(ranks)):
            ov = [*vo, *shared, *(keys if choice == name else [])]
            cfg = _at_ranks(_compose(tuple(ov)), ranks)
            label = paradigm_of(lambda k, c=cfg: OmegaConf.select(c, k, default=None))
            if label in seen:
                continue
            seen.add(label)
            try:
                validate(cfg)
            except ConfigError as e:
                skipped.append(f"{label}: {e}")
                continue
            fn, opts = cls.perf_model(cfg)
            out.append(Variant(name, [*ov, f"cluster.nproc={ranks}"], cfg, label, fn, opts))
    return out, skipped


MAX_VARIANTS = 64  # per trainer: n-softsync has λ − 1 variants (Stanza: n_f), too many to plan one by one at 1024 workers


def _thin(vos: List[List[str]], keep: int = MAX_VARIANTS) -> List[List[str]]:
    """At most about ``keep`` of a trainer's variants: the 1st, 2nd, 4th, 8th, … and the last (for
    n-softsync: n = 1, 2, 4, … and λ)."""
    if len(vos) <= keep:
        return vos
    return [vos[i] for i in sorted({2 ** k - 1 for k in range(len(vos).bit_length()) if 2 ** k <= len(vos)} | {len(vos) - 1})]


_COMPOSED: Dict[Tuple[str, ...], DictConfig] = {}


def _compose(overrides: Tuple[str, ...]) -> DictConfig:
    """Hydra's compose, once per set of overrides (a third of a second each): the planner composes
    every variant for every worker count, which differ only in ``cluster.nproc``."""
    if overrides not in _COMPOSED:
        import workbench
        _COMPOSED[overrides] = workbench.compose(list(overrides))
    return _COMPOSED[overrides]


def _at_ranks(cfg: DictConfig, ranks: int) -> DictConfig:
    c = cfg.copy()
    c.cluster.nproc = ranks
    c.cluster.nnodes = 1
    return c


def _selected(label: str, only: Sequence[str]) -> bool:
    return any(label == o or label.startswith(o + "/") for o in only)


def check_only(only: Sequence[str], labels: Sequence[str]) -> None:
    for o in only:
        if not any(_selected(l, [o]) for l in labels):
            raise ConfigError(f"unknown paradigm {o!r} for --only; choose from {', '.join(sorted(set(labels)))}")


def load_profile(path, cfg) -> Profile:
    try:
        prof = Profile.load(path)
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ConfigError(f"invalid value {str(path)!r} for --profile: not a readable profile ({type(e).__name__}: {e})") from None
    why = prof.matches(profile_key(cfg))
    if why:
        raise ConfigError(f"invalid value {str(path)!r} for --profile: {why}")
    return prof


# ---------------------------------------------------------------------------------------------
# Prediction

def cluster_for(cfg: DictConfig, prof: Profile, ranks: int, bw: str, latency_s: float) -> Cluster:
    c = cfg.cluster
    stragglers = tuple((int(r), float(c.straggler_factor), float(c.straggler_delay_s)) for r in c.straggler_ranks)
    if bw == LOOPBACK:
        return Cluster(ranks, prof.beta, prof.alpha, prof.beta_allreduce, shared_host=True, stragglers=stragglers,
                       label=bw)
    if bw.startswith(EMULATED):
        # Every byte still crosses this host's stack (what loopback costs per byte) and then the
        # shaped link (8/rate): the two add. Compute shares the cores as on loopback, but a transfer
        # waits on the shaper, not the CPU, so it overlaps backward as on a real network.
        # Where the profile timed this host's collectives (its rank count), they are looked up
        # instead and the shaper's token bucket added: ``shaper_rate``, ``shaper_burst``. The
        # shaper counts frames, so a payload byte costs 1514/1448 of a byte of its rate.
        from workbench.network.emulated import PAYLOAD_PER_FRAME, payload_rate, tbf_burst
        rate = bandwidth_bps(bw)
        per_byte = 1 / payload_rate(rate)
        return Cluster(ranks, 1 / (per_byte + 1 / prof.beta), prof.alpha, 1 / (per_byte + 1 / prof.beta_allreduce),
                       shared_host=False, cores_shared=True, stragglers=stragglers, label=bw,
                       shaper_rate=payload_rate(rate), shaper_burst=tbf_burst(rate) * PAYLOAD_PER_FRAME,
                       host_bandwidth=prof.beta, host_allreduce_bandwidth=prof.beta_allreduce)
    return Cluster(ranks, bandwidth_bps(bw) / 8, latency_s, None, shared_host=False, stragglers=stragglers, label=bw)


def emulated_crossover_bps(cfg: DictConfig, prof: Profile, ranks: int, compressor: str) -> Optional[float]:
    """Bits/s of this host's emulated links below which ``compressor`` beats ``sync`` on ``ranks``
    ranks: where the model's two steps meet on the same emulated cluster, at every rate
    (``paradigms.crossover_bps``; ``math.inf``: it pays at every rate, ``None``: at none)."""
    from workbench.perfmodel import paradigms as P

    def at(bw: float) -> Cluster:
        return cluster_for(cfg, prof, ranks, f"{EMULATED}{8 * bw:.3f}bit", 5e-5)
    return P.crossover_bps(prof, at(1.25e8), compressor, at=at)


def profile_loops(cfg, compressors: Dict[str, object], planned: Sequence = ()) -> Dict[str, object]:
    """The loops the profile times on every rank (``perfmodel.profile.measure(loop_fns=…)``), from
    the layers that run them: the parameter server's, each compressor's DDP hook, the training
    loop's own bookkeeping for ``cfg``'s data, and those the trainers of the ``planned`` configs
    declare (``Trainer.profile_loops``: BMUF's block)."""
    from functools import partial

    from workbench.compress.codec_timing import hook_loops
    from workbench.ps.exchange_timing import LOOPS
    from workbench.trainers.base import bookkeeping_loop_s
    from workbench.trainers import TRAINERS
    own = {k: v for c in planned for k, v in TRAINERS[c.trainer.name].profile_loops(c).items()}
    return {**LOOPS, **hook_loops(compressors), "bookkeeping": partial(bookkeeping_loop_s, cfg), **own}


def predict_rows(prof: Profile, vs_by_workers: Dict[int, List[Variant]], bandwidths: Sequence[str],
                 latency_s: float) -> List[dict]:
    rows = []
    for w, vs in vs_by_workers.items():
        for bw in bandwidths:
            group = []
            for v in vs:
                cl = cluster_for(v.cfg, prof, w, bw, latency_s)
                p = v.model(prof, cl, **v.options)
                group.append({"paradigm": v.label, "workers": w, "bandwidth": bw, "bandwidth_bps": bandwidth_bps(bw, prof),
                              "predicted_step_s": p.step_s, "predicted_samples_per_s": p.samples_per_s,
                              "predicted_bytes_per_step": p.bytes_sent,
                              "predicted_bytes_by_category": {k: v_["sent"] for k, v_ in p.bytes.items()},
                              "bottleneck": p.bottleneck, "crossover_bps": p.crossover_bps, "terms": p.terms,
                              **simulated(v, prof, cl)})
            group.sort(key=lambda r: -r["predicted_samples_per_s"])
            for i, r in enumerate(group, 1):
                r["rank"] = i
            rows += group
    return rows


SIM_GRADIENTS = 20000  # pushes simulated per asynchronous variant (20 to 200 steps per worker)


def simulated(v: Variant, prof: Profile, cl: Cluster) -> dict:
    """The asynchronous paradigms (``ps/async``, ``staleness/n=…``, ``easgd/async``) on a link, one
    rank per host, and on loopback, every process on this host's cores (``emulated:`` rows stay
    analytic: their links are the shaper's, not the cores') by the discrete-event simulator (:mod:`workbench.sim`, the real protocol code in simulated time): its
    step time, samples/s and staleness replace the analytic bound; on loopback at the profiled ranks,
    whose PS loop the profile timed, only the staleness. {} for every other paradigm."""
    from workbench.perfmodel import paradigms as P
    from workbench.sim import from_profile, simulate
    o = v.options
    if cl.cores_shared or v.model not in (P.ps_async, P.staleness, P.easgd) or o.get("hardsync") or o.get("sync"):
        return {}
    lam = cl.ranks - o.get("servers", 1)
    if lam < 1:
        return {}
    t = v.cfg.trainer
    kw = {"servers": o.get("servers", 1), "steps": max(20, min(200, SIM_GRADIENTS // lam)),
          "stragglers": tuple(s for s in cl.stragglers if 0 <= s[0] < lam)}
    if v.model is P.easgd:
        kw.update(protocol="easgd", period=o.get("period", 4))
    elif v.model is P.staleness:
        kw.update(n=o["n"], max_staleness=t.get("max_staleness"), on_stale=t.get("on_stale", "block"),
                  lr_modulation=t.get("lr_modulation", "none"))
    # Loopback at the profiled ranks: the profile timed the PS loop itself, and the analytic queue on
    # the in-loop link (paradigms.loop_link) keeps the step time; the simulator, fed the same link,
    # adds the staleness. Elsewhere on loopback the workers, the server and every copy between them
    # run on this host's cores, the simulator's processor-sharing pool (host_cores), each fed one
    # rank's compute alone, and its step time replaces the analytic bound.
    link = P.loop_link(prof, cl, kw["servers"])
    timed = link is not cl
    if cl.shared_host and not timed:
        kw["host_cores"] = int(prof.machine.get("cores") or os.cpu_count() or 1)
    r = simulate(from_profile(prof, lam, min(link.bandwidth, 1e30), link.latency, **kw))
    out = {"simulated": True, "server_utilisation": r["server_utilisation"]} if timed else \
        {"simulated": True, "predicted_step_s": r["step_s"], "predicted_samples_per_s": r["samples_per_s"],
         "server_utilisation": r["server_utilisation"]}
    if r["server_utilisation"] > 0.95:
        out["bottleneck"] = "server"
    if "mean_staleness" in r:
        out.update(mean_staleness=r["mean_staleness"], max_staleness=r["max_staleness"],
                   staleness_hist=r["staleness_hist"])
    return out


def plan(cfg_or_overrides=None, bandwidths: Sequence[str] = DEFAULT_BANDWIDTHS, workers: Optional[Sequence[int]] = None,
         profile: Optional[Profile] = None, speedup: float = 1.0, latency: str = "50us", only: Sequence[str] = (),
         root: Optional[str] = None, log: Callable[[str], None] = lambda s: None):
    """The ranked plan as a DataFrame (one row per workers × bandwidth × paradigm).

    ``cfg_or_overrides``: Hydra overrides (a list) or a composed config (its overrides are taken
    from the model, data and cluster it names). ``profile``: a :class:`Profile` to plan from (default:
    this machine's, measured and cached)."""
    import pandas as pd
    overrides = _overrides_of(cfg_or_overrides)
    rows, _ = _plan_rows(overrides, parse_bandwidths(list(bandwidths)), workers, profile, speedup, latency, only, root, log)
    return pd.DataFrame(rows)


def _overrides_of(cfg_or_overrides) -> List[str]:
    if cfg_or_overrides is None:
        return []
    if isinstance(cfg_or_overrides, DictConfig):
        c = cfg_or_overrides
        ov = [f"model={c.model.name}", f"data={c.data.name}", f"data.batch_size={c.data.batch_size}",
              f"cluster.nproc={c.cluster.nproc}", f"model.width={c.model.width}"]
        if c.data.get("resize") is not None:
            ov.append(f"data.resize={c.data.resize}")
        return ov
    return list(cfg_or_overrides)


def _plan_rows(overrides, bandwidths, workers, profile, speedup, latency, only, root, log, refresh=False):
    import workbench
    from workbench.network import parse_time
    shared, _, _ = _split_overrides(overrides)
    base = workbench.compose(shared)
    from workbench.config import validate
    validate(base)
    latency_s = parse_time(latency, "--latency")
    if speedup <= 0:
        raise ConfigError(f"invalid value {speedup!r} for --speedup: must be > 0")
    workers = parse_workers(workers) if workers is not None else [world_size(base)]
    vs = {w: variants(overrides, w)[0] for w in workers}
    if only:
        check_only(only, [v.label for w in vs for v in vs[w]])
        vs = {w: [v for v in vs[w] if _selected(v.label, only)] for w in vs}
    if profile is None:
        loop = [w for w in workers if any(here(b) for b in bandwidths)]
        ranks = max([2, *loop])
        comps = {v.cfg.compressor.name: v.cfg.compressor for w in vs for v in vs[w] if v.trainer == "compressed"}
        from workbench.compress.codec_timing import measure_codecs
        profile = load_or_measure(base, ranks, comps, root=root or base.output_root, log=log, refresh=refresh,
                                  codec_fn=measure_codecs, loop_fns=profile_loops(base, comps, [v.cfg for w in vs for v in vs[w]]))
    if speedup != 1.0:
        profile = profile.with_speedup(speedup * profile.speedup)
    return predict_rows(profile, vs, bandwidths, latency_s), (vs, profile)


# ---------------------------------------------------------------------------------------------
# Verification: each paradigm briefly, here

def network_overrides(bw: str) -> List[str]:
    """The run that verifies a row at ``bw``: loopback, or every rank behind its own shaped link."""
    if bw.startswith(EMULATED):
        return ["network=emulated", f"network.bandwidth={bw[len(EMULATED):]}"]
    return ["network=loopback"]


def check_verifiable(bandwidths: Sequence[str]) -> None:
    """--verify with emulated links needs root and iproute2: say so before anything is profiled."""
    if any(b.startswith(EMULATED) for b in bandwidths):
        from workbench.network import require_host
        require_host("'emulated:…' for --bandwidth with --verify", "verify on loopback")


def verify_variant(v: Variant, root: Path, steps: int = VERIFY_STEPS, skip: int = VERIFY_SKIP,
                   bw: str = LOOPBACK) -> dict:
    """Run ``v`` for skip + steps steps here (loopback, or ``emulated:<rate>`` links) and measure rank
    0's step time (the median; the mean over whole periods where the bytes differ by step) and its
    bytes per step by category over the last ``steps`` steps."""
    import workbench
    cfg = workbench.compose([*v.overrides, *network_overrides(bw), f"trainer.max_steps={skip + steps}",
                             "trainer.eval_every=100000", "trainer.progress=false", "checkpoint.every=0",
                             f"output_root={root}"])
    run = workbench.launch(cfg, progress=False, check=False)
    if run.summary.get("status") != "completed":
        return {"measured_status": run.summary.get("status"), "run_dir": str(run.path)}
    recs = [r for r in run.records() if r.get("kind") == "train" and r["step"] > skip]
    by: Dict[str, float] = {}
    for r in recs:  # whole bytes summed, then one division: exact where every step's count is
        for cat, c in (r.get("comm") or {}).items():
            by[cat] = by.get(cat, 0) + c["sent"]
    by = {k: v_ / len(recs) for k, v_ in by.items() if v_}
    # A paradigm that communicates every few steps (BMUF's block, EASGD's period) has one slow step
    # per period, which a median drops: its step is the mean over the whole periods measured, what
    # the model predicts. Every step alike: the median, robust to a descheduled step.
    periodic = len({r.get("bytes_sent") for r in recs}) > 1
    step = (statistics.mean if periodic else statistics.median)(r["step_time"] for r in recs)
    return {"measured_step_s": step, "measured_step_stat": "mean" if periodic else "median",
            "measured_bytes_per_step": sum(by.values()),
            "measured_bytes_by_category": by, "measured_steps": len(recs), "run_dir": str(run.path)}


def verify_steps(predicted_step_s: float) -> int:
    """Steps a verification measures: whole periods of VERIFY_STEPS filling about VERIFY_SECONDS
    by the prediction, at least one period, at most VERIFY_MAX_STEPS."""
    periods = max(1, math.ceil(VERIFY_SECONDS / max(predicted_step_s, 1e-6) / VERIFY_STEPS))
    return min(VERIFY_MAX_STEPS // VERIFY_STEPS, periods) * VERIFY_STEPS


def verify(rows: List[dict], vs: Dict[int, List[Variant]], root: Path, log=print) -> List[dict]:
    by_label = {(w, v.label): v for w in vs for v in vs[w]}
    for r in rows:
        if not here(r["bandwidth"]):
            continue
        v = by_label[(r["workers"], r["paradigm"])]
        steps = verify_steps(r["predicted_step_s"])
        log(f"verify: {r['paradigm']} on {r['workers']} ranks, {r['bandwidth']}, {steps} steps ...")
        scored(r, verify_variant(v, root, steps=steps, bw=r["bandwidth"]))
    return rows


def scored(row: dict, measured: dict) -> dict:
    """``row`` (a prediction) with ``measured`` (what :func:`verify_variant` returned) and the
    errors of its step time and bytes against them."""
    row.update(measured)
    if "measured_step_s" in measured:
        row["error"] = row["predicted_step_s"] / measured["measured_step_s"] - 1
        mb = measured["measured_bytes_per_step"]
        row["bytes_error"] = (row["predicted_bytes_per_step"] / mb - 1) if mb else (0.0 if not row["predicted_bytes_per_step"] else math.inf)
    return row


# ---------------------------------------------------------------------------------------------
# Output

def _rate(bps) -> str:
    if bps is None:
        return "never"
    if math.isinf(bps):
        return "always"
    for unit, f in (("Tbit", 1e12), ("Gbit", 1e9), ("Mbit", 1e6), ("kbit", 1e3)):
        if bps >= f:
            return f"{bps / f:.3g} {unit}/s"
    return f"{bps:.3g} bit/s"


def _bytes(by: Dict[str, float]) -> str:
    parts = [f"{k} {v / 2**20:.3g}" for k, v in sorted(by.items()) if v]
    return ", ".join(parts) or "0"


def table(rows: List[dict], prof: Profile) -> str:
    out = []
    groups: Dict[Tuple[int, str], List[dict]] = {}
    for r in rows:
        groups.setdefault((r["workers"], r["bandwidth"]), []).append(r)
    for (w, bw), rs in groups.items():
        link = f"loopback ({_rate(8 * prof.beta)} measured)" if bw == LOOPBACK else bw
        out.append(f"\n{w} ranks, {link}:")
        verify_cols = any("measured_step_s" in r for r in rs)
        head = f"{'#':>3}  {'paradigm':<22} {'step ms':>9} {'samples/s':>10}  {'bottleneck':<10}  {'crossover':<12}  MiB/step sent (by category)"
        if verify_cols:
            head += "  | measured ms  error   bytes"
        out.append(head)
        stanza = [r for r in rs if r["paradigm"].startswith("stanza/")]
        best_stanza = max(stanza, key=lambda r: r["predicted_samples_per_s"])["paradigm"] if stanza else None
        for r in rs:
            cross = _rate(r["crossover_bps"]) if r["paradigm"].startswith("compressed/") else ""
            name = r["paradigm"] + (" *" if r["paradigm"] == best_stanza and len(stanza) > 1 else "")
            line = (f"{r['rank']:>3}  {name:<22} {1e3 * r['predicted_step_s']:>9.2f} {r['predicted_samples_per_s']:>10.1f}  "
                    f"{r['bottleneck']:<10}  {cross:<12}  {_bytes(r['predicted_bytes_by_category'])}")
            if "mean_staleness" in r:
                line += f"  ⟨τ⟩ {r['mean_staleness']:.1f}, max τ {r['max_staleness']} (simulated)"
            if "measured_step_s" in r:
                ok = "exact" if r["bytes_error"] == 0 else f"{100 * r['bytes_error']:+.2f}%"
                line += f"  | {1e3 * r['measured_step_s']:>9.2f}  {100 * r['error']:+6.1f}%  {ok}"
            elif "measured_status" in r:
                line += f"  | run {r['measured_status']}"
            out.append(line)
        if best_stanza and len(stanza) > 1:
            out.append(f"     * Stanza's best allocation here: {best_stanza}")
    errs = [r["error"] for r in rows if "error" in r]
    if errs:
        med, p90 = error_quantiles(errs)
        out.append(f"\nstep time |error|: median {100 * med:.1f} %, 90th percentile {100 * p90:.1f} % "
                   f"over {len(errs)} runs; bytes exact in {sum(r.get('bytes_error') == 0 for r in rows)}/{len(errs)}")
    return "\n".join(out)


def error_quantiles(errors: Sequence[float]) -> Tuple[float, float]:
    """The median and the 90th percentile (nearest rank) of the errors' magnitudes: the issue's two
    accuracy targets, computed one way for every table that reports them."""
    errs = sorted(abs(e) for e in errors)
    return statistics.median(errs), errs[min(len(errs) - 1, math.ceil(0.9 * len(errs)) - 1)]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m workbench.plan", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("overrides", nargs="*", help="Hydra overrides, as for a run")
    ap.add_argument("--bandwidth", default=None, help=f"comma-separated link rates, loopback, or emulated:<rate> (this "
                    f"machine behind shaped links) (default {','.join(DEFAULT_BANDWIDTHS)}; loopback with --verify)")
    ap.add_argument("--workers", default=None, help="comma-separated process counts (default cluster.nproc)")
    ap.add_argument("--latency", default="50us", help="per message on a link (default 50us)")
    ap.add_argument("--only", default="", help="paradigm labels or prefixes, comma separated")
    ap.add_argument("--verify", action="store_true", help="also run each paradigm briefly here (loopback and "
                    "emulated:<rate> rows; emulated needs root)")
    ap.add_argument("--json", default=None, help="write every row to this file")
    ap.add_argument("--profile", default=None, help="plan from this profile file (e.g. taken on a GPU machine)")
    ap.add_argument("--save-profile", default=None, help="also write the profile used to this file")
    ap.add_argument("--speedup", type=float, default=1.0, help="divide the profile's compute by this (faster hardware)")
    ap.add_argument("--refresh-profile", action="store_true", help="measure the profile again")
    a = ap.parse_args(argv)
    try:
        bws = parse_bandwidths(a.bandwidth or (LOOPBACK if a.verify else ",".join(DEFAULT_BANDWIDTHS)))
        if a.verify and not any(here(b) for b in bws):
            bws.append(LOOPBACK)
        if a.verify:
            check_verifiable(bws)
        only = [o.strip() for o in a.only.split(",") if o.strip()]
        workers = parse_workers(a.workers) if a.workers else None
        import workbench
        shared, _, _ = _split_overrides(a.overrides)
        base = workbench.compose(shared)
        prof = load_profile(a.profile, base) if a.profile else None
        rows, (vs, prof) = _plan_rows(a.overrides, bws, workers, prof, a.speedup, a.latency, only, None,
                                      lambda s: print(s, file=sys.stderr, flush=True), a.refresh_profile)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except ProfileError as e:  # the profile's ranks failed or timed out, the rank named
        print(f"error: {e}", file=sys.stderr)
        return 1
    if a.save_profile:
        prof.save(a.save_profile)
    if a.verify:
        root = Path(base.output_root) / "plan-verify"
        rows = verify(rows, vs, root, log=lambda s: print(s, file=sys.stderr, flush=True))
    m = prof.machine
    print(f"profile: {prof.model} batch {prof.batch}/worker, {prof.ranks} ranks on {m.get('host')} "
          f"({m.get('cores')} cores, load {m.get('load_average')}), compute ÷{prof.speedup:g}")
    print(table(rows, prof))
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps({"profile": {k: v for k, v in prof.to_json().items() if k != "codecs"},
                                            "rows": rows}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
