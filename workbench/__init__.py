"""workbench: distributed deep-learning training paradigms, side by side.

Python API (what notebooks and papermill use; the CLI ``python -m workbench`` goes through it too):

    import workbench
    cfg = workbench.compose(["trainer=sync", "cluster.nproc=4"])  # Hydra overrides
    run = workbench.launch(cfg)                                   # -> workbench.Run
    df = workbench.load_runs("experiments")                       # one row per run
    runs, table = workbench.launch_variants({"ps": ["trainer=ps"]}, workbench.base_overrides())

Reading and plotting runs: ``from workbench import analysis as an`` (workbench.analysis).
"""
from __future__ import annotations

import importlib

__version__ = "0.1.0"

# Resolved on first use (PEP 562): every rank process imports this package, and a rank needs none of
# the API's analysis side (pandas alone costs each of them about a second of start-up on 2 cores).
_API = {
    "compose": "workbench.api", "ConfigError": "workbench.core", "RunFailed": "workbench.launcher",
    "launch": "workbench.launcher", "resume": "workbench.launcher", "Run": "workbench.runs.handle",
    "load_metrics": "workbench.runs.table", "load_runs": "workbench.runs.table",
    "launch_variants": "workbench.variants", "base_overrides": "workbench.variants",
    "registered_trainers": "workbench.variants", "project_path": "workbench.variants",
}
__all__ = list(_API)


def __getattr__(name: str):
    if name in _API:
        value = getattr(importlib.import_module(_API[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'workbench' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + list(_API))
