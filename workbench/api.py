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
    from hydra import compose as hydra_compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    import workbench.trainers  # noqa: F401  (registers the trainers' config schemas)
    from workbench.config import ConfigError, conf_dir

    overrides = list(overrides or [])
    try:
        with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3", job_name="workbench"):
            cfg = hydra_compose(config_name=config_name, overrides=overrides)
    except (HydraException, OmegaConfBaseException) as e:
        raise ConfigError(" ".join(str(e).split())) from None
    return cfg
