"""Weights & Biases (``tracking=wandb``, extra ``.[wandb]``).

    python -m workbench tracking=wandb                     # offline: <output_root>/wandb/offline-run-*
    wandb sync experiments/wandb/offline-run-*             # upload later, from a machine with network
    python -m workbench tracking=wandb tracking.mode=online tracking.experiment=my-project   # after `wandb login`

Offline by default: training nodes often have no network, and nothing should leave the machine unless
asked. ``tracking.experiment`` is the W&B project, ``tracking.uri`` the directory W&B writes under
(default ``<output_root>``). W&B cannot reopen an offline run from another process, so the summary is
the one rank 0 wrote (without the launcher's later additions, e.g. bytes per rank); summary.json in the
run-directory artifact is the same.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Dict, List, Tuple

from omegaconf import OmegaConf

from workbench.tracking import Tracker, run_dir_files, split_summary


class WandbTracker(Tracker):
    def start(self, params: Dict[str, str]) -> dict:
        os.environ.setdefault("WANDB_SILENT", "true")
        import wandb
        t = self.cfg.tracking
        root = Path(t.uri or self.cfg.output_root).absolute()
        root.mkdir(parents=True, exist_ok=True)
        self.run = wandb.init(project=t.experiment, dir=str(root), mode=t.mode, name=self.run_dir.name,
                              config=OmegaConf.to_container(self.cfg, resolve=True), reinit="create_new",
                              settings=wandb.Settings(console="off", x_disable_stats=True))
        self._step = 0
        return {"uri": str(root / "wandb"), "experiment": t.experiment, "run_id": self.run.id, "mode": t.mode,
                "dir": str(Path(self.run.dir).parent)}

    def log_metrics(self, rows: List[Tuple[int, Dict[str, float]]]) -> None:
        for step, vals in rows:
            # W&B drops rows whose step goes backwards (a resumed run re-logs from its checkpoint)
            if step >= self._step:
                self.run.log(vals, step=step)
                self._step = step

    def log_summary(self, summary: dict) -> None:
        metrics, tags = split_summary(summary)
        self.run.summary.update({**metrics, **{f"summary/{k}": v for k, v in tags.items()}})
        self.run.tags = tuple(v for k, v in tags.items() if k in ("status", "verdict"))[:2]

    def log_run_dir(self) -> None:
        import wandb
        art = wandb.Artifact(f"run-{self.run.id}", type="run-dir")
        for p in run_dir_files(self.run_dir):
            art.add_file(str(p), name=str(p.relative_to(self.run_dir)))
        self.run.log_artifact(art)

    def end(self, status: str) -> None:
        self.run.finish(exit_code=0 if status == "completed" else 1)


TRACKER = WandbTracker
