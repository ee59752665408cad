"""Launching the runs a notebook compares: compose + launch each named variant over shared base
overrides, with unavailable variants skipped (the API layer, beside :mod:`workbench.api`; analysis
reads what these runs write, it launches nothing).

    import workbench
    base = workbench.base_overrides(nproc=2, max_steps=60)
    runs, table = workbench.launch_variants({"all-reduce": [], "ps": ["trainer=ps"]}, base)
    from workbench import analysis as an
    R, M = an.load(runs, variants=table)     # labelled by the variant names
"""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional, Sequence

import pandas as pd

def registered_trainers() -> List[str]:
    from workbench.trainers import TRAINERS
    return list(TRAINERS)


def project_path(path) -> Path:
    """A relative path taken from the project root (the folder holding ``conf/``), absolute paths
    as they are: a notebook means the same ``experiments/`` whether JupyterLab runs it from
    ``notebooks/`` or papermill from the root."""
    from workbench.config import conf_dir
    p = Path(path).expanduser()
    return p if p.is_absolute() else conf_dir().parent / p


def base_overrides(cluster: str = "local", nproc: int = 2, model: str = "small_cnn", data: str = "digits",
                   max_steps: int = 60, eval_every: int = 20, output_root: str = "experiments",
                   extra: Sequence[str] = ()) -> List[str]:
    """The overrides every notebook starts from: its ``cluster``/``nproc``/``model``/``data``
    parameters, a step budget, and where runs go (``output_root``, relative to the project root)."""
    return [f"cluster={cluster}", f"cluster.nproc={nproc}", f"model={model}", f"data={data}",
            f"trainer.max_steps={max_steps}", f"trainer.eval_every={eval_every}",
            f"output_root={project_path(output_root)}", *extra]


def _trainer_of(overrides: Sequence[str]) -> Optional[str]:
    for o in overrides:
        if o.startswith("trainer="):
            return o.split("=", 1)[1]
    return None


def _is_group(o: str) -> bool:
    return "=" in o and "." not in o.split("=", 1)[0]


def _order(base: List[str], variant: List[str]) -> List[str]:
    """Group choices first (base, then the variant's, which win), then keys (base, then variant):
    ``trainer.*`` keys must come after ``trainer=ps`` for Hydra to apply them to it."""
    return ([o for o in base if _is_group(o)] + [o for o in variant if _is_group(o)]
            + [o for o in base if not _is_group(o)] + [o for o in variant if not _is_group(o)])


def launch_variants(variants: Dict[str, Sequence[str]], base: Sequence[str] = (), progress: bool = True):
    """Compose and launch each variant (``{name: overrides}``, applied after ``base``; group choices
    such as ``trainer=ps`` go before every key so that ``trainer.*`` keys apply to it).

    Returns ``(runs, table)``: the completed :class:`~workbench.runs.handle.Run` objects and one row per
    variant with its status — ``completed``, ``failed`` (the run's error) or ``skipped`` (its trainer
    is not registered, or the config is invalid: the one-line reason). Nothing is faked: a skipped
    variant has no run."""
    from workbench.api import compose
    from workbench.config import ConfigError
    from workbench.launcher import RunFailed, launch
    trainers = set(registered_trainers())
    runs, rows = [], []
    for name, ov in variants.items():
        overrides = _order(list(base), list(ov))
        t = _trainer_of(overrides) or "sync"
        if t not in trainers:
            rows.append({"variant": name, "status": "skipped", "run_dir": None,
                         "reason": f"trainer '{t}' is not registered yet (registered: {', '.join(sorted(trainers))})"})
            continue
        try:
            cfg = compose(overrides)
            run = launch(cfg, progress=progress)
        except ConfigError as e:
            rows.append({"variant": name, "status": "skipped", "run_dir": None, "reason": f"invalid config: {e}"})
            continue
        except RunFailed as e:
            rows.append({"variant": name, "status": "failed", "run_dir": str(e.run.path), "reason": str(e)})
            continue
        runs.append(run)
        rows.append({"variant": name, "status": "completed", "run_dir": str(run.path), "reason": ""})
    return runs, pd.DataFrame(rows, columns=["variant", "status", "run_dir", "reason"])
