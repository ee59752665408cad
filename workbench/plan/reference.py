"""The time-to-target reference when the user names none (``--target-accuracy`` without
``--reference``): a ``trainer=sync`` run of the plan's model, data and per-worker batch on the plan's
ranks (at least 2: the noise scale needs two workers), ending at the target
(``trainer.stop_at_accuracy``) or after ``steps``, kept under ``<output_root>/references/`` and
found again by its config, as the step-time profile is cached (docs/time_to_target.md)."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Callable, Sequence

from workbench.core import ConfigError

DEFAULT_STEPS = 3000
EVAL_EVERY = 10  # steps between its evaluations (fewer under a short cap): the crossing is known to within them


def reference_config(shared: Sequence[str], ranks: int, target: float, steps: int, root) -> object:
    """The reference run's config: the plan's shared overrides, ``trainer=sync`` on ``ranks`` (at least 2)."""
    import workbench
    return workbench.compose([*shared, "trainer=sync", f"cluster.nproc={max(2, ranks)}", f"trainer.max_steps={steps}",
                              f"trainer.eval_every={max(1, min(EVAL_EVERY, steps // 20))}", f"trainer.stop_at_accuracy={target}",
                              "trainer.progress=false", "checkpoint.every=0", f"output_root={Path(root) / 'references'}"])


def _key(cfg) -> str:
    from omegaconf import OmegaConf
    c = OmegaConf.to_container(cfg, resolve=True)
    c.pop("output_root", None)
    return hashlib.sha256(json.dumps(c, sort_keys=True, default=str).encode()).hexdigest()[:16]


def auto_reference(shared: Sequence[str], ranks: int, target: float, root, steps: int = DEFAULT_STEPS,
                   log: Callable[[str], None] = print) -> str:
    """The directory of a reference run for ``shared`` at ``target``: the kept one with this config,
    else a new run. A run that ends without reaching the target is one ConfigError line; one that
    fails, a RuntimeError naming why."""
    import workbench
    from workbench.plan.to_target import reference_from_run
    if steps < 1:
        raise ConfigError(f"invalid value {steps!r} for --reference-steps: must be >= 1")
    cfg = reference_config(shared, ranks, target, steps, root)
    index_path = Path(cfg.output_root) / "index.json"
    index = json.loads(index_path.read_text()) if index_path.is_file() else {}
    key = _key(cfg)
    kept = index.get(key)
    if kept and (Path(kept) / "model.pt").is_file():
        try:
            reference_from_run(kept, target)
            return kept
        except (ValueError, OSError):
            pass
    log(f"time to {target:.0%}: a reference run (trainer=sync, {cfg.cluster.nproc} ranks, until {target:.0%} or "
        f"{steps} steps), kept under {cfg.output_root} ...")
    run = workbench.launch(cfg, progress=False, check=False)
    if (run.summary or {}).get("status") != "completed":
        raise RuntimeError(f"the reference run {run.path} did not complete: {(run.summary or {}).get('error', 'no summary')}")
    try:
        reference_from_run(run.path, target)
    except ValueError as e:
        raise ConfigError(f"invalid value {target!r} for --target-accuracy: {e} in {steps} steps (the reference run "
                          f"{run.path}): lower the target or raise --reference-steps") from None
    index[key] = str(run.path)
    index_path.write_text(json.dumps(index, indent=1))
    return str(run.path)


def resolve(shared: Sequence[str], target: float, reference=None, root=None, steps=None,
            log: Callable[[str], None] = print) -> str:
    """The reference of a plan whose shared overrides (the trainer's left out) are ``shared`` at
    ``target``: ``reference`` where named, else :func:`auto_reference` on the plan's ranks under
    ``root`` (default: its ``output_root``)."""
    if reference:
        return str(reference)
    import workbench
    from workbench.core import world_size
    base = workbench.compose(list(shared))
    return auto_reference(shared, world_size(base), target, root or base.output_root, steps or DEFAULT_STEPS, log)
