"""Trainer registry: one module per training paradigm in this package (or an entry point of the
``workbench.trainers`` group), each a :class:`~workbench.trainers.base.Trainer` subclass registered
under its name, with its config dataclass filed by :func:`workbench.core.store_schema` as the schema
of ``conf/trainer/<name>.yaml``, and what it declares for the planner and the suites by its
:class:`~workbench.spec.ParadigmSpec` in :data:`SPECS`. Importing this package imports every trainer
module, so :data:`SPECS` and the labels (:func:`paradigm_of`) read from here are complete. See
``docs/extending.md``."""
from __future__ import annotations

from workbench.compress.messages import check_messages
from workbench.core import check
from workbench.registry import Registry
from workbench.spec import SPECS, paradigm_of, paradigm_of_config  # noqa: F401  (filled by the discovery below)


def _validate(cls, cfg) -> None:
    """The checks every trainer shares, then the trainer's own :meth:`Trainer.validate`."""
    t, c, d = cfg.trainer, cfg.cluster, cfg.data
    workers = cls.num_workers(cfg)
    check(workers >= 1, "cluster.nproc", c.nproc, f"trainer {t.name} needs at least one worker rank")
    if d.global_batch_size is not None:
        check(d.global_batch_size >= workers and d.global_batch_size % workers == 0, "data.global_batch_size",
              d.global_batch_size, f"must be a positive multiple of the {workers} worker ranks")
    stop = t.get("stop_at_accuracy")
    if stop is not None:
        check(0 < stop <= 1, "trainer.stop_at_accuracy", stop, "must be a test accuracy in (0, 1]")
        check(cls.shared_evaluation, "trainer.stop_at_accuracy", stop,
              f"trainer {t.name} evaluates on one rank while the others train on: its ranks cannot stop together "
              f"(remove it, or use a trainer whose ranks evaluate together)")
    cls.validate(cfg)
    check_messages(cfg.get("compressor"), cls.compressed_messages(cfg), t.name)


TRAINERS: Registry = Registry("trainer", key="trainer.name", entry_points="workbench.trainers", validate=_validate)


TRAINERS.discover(__name__, __path__, skip=("base", "bookkeeping"))
