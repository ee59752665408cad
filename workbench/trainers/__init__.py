"""Trainer registry: one module per training paradigm in this package (or an entry point of the
``workbench.trainers`` group), each a :class:`~workbench.trainers.base.Trainer` subclass registered
under its name, with its config dataclass filed by :func:`workbench.core.store_schema` as the schema
of ``conf/trainer/<name>.yaml``. See ``docs/extending.md``."""
from __future__ import annotations

import math

from workbench.core import check
from workbench.registry import Registry


def _validate(cls, cfg) -> None:
    """The checks every trainer shares, then the trainer's own :meth:`Trainer.validate`."""
    t, c, d = cfg.trainer, cfg.cluster, cfg.data
    workers = cls.num_workers(cfg)
    check(workers >= 1, "cluster.nproc", c.nproc, f"trainer {t.name} needs at least one worker rank")
    if d.global_batch_size is not None:
        check(d.global_batch_size >= workers and d.global_batch_size % workers == 0, "data.global_batch_size",
              d.global_batch_size, f"must be a positive multiple of the {workers} worker ranks")
    cls.validate(cfg)
    comp = cfg.get("compressor")
    if comp is not None and comp.name != "none" and not getattr(cls, "uses_compressor", False):
        check(False, "compressor.name", comp.name, f"trainer {t.name} does not compress gradients; use "
              "trainer=compressed or compressor=none")


TRAINERS: Registry = Registry("trainer", key="trainer.name", entry_points="workbench.trainers", validate=_validate)


def paradigm_of(get) -> str:
    """The paradigm label of a run whose config key ``k`` is ``get(k)`` (``trainer.name``,
    ``trainer.mode`` …; None where absent): the trainer's own :meth:`Trainer.paradigm`. The
    dashboards (run tables), ``workbench.plan`` (its rows and JSON) and ``summary.json`` use it."""
    def clean(key):
        v = get(key)
        return None if isinstance(v, float) and math.isnan(v) else v

    name = str(clean("trainer.name") or "?")
    if name in TRAINERS:
        return TRAINERS[name].paradigm(clean)
    from workbench.trainers.base import Trainer
    return type("Unregistered", (Trainer,), {"name": name}).paradigm(clean)


def paradigm_of_config(cfg) -> str:
    """:func:`paradigm_of` a composed config (what ``summary.json`` records as ``paradigm``)."""
    from omegaconf import OmegaConf
    return paradigm_of(lambda k: OmegaConf.select(cfg, k, default=None))


TRAINERS.discover(__name__, __path__, skip=("base",))
