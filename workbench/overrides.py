"""Command-line overrides checked before anything starts: every error Hydra or OmegaConf raises
while composing becomes one line naming the key or option and the valid choices.

Hydra's own reports run to 5-27 lines, may name the internal ``schema/<group>/<name>`` entries and, for an unknown key, suggest appending it with ``+`` (which the typed groups must not
accept). :func:`compose_one_line` composes like ``hydra.compose`` and raises
:class:`~workbench.config.ConfigError` instead; :func:`check_appends` refuses ``+key=value`` /
``++key=value`` that would add a key the structured config does not have, and ``~key`` deletions.
The CLI (``workbench/__main__.py``) and ``workbench.compose`` both go through here.
"""
from __future__ import annotations

import dataclasses
import difflib
import re
from typing import Callable, List, Optional, Sequence

from omegaconf import DictConfig, OmegaConf

from workbench.core import ConfigError

SCHEMA_SUFFIX = "_schema"  # config-store entries holding a group's types, not options a user picks


def _parse(override: str):
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException
    try:
        o = OverridesParser.create().parse_override(override)
    except HydraException:
        if "=" not in override:
            key = override.lstrip("+~")
            raise ConfigError(f"invalid override {override!r}: {key} has no value; write {key}=<value>") from None
        raise ConfigError(f"invalid override {override!r}: not key=value (quote values with spaces "
                          "or brackets, e.g. 'key=[1,2]')") from None
    if not o.key_or_group:
        raise ConfigError(f"invalid override {override!r}: no key before '='")
    return o


def _first_line(e: BaseException) -> str:
    lines = [l.strip() for l in str(e).splitlines() if l.strip()]
    return lines[0] if lines else type(e).__name__


def _options_of(group: str, message: str) -> List[str]:
    m = re.search(r"Available options in '[^']*':\s*(.*?)(?:\n\s*Config search path|$)", message, re.S)
    names = m.group(1).split() if m else []
    return sorted(n for n in names if not n.endswith(SCHEMA_SUFFIX))


def _node_keys(node) -> List[str]:
    return sorted(str(k) for k in node.keys()) if isinstance(node, DictConfig) else []


def _unknown_key(key: str, base: Optional[DictConfig]) -> str:
    parent, _, leaf = key.rpartition(".")
    node = base if not parent else (OmegaConf.select(base, parent, default=None) if base is not None else None)
    keys = _node_keys(node)
    if leaf in keys:  # e.g. model={a:1}: a whole group node given a value
        return f"cannot set {key} to a value: pick an option ({key}=<option>) or set one of its keys ({key}.<key>=<value>)"
    where = f"{parent} ({node.name})" if parent and isinstance(node, DictConfig) and "name" in node else (parent or "the config")
    hint = [f"{parent + '.' if parent else ''}{h}" for h in difflib.get_close_matches(leaf, keys, n=1)]
    if not hint and parent and isinstance(base, DictConfig):  # the same key in another group (cluster.pin: testbed.pin)
        hint = [f"{g}.{leaf}" for g in _node_keys(base) if leaf in _node_keys(base.get(g))][:1]
    close = f"did you mean {hint[0]}? " if hint else ""
    return f"unknown key {key}: {close}valid keys of {where}: {', '.join(keys)}" if keys else f"unknown key {key}"


