"""``python -m workbench.plan``: the command line (argparse; bad input is one line, exit 2, before
anything is profiled or launched). The runbook is :mod:`workbench.plan`'s docstring."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from workbench.core import ConfigError
from workbench.perfmodel.profile import ProfileError
from workbench.plan.rows import (DEFAULT_BANDWIDTHS, LOOPBACK, _plan_rows, _split_overrides, here, load_profile,
                                 parse_bandwidths, parse_workers)
from workbench.plan.tables import table
from workbench.plan.verification import check_verifiable, link_from_overrides, verify

DESCRIPTION = """\
Which way of distributing training wins for this model, cluster and network, and why: every
registered paradigm ranked by the calibrated performance model before anything runs, and, with
--verify, checked against short real runs here.

examples:
  python -m workbench.plan model=vgg16 data.resize=32 cluster.nproc=8 --bandwidth 1gbit,10gbit
  python -m workbench.plan cluster.nproc=3 --verify
  python -m workbench.plan model=resnet18 data=synthetic --workers 4,8,16 --bandwidth 10gbit --json plan.json
  python -m workbench.plan data=digits_hard cluster.nproc=4 --bandwidth 1gbit,10gbit --target-accuracy 0.9
"""

EPILOG = """\
Overrides are Hydra's, as for a run (model=, data.*, cluster.nproc=, trainer=X to plan only X);
network=emulated network.bandwidth=700mbit plans (and verifies) that link, as --bandwidth emulated:700mbit.
Exit status: 0; 2 for bad input; 1 when profiling fails. The model and its accuracy: docs/planner.md;
the full runbook: python -c "import workbench.plan; help(workbench.plan)".
"""


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m workbench.plan", description=DESCRIPTION, epilog=EPILOG,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("overrides", nargs="*", help="Hydra overrides, as for a run")
    ap.add_argument("--bandwidth", default=None, help=f"comma-separated link rates, loopback, or emulated:<rate> (this "
                    f"machine behind shaped links) (default {','.join(DEFAULT_BANDWIDTHS)}; loopback with --verify)")
    ap.add_argument("--workers", default=None, help="comma-separated process counts (default cluster.nproc)")
    ap.add_argument("--latency", default="50us", help="per message on a link (default 50us)")
    ap.add_argument("--only", default="", help="paradigm labels or prefixes, comma separated")
    ap.add_argument("--verify", action="store_true", help="also run each paradigm briefly here (loopback and "
                    "emulated:<rate> rows; emulated needs root)")
    ap.add_argument("--all", action="store_true", help="print every variant (default: the best of each family, "
                    "e.g. one stanza/n_f=* row; the JSON holds every row either way)")
    ap.add_argument("--json", default=None, help="write every row to this file")
    ap.add_argument("--profile", default=None, help="plan from this profile file (e.g. taken on a GPU machine)")
    ap.add_argument("--save-profile", default=None, help="also write the profile used to this file")
    ap.add_argument("--speedup", type=float, default=1.0, help="divide the profile's compute by this (faster hardware)")
    ap.add_argument("--refresh-profile", action="store_true", help="measure the profile again")
    ap.add_argument("--target-accuracy", type=float, default=None, metavar="ACC", help="also predict each "
                    "paradigm's steps and time to this test accuracy and rank by time to it")
    ap.add_argument("--seeds", type=int, default=1, help="with --verify and --target-accuracy: runs per paradigm "
                    "to the target, one per seed (medians reported)")
    ap.add_argument("--reference", default=None, metavar="RUN", help="a trainer=sync run directory of this model "
                    "and data (2+ workers) that reached the target: its steps and gradient noise scale (default: "
                    "the planner runs one, until the target, and keeps it)")
    ap.add_argument("--reference-steps", type=int, default=None, metavar="N", help="the step cap of that run "
                    "(default 3000)")
    return ap


def main(argv=None) -> int:
    """The planner's command line; returns the exit status (0, 1 when profiling fails, 2 for bad input)."""
    a = parser().parse_args(argv)
    try:
        link, a.overrides = link_from_overrides(a.overrides)  # network=emulated network.bandwidth=R: emulated:R
        if link and a.bandwidth:
            raise ConfigError(f"--bandwidth {a.bandwidth} and the network overrides ({link}) both name the link: "
                              f"give one")
        bws = parse_bandwidths(link or a.bandwidth or (LOOPBACK if a.verify else ",".join(DEFAULT_BANDWIDTHS)))
        if a.verify and not any(here(b) for b in bws):
            bws.append(LOOPBACK)
        if a.verify:
            check_verifiable(bws)
        only = [o.strip() for o in a.only.split(",") if o.strip()]
        workers = parse_workers(a.workers) if a.workers else None
        import workbench
        shared, _, _ = _split_overrides(a.overrides)
        base = workbench.compose(shared)
        if a.seeds < 1:
            raise ConfigError(f"invalid value {a.seeds!r} for --seeds: must be >= 1")
        from workbench.plan.to_target import check_args
        ref = check_args(a.target_accuracy, a.reference, base)  # read before anything is profiled
        if a.reference_steps is not None and (a.target_accuracy is None or a.reference or a.reference_steps < 1):
            raise ConfigError(f"invalid value {a.reference_steps!r} for --reference-steps: the cap of the reference run "
                              f"the planner makes (with --target-accuracy, without --reference), >= 1")
        from workbench.data import fetch
        fetch(base)  # data.download=true: the files, once, before the profile's ranks start
        prof = load_profile(a.profile, base) if a.profile else None
        rows, (vs, prof) = _plan_rows(a.overrides, bws, workers, prof, a.speedup, a.latency, only, None,
                                      lambda s: print(s, file=sys.stderr, flush=True), a.refresh_profile)
    except ConfigError as e:
        print(f"workbench: error: {e}", file=sys.stderr)
        return 2
    except ProfileError as e:  # the profile's ranks failed or timed out, the rank named
        print(f"workbench: error: {e}", file=sys.stderr)
        return 1
    if a.save_profile:
        prof.save(a.save_profile)
    if a.target_accuracy is not None:
        from workbench.plan.reference import resolve
        from workbench.plan.to_target import header, load_reference, with_target
        try:
            a.reference = resolve(shared, a.target_accuracy, a.reference, steps=a.reference_steps,
                                  log=lambda s: print(s, file=sys.stderr, flush=True))
        except ConfigError as e:
            print(f"workbench: error: {e}", file=sys.stderr)
            return 2
        except RuntimeError as e:
            print(f"workbench: error: {e}", file=sys.stderr)
            return 1
        ref = ref or load_reference(a.reference, a.target_accuracy, base)  # the one the planner made
        rows = with_target(rows, vs, ref)
        print(header(ref))
    if a.verify and a.target_accuracy is not None:  # each paradigm to the target, its step time on the same run
        from workbench.plan.verify_target import verify_to_target
        rows = verify_to_target(rows, vs, Path(base.output_root) / "plan-verify", ref, a.seeds,
                                log=lambda s: print(s, file=sys.stderr, flush=True))
    elif a.verify:
        root = Path(base.output_root) / "plan-verify"
        rows = verify(rows, vs, root, log=lambda s: print(s, file=sys.stderr, flush=True))
    m = prof.machine
    print(f"profile: {prof.model} batch {prof.batch}/worker, {prof.ranks} ranks on {m.get('host')} "
          f"({m.get('cores')} cores, load {m.get('load_average')}), compute ÷{prof.speedup:g}")
    print(table(rows, prof, all_rows=a.all))
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps({"profile": {k: v for k, v in prof.to_json().items() if k != "codecs"},
                                            "rows": rows}, indent=1, default=str))
    return 0
