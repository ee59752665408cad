"""The planner's configs: every variant's composition, kept per process. The planner composes each
registered trainer's variants for every worker count, which differ only in ``cluster.nproc``, and a
Hydra compose costs about a third of a second: :func:`composed` composes each set of overrides once,
and composes a variant from kept compositions where that gives Hydra's config (its plain keys, its
compressor choice); ``tests/test_plan_compressed_messages.py`` checks every variant against Hydra."""
from __future__ import annotations

from typing import Dict, List, Tuple

from omegaconf import DictConfig, OmegaConf

_KEPT: Dict[Tuple[str, ...], DictConfig] = {}


def composed(overrides: Tuple[str, ...]) -> DictConfig:
    """Hydra's compose, once per set of overrides (a third of a second each): the planner composes
    every variant for every worker count, which differ only in ``cluster.nproc``. A variant's plain
    ``key=value`` overrides of keys its groups already have (``trainer.n=2``) are set on the
    composition of the rest, each value as Hydra's grammar reads it; its ``compressor=<c>`` choice
    (a group no other node reads) is composed once per compressor and set on the composition of the
    rest; anything else composes whole."""
    if overrides not in _KEPT:
        _KEPT[overrides] = _composition(overrides)
    return _KEPT[overrides]


def _composition(overrides: Tuple[str, ...]) -> DictConfig:
    import workbench
    head, tail = _split_plain(overrides)
    choice = tuple(o for o in head if o.partition("=")[0] == "compressor")
    rest = tuple(o for o in head if o not in choice)
    try:
        if tail:
            cfg = composed(head).copy()
            for key, value in tail:
                if OmegaConf.select(cfg, key, default=_MISSING) is _MISSING:
                    raise KeyError(key)
                OmegaConf.update(cfg, key, value, merge=False)
            return cfg
        if len(choice) == 1 and rest and not any(o.startswith(("+", "~", "experiment=")) for o in rest):
            cfg = composed(rest).copy()
            cfg.compressor = composed(choice).compressor  # assigned as a copy: the kept one stays as it is
            return cfg
    except Exception:  # noqa: BLE001 - a key or value compose must judge: Hydra's compose says why
        pass
    return workbench.compose(list(overrides))


_MISSING = object()


def _split_plain(overrides: Tuple[str, ...]) -> Tuple[Tuple[str, ...], List[Tuple[str, object]]]:
    """``overrides`` without the plain assignments of dotted keys (no ``+``/``~``, no sweep, no
    interpolation), and those assignments as (key, value) in Hydra's reading."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException
    head, tail = list(overrides), []
    parser = OverridesParser.create()
    for s in overrides:
        if s.startswith(("+", "~")) or "." not in s.partition("=")[0] or "${" in s:
            continue
        try:
            o = parser.parse_override(s)
        except HydraException:
            continue
        if o.is_sweep_override():
            continue
        head.remove(s)
        tail.append((o.key_or_group, o.value()))
    return tuple(head), tail


def at_ranks(cfg: DictConfig, ranks: int) -> DictConfig:
    """A copy of ``cfg`` on ``ranks`` processes of one node."""
    c = cfg.copy()
    c.cluster.nproc = ranks
    c.cluster.nnodes = 1
    return c