def _type_of(key: str, base: Optional[DictConfig]) -> str:
    """'an int', 'a float' ... from the structured config's annotation of ``key``, if known."""
    parent, _, leaf = key.rpartition(".")
    node = base if not parent else (OmegaConf.select(base, parent, default=None) if base is not None else None)
    if not isinstance(node, DictConfig):
        return "a value of the key's type"
    cls = OmegaConf.get_type(node)
    fields = {f.name: f.type for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else {}
    t = fields.get(leaf, "")
    t = t.__name__ if isinstance(t, type) else str(t).replace("typing.", "")
    names = {"int": "an integer", "float": "a number", "bool": "true or false", "str": "a string"}
    for plain, words in names.items():
        if t == plain:
            return words
        if t == f"Optional[{plain}]":
            return f"{words} or null"
    return f"a value of type {t}" if t else "a value of the key's type"


def explain(e: BaseException, override_list: Sequence[str], base: Callable[[], Optional[DictConfig]]) -> str:
    """One line for an exception Hydra/OmegaConf raised composing ``override_list``; ``base()``
    gives a config to read valid keys and types from (the defaults, composed lazily)."""
    msg = str(e)
    m = re.search(r"Could not find '([^']+)'", msg)
    if m:
        group, _, option = m.group(1).rpartition("/")
        opts = _options_of(group, msg)
        if not group:  # a primary config name (config_name=...)
            return f"no config {option!r} in conf/"
        return f"unknown option {option!r} for {group}: choose from {', '.join(opts)}" if opts else \
            f"unknown option {option!r} for {group}"
    m = re.search(r"An item is already at '([^']+)'", msg)
    if m:
        return f"{m.group(1)} already exists: set it without '+' ({m.group(1)}=<value>)"
    m = re.search(r"Multiple values for (\S+?)\.", msg)
    if m:
        return f"{m.group(1)} is already chosen: pick another option without '+' ({m.group(1)}=<option>)"
    m = re.search(r"Could not (?:override|append to) '([^']+)'", msg)
    if m:
        return _unknown_key(m.group(1), base())
    m = re.search(r"Error merging override (\S+?)=(.*)", msg)
    if m:
        key, value = m.group(1).lstrip("+~"), m.group(2).strip()
        cause = e.__cause__
        if value == "":
            return f"no value given for {key}: write {key}=<{_type_of(key, base()).replace('a ', '').replace('an ', '')}>"
        if cause is not None and "not in struct" in str(cause).lower():
            return _unknown_key(key, base())
        return f"invalid value {value!r} for {key}: must be {_type_of(key, base())}"
    m = re.search(r"Ambiguous value for argument '([^=']+)=", msg)
    if m:
        return f"several values for {m.group(1)} (a sweep): add --multirun to run one job per value"
    # never name the internal schema entries (schema/trainer/ps): the group is what the user wrote
    return re.sub(r"'?/?schema/(\w+)/\w+(@_here_)?'?", r"\1", " ".join(_first_line(e).split()))


def _group_options(group: str) -> List[str]:
    from workbench.core import conf_dir
    return sorted(p.stem for p in (conf_dir() / group).glob("*.yaml"))


def check_appends(override_list: Sequence[str], cfg: DictConfig) -> None:
    """Refuse ``+key`` / ``++key`` that add a key a structured (typed) node does not declare, and
    ``~key`` deletions of typed keys: both would pass Hydra and then be ignored or crash a rank."""
    for s in override_list:
        o = _parse(s)
        key = o.key_or_group
        if key.startswith("hydra.") or key == "hydra":
            continue
        if o.is_delete():
            raise ConfigError(f"cannot delete {key} (~{key}): every key of the config is typed; set a value "
                              f"instead ({key}=...)")
        if not (o.is_add() or o.is_force_add()):
            continue
        parent, _, leaf = key.rpartition(".")
        node = cfg if not parent else OmegaConf.select(cfg, parent, default=None)
        if not isinstance(node, DictConfig):
            continue
        cls = OmegaConf.get_type(node)
        if dataclasses.is_dataclass(cls) and leaf not in {f.name for f in dataclasses.fields(cls)}:
            valid = sorted(f.name for f in dataclasses.fields(cls))
            where = f"{parent} ({node.name})" if parent and "name" in node else (parent or "the config")
            raise ConfigError(f"unknown key {key} ({s.split('=')[0]} appends a key): valid keys of {where}: "
                              f"{', '.join(valid)}")


def compose_one_line(override_list: Sequence[str], config_name: str = "config") -> DictConfig:
    """``hydra.compose`` of ``conf/<config_name>.yaml`` with ``override_list``; any failure is a
    one-line :class:`ConfigError`."""
    from hydra import compose as hydra_compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    import workbench.trainers  # noqa: F401  (registers the trainers' config schemas)
    from workbench.core import conf_dir

    overrides = list(override_list)
    for s in overrides:
        o = _parse(s)  # a key without a value, bad syntax: named before Hydra's grammar report
        key = o.key_or_group
        if "." not in key and (conf_dir() / key).is_dir() and o.value() is None and not o.is_delete():
            raise ConfigError(f"{key}=null is not an option: choose from {', '.join(_group_options(key))}, "
                              f"or leave {key} out for its default")
        if "." not in key and (conf_dir() / key).is_dir() and isinstance(o.value(), (list, dict)):
            raise ConfigError(f"{key} takes one option, not {o.get_value_element_as_str()}: choose from "
                              f"{', '.join(_group_options(key))} (--multirun with {key}=a,b runs each)")

    def run(ovs):
        with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3", job_name="workbench"):
            return hydra_compose(config_name=config_name, overrides=ovs)

    def base():
        # the groups the user picked (trainer=ps ...) without their key overrides: what keys exist
        groups = [s for s in overrides if "=" in s and "." not in s.split("=")[0] and not s.startswith(("+", "~"))]
        for ovs in (groups, []):
            try:
                return run(ovs)
            except Exception:  # noqa: BLE001 - a bad group choice among them: fall back to the defaults
                continue
        return None

    try:
        cfg = run(overrides)
    except (HydraException, OmegaConfBaseException, ValueError, TypeError) as e:
        raise ConfigError(explain(e, overrides, base)) from None
    check_appends(overrides, cfg)
    return cfg
