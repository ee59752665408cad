"""The planner's rows: the paradigms to plan (every registered trainer's variants, composed with the
user's overrides), the cluster each bandwidth stands for, and one predicted row per workers ×
bandwidth × paradigm, ranked by the performance model (:mod:`workbench.perfmodel`); the
asynchronous ones at scale from the discrete-event simulator (:mod:`workbench.sim`)."""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from omegaconf import DictConfig, OmegaConf

from workbench.core import ConfigError, world_size
from workbench.perfmodel.paradigms import Cluster, Prediction
from workbench.perfmodel.profile import Profile, load_or_measure, profile_key
from workbench.plan.compose import at_ranks, composed

LOOPBACK = "loopback"
EMULATED = "emulated:"  # emulated:<rate>: this machine's ranks, each behind its own shaped link (network=emulated)
DEFAULT_BANDWIDTHS = ("1gbit", "10gbit", "100gbit")


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


_VARIANTS: Dict[tuple, Tuple[List[Variant], List[str]]] = {}


def variants(overrides: Sequence[str], ranks: int) -> Tuple[List[Variant], List[str]]:
    """Every registered trainer's planned variants on ``ranks`` processes, composed with the
    shared overrides (and, for the trainer chosen with ``trainer=X``, the user's trainer keys).
    Returns the variants and the one-line reasons of those left out (invalid here). Kept per
    process: the what-if explorer plans the same variants at every redraw."""
    from workbench.compress import COMPRESSORS
    from workbench.trainers import TRAINERS
    key = (tuple(overrides), ranks, tuple(TRAINERS), tuple(COMPRESSORS))
    if key not in _VARIANTS:
        _VARIANTS[key] = _variants(overrides, ranks)
    vs, skipped = _VARIANTS[key]
    return list(vs), list(skipped)


def _variants(overrides: Sequence[str], ranks: int) -> Tuple[List[Variant], List[str]]:
    from workbench.config import validate
    from workbench.spec import spec_of
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
        spec = spec_of(name)
        for vo in _thin(spec.plan_variants(ranks)):
            ov = [*vo, *shared, *(keys if choice == name else [])]
            cfg = at_ranks(composed(tuple(ov)), ranks)
            label = paradigm_of(lambda k, c=cfg: OmegaConf.select(c, k, default=None))
            if label in seen:
                continue
            seen.add(label)
            try:
                validate(cfg)
            except ConfigError as e:
                skipped.append(f"{label}: {e}")
                continue
            fn, opts = spec.perf_model(cfg)
            out.append(Variant(name, [*ov, f"cluster.nproc={ranks}"], cfg, label, fn, opts))
    return out, skipped


MAX_VARIANTS = 64  # per trainer: n-softsync has λ − 1 variants (Stanza: n_f), too many to plan one by one at 1024 workers


def _thin(vos: List[List[str]], keep: int = MAX_VARIANTS) -> List[List[str]]:
    """At most about ``keep`` of a trainer's variants: the 1st, 2nd, 4th, 8th, … and the last (for
    n-softsync: n = 1, 2, 4, … and λ); those with a compressor (``staleness/n=1+topk``) all kept."""
    if len(vos) <= keep:
        return vos
    comp = [v for v in vos if any(o.startswith("compressor") for o in v)]
    vos = [v for v in vos if v not in comp]
    return [vos[i] for i in sorted({2 ** k - 1 for k in range(len(vos).bit_length()) if 2 ** k <= len(vos)} | {len(vos) - 1})] + comp


