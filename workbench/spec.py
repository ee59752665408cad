"""What a trainer declares for the planner and the suites, apart from its training loop.

A :class:`ParadigmSpec` is one registry entry: the paradigm's label, the variants the planner
ranks, their performance model, the loops the planner's profile times, the runs the bytes suite
measures with their analytic count, and the overrides of a few-step smoke run. Each trainer module
declares its spec beside its trainer class (``declare(ParadigmSpec("sync", ...))``); the planner,
the suites, the dashboards and ``summary.json`` read :data:`SPECS`, and nothing lists trainers.

A trainer without a spec runs like any other; the planner and the suites leave it out, and its
label is its name qualified by its mode/protocol and compressor (:func:`qualified`).

Declaring modules register on import: read :data:`SPECS` through ``workbench.trainers`` (whose
discovery imports every trainer module) rather than from here::

    from workbench.trainers import SPECS
    fn, opts = SPECS["ps"].perf_model(cfg)
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Tuple

from workbench.registry import Registry

Get = Callable[[str], object]  # reads a dotted config key of a run (``trainer.mode``); None where absent

QUALIFIERS = ("trainer.mode", "trainer.protocol")  # label qualifiers, where set
MESSAGE_KEYS = (("pull", "none"), ("activations", "same"))  # compressor.<key> besides its name, and its default
OWN_COMPRESSOR = ("compressed",)  # trainers whose label names the compressor itself (compressed/topk)


def qualified(name: str, get: Get, keys=QUALIFIERS) -> str:
    """``name`` qualified by the values of ``keys`` that are set (``ps/async``,
    ``compressed/powersgd``; ``sync``): the label of a paradigm without a label of its own."""
    for key in keys:
        v = get(key)
        if isinstance(v, str) and v and v != "none":
            name += f"/{v}"
    return name


def _none(*_):
    return []


def _no_loops(cfg) -> dict:
    return {}


def _no_count(cfg, summary, shapes) -> None:
    return None


def _no_steps(cfg) -> int:
    return 0


def _no_protocol(cfg, ranks) -> None:
    return None


def _no_law(cfg, ranks) -> None:
    return None


def _no_model(cfg):
    raise NotImplementedError(f"trainer {cfg.trainer.name!r} declares no performance model")


@dataclass(frozen=True)
class ParadigmSpec:
    """A paradigm's declaration for the planner and the suites; every field but ``name`` has a
    default that leaves the paradigm out of the consumer it feeds."""

    name: str  # the trainer's registry name (``trainer.name``)
    # label(get) -> the label of a run (``staleness/n=4``); None: :func:`qualified`
    label: Optional[Callable[[Get], str]] = None
    # plan_variants(ranks) -> the overrides of each variant the planner ranks on ``ranks`` processes
    plan_variants: Callable[[int], List[List[str]]] = _none
    # perf_model(cfg) -> (step-time function of workbench.perfmodel.paradigms, its options for cfg)
    # (a paradigm that plans variants must declare which model predicts them)
    perf_model: Callable[[object], Tuple[Callable, dict]] = _no_model
    # profile_loops(cfg) -> {name in Profile.loops: loop fn} the planner's profile times on every rank
    profile_loops: Callable[[object], Dict[str, Callable]] = _no_loops
    # bench_variants(workers) -> (label, overrides) of each run the bytes suite measures
    bench_variants: Callable[[int], List[Tuple[str, List[str]]]] = _none
    # analytic_bytes(cfg, summary, shapes) -> bytes a worker sends per step by the algorithm; None: no closed form
    analytic_bytes: Callable[[object, dict, List[tuple]], Optional[float]] = _no_count
    # steady_after(cfg) -> the steps before a run of cfg reaches its steady state, where that is later
    # than a DDP run's (a compressor that starts after some averaging rounds): what a verification skips
    steady_after: Callable[[object], int] = _no_steps
    # same_protocol(cfg, ranks) -> a key its variants that run the same protocol on ``ranks`` processes
    # share (n-softsync's n with the same c = floor(lambda / n)); None: each variant its own
    same_protocol: Callable[[object, int], Optional[str]] = _no_protocol
    # update_law(cfg, ranks) -> how a worker step updates the weights against synchronous SGD
    # (workbench.perfmodel.efficiency.Update), what time to target predicts from; None: no law
    update_law: Callable[[object, int], Optional[object]] = _no_law
    # smoke_overrides(nproc) -> overrides that make a few-step run valid on nproc ranks (make gpu-check)
    smoke_overrides: Callable[[int], List[str]] = _none

    def paradigm(self, get: Get) -> str:
        """The label of a run of this paradigm whose config key ``k`` is ``get(k)``; a paradigm that
        compresses on the side of its own protocol gets ``+<compressor>`` (``ps/sync+topk``), and
        a message whose codec differs from its default (``compressor.pull``, ``compressor.activations``)
        its own part: ``ps/sync+topk,pull=fp16``, ``stanza/n_f=1+activations=fp16``."""
        if self.name in OWN_COMPRESSOR:
            return self.label(get) if self.label is not None else qualified(self.name, get, QUALIFIERS + ("compressor.name",))
        label = self.label(get) if self.label is not None else qualified(self.name, get)
        comp = get("compressor.name")
        comp = comp if isinstance(comp, str) and comp and comp != "none" else None
        parts = [comp] if comp else []
        for key, default in MESSAGE_KEYS:
            value = get(f"compressor.{key}")
            if not isinstance(value, str) or value == default:
                continue
            codec = message_codec(comp or "none", value)
            if codec != message_codec(comp or "none", default):
                parts.append(f"{key}={codec or 'none'}")
        return f"{label}+{','.join(parts)}" if parts else label


def message_codec(compressor: str, value: str) -> Optional[str]:
    """The codec a message key's ``value`` names under ``compressor.name=compressor`` (``same``: the
    compressor's); None: the message goes dense."""
    name = compressor if value == "same" else value
    return None if name == "none" else name


SPECS: Registry = Registry("paradigm spec")


def declare(spec: ParadigmSpec) -> ParadigmSpec:
    """Register ``spec`` under its name (a trainer module's one line beside its class)."""
    SPECS.register(spec.name)(spec)
    return spec


def spec_of(name: str) -> ParadigmSpec:
    """The spec registered as ``name``, or an empty one (label only) for a trainer without one."""
    return SPECS[name] if name in SPECS else ParadigmSpec(name)


def paradigm_of(get: Get) -> str:
    """The paradigm label of a run whose config key ``k`` is ``get(k)`` (``trainer.name``,
    ``trainer.mode`` …; None or NaN where absent): its spec's :meth:`ParadigmSpec.paradigm`. The
    dashboards (run tables), ``workbench.plan`` (its rows and JSON) and ``summary.json`` use it."""
    def clean(key):
        v = get(key)
        return None if isinstance(v, float) and math.isnan(v) else v

    return spec_of(str(clean("trainer.name") or "?")).paradigm(clean)


def paradigm_of_config(cfg) -> str:
    """:func:`paradigm_of` a composed config (what ``summary.json`` records as ``paradigm``)."""
    from omegaconf import OmegaConf
    return paradigm_of(lambda k: OmegaConf.select(cfg, k, default=None))
