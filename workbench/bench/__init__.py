"""Benchmarks: commands that measure and print tables (never timed tests). ``python -m workbench.bench --help``."""
import os as _os
import time as _time

# The machine's load when the suite started: every section written to BENCHMARKS.md quotes it next to
# the load at the end, because this machine is shared and a timed row means little without it.
STARTED = (_time.time(), _os.getloadavg() if hasattr(_os, "getloadavg") else (float("nan"),) * 3)
