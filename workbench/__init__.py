"""workbench: distributed deep-learning training paradigms, side by side.

Python API (what notebooks and papermill use; the CLI ``python -m workbench`` goes through it too):

    import workbench
    cfg = workbench.compose(["trainer=sync", "cluster.nproc=4"])  # Hydra overrides
    run = workbench.launch(cfg)                                   # -> workbench.Run
    df = workbench.load_runs("experiments")                       # one row per run
"""
__version__ = "0.1.0"

from workbench.api import compose  # noqa: E402
from workbench.config import ConfigError  # noqa: E402
from workbench.launcher import RunFailed, launch, resume  # noqa: E402
from workbench.runs import Run, load_metrics, load_runs  # noqa: E402

__all__ = ["compose", "launch", "load_runs", "load_metrics", "Run", "ConfigError", "RunFailed", "resume"]
