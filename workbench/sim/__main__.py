"""Simulate a parameter-server cluster at any scale, with the real protocol code and simulated time.

Runbook
-------
::

    python -m workbench.sim --workers 30 --n 4 --compute-s 0.1 --model-mb 4 --bandwidth 10gbit
    python -m workbench.sim --workers 1024 --steps 1000 --compute-s 0.1 --model-mb 4 --servers 4
    python -m workbench.sim --workers 60 --protocol hardsync --stragglers 1 --slowdown 3 --cv 0.1
    python -m workbench.sim --workers 30 --profile experiments/profiles/<file>.json --bandwidth 10gbit --json out.json

- ``--workers`` λ; ``--protocol`` hardsync | softsync (``--n`` in 1..λ; default λ, asynchronous) | easgd
  (``--period`` local steps between exchanges); ``--servers`` S; ``--steps`` per worker.
- Compute: ``--compute-s`` per step, or the calibrated ``--profile`` (with ``--speedup`` for faster
  hardware); ``--cv`` its lognormal spread; ``--stragglers k --slowdown f --delay d``: workers
  0..k−1 compute f times slower and sleep d seconds per step.
- ``--max-staleness``/``--on-stale``/``--lr-modulation``: the SSP bound and Rudra's α(τ), as ``trainer=staleness``.
- ``--host-cores k``: every worker and server on one host of k cores (a processor-sharing pool that
  compute, message copies and the server's service all draw from), as a run on this machine is;
  ``--compute-s`` is then one batch's CPU-seconds on one thread (with ``--profile``: its single-rank compute).

Prints updates/s, samples/s, a worker's mean step, ⟨τ⟩, max τ and the τ histogram, the servers'
and links' utilisation; ``--json FILE`` writes all of it. Exit status 0; 2 for bad input (λ < 1, n
outside 1..λ, a spread or slowdown out of range, a request estimated to take longer than
``--max-wall-s`` here): one line, before anything is simulated. What the simulator models and leaves
out, and its check against real runs: docs/simulator.md.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from workbench.config import ConfigError


def _spec(a):
    from workbench.network import parse_rate, parse_time
    from workbench.sim.spec import SimSpec, check, stragglers_first
    bw = parse_rate(a.bandwidth, "--bandwidth") / 8
    lat = parse_time(a.latency, "--latency")
    if a.workers < 1:
        raise ConfigError(f"invalid value {a.workers} for --workers (λ): must be >= 1")
    if not 0 <= a.stragglers <= a.workers:
        raise ConfigError(f"invalid value {a.stragglers} for --stragglers: must be in [0, {a.workers}]")
    common = dict(workers=a.workers, bandwidth=bw, latency=lat, protocol=a.protocol, n=a.n, servers=a.servers,
                  steps=a.steps, cv=a.cv, stragglers=stragglers_first(a.stragglers, a.slowdown, a.delay),
                  max_staleness=a.max_staleness, on_stale=a.on_stale, lr_modulation=a.lr_modulation,
                  period=a.period, seed=a.seed, host_cores=a.host_cores)
    if a.profile:
        from workbench.perfmodel.profile import Profile
        from workbench.sim.spec import from_profile
        try:
            prof = Profile.load(a.profile)
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise ConfigError(f"invalid value {a.profile!r} for --profile: not a readable profile ({type(e).__name__})") from None
        if a.speedup <= 0:
            raise ConfigError(f"invalid value {a.speedup!r} for --speedup: must be > 0")
        spec = from_profile(prof.with_speedup(a.speedup * prof.speedup), **common)
    else:
        spec = SimSpec(compute_s=a.compute_s, model_bytes=int(a.model_mb * 2**20), update_s=a.update_s, **common)
    return check(spec, a.max_wall_s)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m workbench.sim", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", type=int, required=True, help="λ, the learners")
    ap.add_argument("--protocol", default="softsync", help="hardsync | softsync | easgd")
    ap.add_argument("--n", type=int, default=None, help="n-softsync's n in 1..λ (default λ: asynchronous)")
    ap.add_argument("--servers", type=int, default=1)
    ap.add_argument("--steps", type=int, default=100, help="steps per worker")
    ap.add_argument("--compute-s", type=float, default=0.1, help="seconds of compute per step (without --profile)")
    ap.add_argument("--model-mb", type=float, default=4.0, help="MiB of the model (without --profile)")
    ap.add_argument("--update-s", type=float, default=0.0, help="the optimizer over the model, seconds (without --profile)")
    ap.add_argument("--profile", default=None, help="a calibrated profile file (workbench.perfmodel.profile)")
    ap.add_argument("--speedup", type=float, default=1.0, help="with --profile: divide its compute by this")
    ap.add_argument("--bandwidth", default="10gbit", help="each node's link (tc units)")
    ap.add_argument("--latency", default="50us")
    ap.add_argument("--cv", type=float, default=0.0, help="coefficient of variation of a step's compute (lognormal)")
    ap.add_argument("--stragglers", type=int, default=0, help="k slow workers")
    ap.add_argument("--slowdown", type=float, default=1.0, help="their compute factor (>= 1)")
    ap.add_argument("--delay", type=float, default=0.0, help="their extra seconds per step")
    ap.add_argument("--max-staleness", type=int, default=None)
    ap.add_argument("--on-stale", default="block")
    ap.add_argument("--lr-modulation", default="none")
    ap.add_argument("--period", type=int, default=4, help="EASGD's local steps between exchanges")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--host-cores", type=int, default=None,
                    help="all nodes on one host of this many cores, shared (default: a host per node)")
    ap.add_argument("--max-wall-s", type=float, default=600.0, help="refuse requests estimated to take longer here")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    try:
        spec = _spec(a)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    from workbench.sim.ps import simulate
    r = simulate(spec, max_wall_s=a.max_wall_s)
    print(f"{r['paradigm']}: λ={r['workers']}, S={r['servers']}, {r['steps']} steps each, "
          f"{r['elapsed_s']:.3g} simulated s ({r['events']} events in {r['wall_s']:.2f} s)")
    print(f"  samples/s {r['samples_per_s']:.1f}, a worker's step {1e3 * r['step_s']:.2f} ms, "
          f"servers busy {100 * r['server_utilisation']:.0f} %, server link {100 * r['server_link_utilisation']:.0f} %, "
          f"worker link {100 * r['worker_link_utilisation']:.0f} %")
    if "mean_staleness" in r:
        hist = r["staleness_hist"]
        print(f"  updates/s {r['updates_per_s']:.1f}, ⟨τ⟩ {r['mean_staleness']:.2f}, max τ {r['max_staleness']}, "
              f"dropped {r['dropped']}, blocked pushes {r['blocked_pushes']}")
        print("  τ histogram: " + " ".join(map(str, hist[:64])) + (" …" if len(hist) > 64 else ""))
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps(r, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
