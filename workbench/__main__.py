"""Command line: the Hydra main. Every key of conf/ can be overridden; --multirun sweeps.

    python -m workbench                                   # default: sync DDP, small CNN, digits, 4 CPU ranks
    python -m workbench trainer=sync cluster.nproc=2 optim.lr=0.05
    python -m workbench experiment=digits_large_batch
    python -m workbench --multirun cluster.nproc=1,2,4    # one run each under experiments/multiruns/
    python -m workbench --cfg job                         # print the composed config, run nothing
    workbench ...                                         # the same, as a console script
    python -m workbench checkpoint.every=50 cluster.max_restarts=2   # survive a dead rank: restart + resume
    python -m workbench resume experiments/runs/<date>/<time>_<name>   # continue a stopped run

Exit status: 0 completed, 1 failed (the failed rank is named), 2 invalid config (nothing started),
3 diverged (NaN/inf loss).

Every bad input (an unknown key, option or type, a value out of range) is one line on stderr,
``workbench: error: ...``, naming the key and the valid choices; nothing starts, no run directory
is left. A configuration known to be unstable (asynchronous updates with momentum above the bound
of workbench/stability.py) gets one ``workbench: warning:`` line and runs anyway. The last lines of
a run: the summary, ``verdict: learned | did_not_learn | unstable | diverged (why); what to try``,
and the run directory.
"""
from __future__ import annotations

import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

import workbench.trainers  # noqa: F401  (registers the trainers' config schemas before Hydra composes)
from workbench.core import ConfigError, conf_dir
from workbench.verdict import line as verdict_line


def summary_paragraph(s) -> str:
    if not s:
        return "no summary yet (another rank finalises it)"
    acc = s.get("final_test_accuracy")
    sps = s.get("samples_per_s")
    bps = s.get("bytes_per_step")
    parts = [f"{s.get('trainer')} on {s.get('model')}/{s.get('data')} with {s.get('workers')} workers"
             f" ({s.get('backend')}, {s.get('device')}) {s.get('status')} after {s.get('steps')} steps"
             f" ({s.get('epochs', 0):.1f} epochs, global batch {s.get('global_batch')}) in {s.get('wall_time_s', 0):.1f} s:"]
    parts.append(f"final test accuracy {acc:.2%}," if acc is not None else "no evaluation,")
    parts.append(f"{sps:,.0f} samples/s," if sps else "")
    if bps is not None:
        parts.append(f"{bps / 2**20:.3f} MiB sent per worker per step.")
    return " ".join(p for p in parts if p)


def _task(cfg: DictConfig) -> None:
    from workbench.launcher import discard, launch

    run_dir = Path(HydraConfig.get().runtime.output_dir)
    _run_and_report(lambda: launch(cfg, run_dir=run_dir, check=True),
                    on_config_error=lambda: discard(run_dir, keep=cfg.output_root))  # leave no run directory behind


def _run_and_report(start, on_config_error=None) -> None:
    """Run ``start()``; map its outcome to the CLI's output and exit status (see module docstring)."""
    from workbench.launcher import RunFailed
    try:
        run = start()
    except ConfigError as e:
        if on_config_error is not None:
            on_config_error()
        print(f"workbench: error: {e}", file=sys.stderr)
        raise SystemExit(2)
    except RunFailed as e:
        print(f"workbench: {e}", file=sys.stderr)
        if verdict_line(e.run.summary):
            print(verdict_line(e.run.summary), file=sys.stderr)
        raise SystemExit(3 if e.run.status == "diverged" else 1)
    print(summary_paragraph(run.summary))
    if verdict_line(run.summary):
        print(verdict_line(run.summary))
    print(f"run directory: {run.path}")


def _resume_cli(argv) -> None:
    import argparse

    from workbench.launcher import resume
    p = argparse.ArgumentParser(prog="workbench resume", description="Continue a stopped run from its newest complete checkpoint.")
    p.add_argument("run_dir")
    a = p.parse_args(argv)
    _run_and_report(lambda: resume(a.run_dir))


def _jobs(argv) -> list:
    """The override lists Hydra will run (one per --multirun job), or [] when argv is not a plain
    run (--help, --info, ... or arguments Hydra itself will reject)."""
    from hydra._internal.utils import get_args_parser
    try:
        args, unknown = get_args_parser().parse_known_args(argv)
    except SystemExit:
        return []
    if args.help or args.hydra_help or args.info or args.shell_completion or args.experimental_rerun or unknown:
        return []
    if not args.multirun:
        return [args.overrides]
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException
    try:
        parsed = OverridesParser.create().parse_overrides(args.overrides)
        return [job for batch in BasicSweeper.split_arguments(parsed, None) for job in batch]
    except HydraException:
        return [args.overrides]  # compose names the bad one


def precheck(argv) -> None:
    """Compose and validate every job before Hydra creates a run directory or starts a process:
    a bad override or value is one line (ConfigError) here, never Hydra's multi-line report."""
    from workbench.api import compose
    from workbench.config import validate
    from workbench.starters import check_names
    from omegaconf import OmegaConf
    for job in _jobs(argv):
        cfg = compose(job)
        # values read from Hydra's launcher (cluster=slurm: ${hydra:launcher.tasks_per_node}) exist
        # only inside the job: launch() validates those there, before its ranks start
        if "${hydra:" not in OmegaConf.to_yaml(cfg):
            validate(cfg)  # warnings come from launch(), just before each job starts
            check_names(cfg)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "resume":
        return _resume_cli(sys.argv[2:])
    try:
        path = str(conf_dir())
        precheck(sys.argv[1:])
    except ConfigError as e:
        print(f"workbench: error: {e}", file=sys.stderr)
        raise SystemExit(2)
    hydra.main(config_path=path, config_name="config", version_base="1.3")(_task)()


if __name__ == "__main__":
    main()
