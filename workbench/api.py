"""The Python API notebooks and papermill use; the CLI goes through the same functions.

    import workbench
    cfg = workbench.compose(["trainer=sync", "cluster.nproc=4"])
    run = workbench.launch(cfg)
    run.summary["final_test_accuracy"], run.metrics()
    workbench.load_runs("experiments/runs/**")
"""
from __future__ import annotations

from typing import Iterable, Optional

from omegaconf import DictConfig


def compose(overrides: Optional[Iterable[str]] = None, config_name: str = "config") -> DictConfig:
    """Compose ``conf/<config_name>.yaml`` with Hydra overrides, exactly as the CLI does.

    Raises :class:`~workbench.config.ConfigError` (one line: the bad key or option and the valid
    choices) instead of Hydra's multi-line report."""
    from workbench.overrides import compose_one_line
    return compose_one_line(list(overrides or []), config_name)
