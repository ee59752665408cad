"""Process starters: how a run's ranks come to life. ``cluster.starter`` picks one.

- ``elastic`` (default): PyTorch's elastic agent on this machine (what torchrun runs).
- ``submitit``: each SLURM task (Hydra's submitit launcher, ``cluster=slurm``) is one rank.
- ``ray``: Ray Train's TorchTrainer on an existing Ray cluster (``cluster=ray``, extra ``[ray]``).

A starter is a :class:`Starter`: ``check(cfg)`` runs before anything starts (ConfigError on bad
input), ``start(cfg, run_dir)`` runs the ranks to the end and returns None or a failure dict
(``error``, ``failed_rank``), and ``finalises`` says whether this process writes the final
summary (with SLURM every task calls the launcher, only global rank 0 finalises).
"""
from __future__ import annotations

import importlib
import pkgutil
from typing import Optional

from workbench.registry import Registry

STARTERS: Registry = Registry("process starter")


class Starter:
    def check(self, cfg) -> None:
        pass

    def start(self, cfg, run_dir) -> Optional[dict]:  # pragma: no cover - abstract
        raise NotImplementedError

    def finalises(self) -> bool:
        return True


for _m in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_m.name}")
