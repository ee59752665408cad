"""Benchmark suites, side by side in one go: ``python -m workbench.bench <suite> [options]``.

    python -m workbench.bench overhead --write          # trainer=sync vs a hand-written DDP script
    python -m workbench.bench bytes --write             # bytes per worker per step, every paradigm, measured vs analytic
    python -m workbench.bench staleness --write         # time to 90 % on the digits: sync, hardsync, n-softsync, async
    python -m workbench.bench stanza --write            # Stanza allocation sweep: predicted vs measured throughput
    python -m workbench.bench compression --write      # every compressor vs compressor=none, and the utility model
    python -m workbench.bench bandwidth --write         # emulated bandwidth sweep (needs root): where each paradigm wins
    python -m workbench.bench planner --write           # workbench.plan --verify: predicted vs measured, every paradigm
    python -m workbench.bench <suite> --help            # a suite's own options; --tiny: the CI smoke version

Each suite prints its table(s), writes CSV + ``report.md`` + a plotly ``report.html`` under
``experiments/bench/<suite>/``, and with ``--write`` replaces its own section of BENCHMARKS.md
(with the command that produced it). Timings come from whatever machine runs them: compare rows
of one table, never tables of different machines.
"""
from __future__ import annotations

import importlib
import sys

SUITES = {
    "overhead": "workbench.bench.overhead",
    "bytes": "workbench.bench.bytes",
    "staleness": "workbench.bench.staleness",
    "stanza": "workbench.bench.stanza",
    "compression": "workbench.bench.compression",
    "bandwidth": "workbench.bench.bandwidth",
    "planner": "workbench.bench.planner",
    "calibrate": "workbench.network.calibrate",
}


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    suite, rest = argv[0], argv[1:]
    if suite not in SUITES:
        print(f"error: unknown suite {suite!r}; choose from {', '.join(SUITES)}", file=sys.stderr)
        return 2
    importlib.import_module(SUITES[suite]).main(rest)
    return 0


if __name__ == "__main__":
    sys.exit(main())
