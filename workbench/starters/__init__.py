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

from typing import Optional

from workbench.core import check
from workbench.registry import Registry

STARTERS: Registry = Registry("process starter")


class Starter:
    def check(self, cfg) -> None:
        pass

    def start(self, cfg, run_dir) -> Optional[dict]:  # pragma: no cover - abstract
        raise NotImplementedError

    def finalises(self) -> bool:
        return True


def check_names(cfg) -> None:
    """``cluster.starter`` and ``network.starter`` name registered starters (ConfigError otherwise);
    run before anything starts, next to :func:`workbench.config.validate`."""
    check(cfg.cluster.starter in STARTERS, "cluster.starter", cfg.cluster.starter, f"choose from {', '.join(STARTERS)}")
    s = cfg.network.starter
    check(s is None or s in STARTERS, "network.starter", s, f"choose from {', '.join(STARTERS)}")


STARTERS.discover(__name__, __path__)
