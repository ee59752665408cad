"""A discrete-event simulator of parameter-server training at the papers' scale (Rudra's 30–60
learners, 1024 and beyond), calibrated by this machine's profile and run by the real protocol code.

- :mod:`workbench.sim.engine`: the event queue and the simulated clock;
- :mod:`workbench.sim.spec`: what to simulate, its checks and its cost estimate;
- :mod:`workbench.sim.ps`: workers, links and servers; the servers' decisions are
  :class:`workbench.ps.rules.Protocol`, the same class the real server runs.

What it models, what it leaves out and where it was checked against real runs: docs/simulator.md.
The command line is :mod:`workbench.sim.__main__`.
"""
from workbench.sim.ps import replay, simulate
from workbench.sim.spec import SimSpec, check, estimate_s, from_profile, stragglers_first

__all__ = ["SimSpec", "check", "estimate_s", "from_profile", "replay", "simulate", "stragglers_first"]