def _selected(label: str, only: Sequence[str]) -> bool:
    """``label`` is one of ``only`` or a dense row below one (``staleness`` selects ``staleness/n=2``);
    an entry ending in ``+`` selects the compressed rows at or below it (``bmuf+`` selects
    ``bmuf+powersgd``, ``ps+`` selects ``ps/sync+topk``)."""
    dense, compressed, _ = label.partition("+")

    def under(base: str) -> bool:
        return dense == base or dense.startswith(base + "/")
    return any(label == o or (compressed and under(o[:-1]) if o.endswith("+") else not compressed and under(o))
               for o in only)


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
    c = cfg.inject  # stragglers on purpose
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
    declare (``ParadigmSpec.profile_loops``: BMUF's block)."""
    from functools import partial

    from workbench.compress.codec_timing import hook_loops
    from workbench.ps.exchange_timing import LOOPS
    from workbench.spec import spec_of
    from workbench.trainers.bookkeeping import bookkeeping_loop_s
    own = {k: v for c in planned for k, v in spec_of(c.trainer.name).profile_loops(c).items()}
    return {**LOOPS, **hook_loops(compressors), "bookkeeping": partial(bookkeeping_loop_s, cfg), **own}


def predict_rows(prof: Profile, vs_by_workers: Dict[int, List[Variant]], bandwidths: Sequence[str],
                 latency_s: float, notes: Optional[List[str]] = None) -> List[dict]:
    """One row per workers × bandwidth × variant, ranked within each (workers, bandwidth). A
    variant whose model needs a codec measurement the profile lacks (``MissingMeasurement``: a
    profile older than the compressor's messages, or one that did not measure that compressor)
    has no row; ``notes`` gets one line for it."""
    from workbench.perfmodel.paradigms import MissingMeasurement
    rows, missing = [], {}
    for w, vs in vs_by_workers.items():
        for bw in bandwidths:
            group = []
            for v in vs:
                cl = cluster_for(v.cfg, prof, w, bw, latency_s)
                try:
                    p = v.model(prof, cl, **v.options)
                except MissingMeasurement as e:
                    missing.setdefault(v.label, e.args[0] if e.args else str(e))
                    continue
                group.append({"paradigm": v.label, "workers": w, "bandwidth": bw, "bandwidth_bps": bandwidth_bps(bw, prof),
                              "predicted_step_s": p.step_s, "predicted_samples_per_s": p.samples_per_s,
                              "predicted_bytes_per_step": p.bytes_sent,
                              "predicted_bytes_by_category": {k: v_["sent"] for k, v_ in p.bytes.items()},
                              "bottleneck": p.bottleneck, "crossover_bps": p.crossover_bps, "terms": p.terms,
                              **_protocol(v, w), **simulated(v, prof, cl)})
            group.sort(key=lambda r: -r["predicted_samples_per_s"])
            for i, r in enumerate(group, 1):
                r["rank"] = i
            rows += group
    if notes is not None:
        notes += [f"{label}: not planned: {why} (python -m workbench.plan --refresh-profile measures it)"
                  for label, why in missing.items()]
    return rows


def _protocol(v: Variant, ranks: int) -> dict:
    """``{"protocol": key}`` where the trainer says which of its variants run the same protocol."""
    from workbench.spec import spec_of
    key = spec_of(v.trainer).same_protocol(v.cfg, ranks)
    return {} if key is None else {"protocol": key}


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
         root: Optional[str] = None, log: Callable[[str], None] = lambda s: None,
         target_accuracy: Optional[float] = None, reference: Optional[str] = None):
    """The ranked plan as a DataFrame (one row per workers × bandwidth × paradigm).

    ``cfg_or_overrides``: Hydra overrides (a list) or a composed config (its overrides are taken
    from the model, data and cluster it names). ``profile``: a :class:`Profile` to plan from (default:
    this machine's, measured and cached). ``target_accuracy``: each row's steps and time to it, ranked
    by that time (:mod:`workbench.plan.to_target`), from ``reference`` (a ``trainer=sync`` run
    directory that reached it) or, without one, a reference run made and kept here
    (:mod:`workbench.plan.reference`)."""
    import pandas as pd

    from workbench.plan.reference import resolve
    from workbench.plan.to_target import check_args, load_reference, with_target
    ref = check_args(target_accuracy, reference)
    overrides = _overrides_of(cfg_or_overrides)
    rows, (vs, _) = _plan_rows(overrides, parse_bandwidths(list(bandwidths)), workers, profile, speedup, latency, only,
                               root, log)
    if target_accuracy is not None:
        ref = ref or load_reference(resolve(_split_overrides(overrides)[0], target_accuracy, None, root, log=log),
                                    target_accuracy)  # the one the planner made
        rows = with_target(rows, vs, ref)
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
        hooked = {v.cfg.compressor.name: v.cfg.compressor for w in vs for v in vs[w] if v.trainer == "compressed"}
        comps = {**_codecs_of([v.cfg for w in vs for v in vs[w]]), **hooked}
        from workbench.compress.codec_timing import measure_codecs
        profile = load_or_measure(base, ranks, comps, root=root or base.output_root, log=log, refresh=refresh,
                                  codec_fn=measure_codecs, loop_fns=profile_loops(base, hooked, [v.cfg for w in vs for v in vs[w]]))
    if speedup != 1.0:
        profile = profile.with_speedup(speedup * profile.speedup)
    notes: List[str] = []
    rows = predict_rows(profile, vs, bandwidths, latency_s, notes)
    for n in notes:
        log(n)
    return rows, (vs, profile)


def _codecs_of(cfgs) -> Dict[str, object]:
    """The codecs the planned configs compress with, by name (each message's key: the compressor,
    a parameter server's pull, Stanza's activations), for the profile to measure."""
    from workbench.compress.messages import Message, codec_config
    out = {}
    for c in cfgs:
        for key in ("compressor.name", "compressor.pull", "compressor.activations"):
            node = codec_config(c.get("compressor"), Message("gradient", "p2p", key=key)) if c.get("compressor") else None
            if node is not None:
                out.setdefault(str(node.name), node)
    return out

