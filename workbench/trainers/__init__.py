"""Trainer registry: one file per training paradigm in this package, each a
:class:`~workbench.trainers.base.Trainer` subclass registered under its name, with its config
dataclass registered as the schema of ``conf/trainer/<name>.yaml``."""
from __future__ import annotations

import importlib
import pkgutil

from workbench.registry import Registry

TRAINERS: Registry = Registry("trainer")

for _m in pkgutil.iter_modules(__path__):
    if _m.name != "base":
        importlib.import_module(f"{__name__}.{_m.name}")


def paradigm_of(get) -> str:
    """The paradigm label of a run whose config key ``k`` is ``get(k)`` (``trainer.name``,
    ``trainer.mode`` …; None where absent): the trainer's own :meth:`Trainer.paradigm`. The
    dashboards (run tables), ``workbench.plan`` (its rows and JSON) use this one function."""
    import math

    def clean(key):
        v = get(key)
        return None if isinstance(v, float) and math.isnan(v) else v

    name = str(clean("trainer.name") or "?")
    if name in TRAINERS:
        return TRAINERS[name].paradigm(clean)
    from workbench.trainers.base import Trainer
    return type("Unregistered", (Trainer,), {"name": name}).paradigm(clean)
