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
