"""Calibrate the emulated network: achieved point-to-point and all-reduce bandwidth against the
configured link rate (target: >= 80 % for large messages). Needs root and iproute2.

    sudo python -m workbench.network.calibrate --nodes 2 --bandwidth 100mbit
    sudo python -m workbench.network.calibrate --nodes 4 --bandwidth 1gbit --write   # -> BENCHMARKS.md

All-reduce bandwidth is "bus bandwidth": the ring algorithm's bytes per rank, 2(p-1)/p * N, over
the time, so a perfect ring on links of rate R reaches R. The JSON lands in
experiments/bench/calibration_<bandwidth>_<nodes>.json for benchmarks to record next to their results.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path


def calibrate(nodes: int, bandwidth: str, sizes_mb=(0.25, 1, 4, 16), repeats: int = 3, latency: str = "0ms") -> dict:
    from workbench.network import parse_rate
    from workbench.network.emulated import EmulatedNetwork
    rate = parse_rate(bandwidth)
    with tempfile.TemporaryDirectory() as tmp, EmulatedNetwork(nodes, bandwidth, latency) as net:
        out = Path(tmp) / "probe.json"
        env = {"MASTER_ADDR": net.address(0), "MASTER_PORT": "29411", "WORLD_SIZE": str(nodes)}
        procs = [net.popen(k, [sys.executable, "-m", "workbench.network.probe", "--out", str(out), "--repeats", str(repeats),
                               "--sizes-mb", *map(str, sizes_mb)], env={**env, "RANK": str(k)}) for k in range(nodes)]
        deadline = time.monotonic() + 600
        for p in procs:
            p.wait(timeout=max(1, deadline - time.monotonic()))
        if any(p.returncode for p in procs):
            raise RuntimeError(f"calibration probe failed: exit codes {[p.returncode for p in procs]}")
        rows = json.loads(out.read_text())
    for r in rows:
        r["fraction_of_link"] = r["achieved_bits_per_s"] / rate
    return {"nodes": nodes, "bandwidth": bandwidth, "link_bits_per_s": rate, "latency": latency, "rows": rows}


def table(res: dict) -> str:
    # the fastest of the repeats is the link's capacity (what the rate promises); the slowest beside it
    # shows how far one transfer may fall short
    lines = ["| transfer | size (MiB) | time (ms), fastest | slowest (ms) | repeats | achieved (Mbit/s) | of link rate |",
             "|---|---|---|---|---|---|---|"]
    for r in res["rows"]:
        slow = f"{r['slowest_s'] * 1e3:.1f}" if "slowest_s" in r else ""
        lines.append(f"| {r['kind']} | {r['size_mb']:g} | {r['seconds'] * 1e3:.1f} | {slow} | {r.get('repeats', '')} "
                     f"| {r['achieved_bits_per_s'] / 1e6:,.1f} | {r['fraction_of_link']:.0%} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=2)
    p.add_argument("--bandwidth", default="100mbit")
    p.add_argument("--latency", default="0ms")
    p.add_argument("--sizes-mb", type=float, nargs="+", default=[0.25, 1, 4, 16])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--write", action="store_true", help="update BENCHMARKS.md")
    a = p.parse_args(argv)
    from workbench.network import check_config  # noqa: F401  (same root/iproute2 checks as a run)
    res = calibrate(a.nodes, a.bandwidth, a.sizes_mb, a.repeats, a.latency)
    out = Path("experiments/bench")
    out.mkdir(parents=True, exist_ok=True)
    (out / f"calibration_{a.bandwidth}_{a.nodes}.json").write_text(json.dumps(res, indent=2))
    header = f"{a.nodes} emulated nodes, links shaped to {a.bandwidth} (tbf, both directions), latency {a.latency}"
    print(header)
    print(table(res))
    if a.write:
        from workbench.bench.markdown import update_section
        cmd = "python -m workbench.network.calibrate " + " ".join(argv if argv is not None else sys.argv[1:])
        update_section(Path(__file__).resolve().parents[2] / "BENCHMARKS.md", f"network calibration: {a.bandwidth} x{a.nodes}",
                       f"Command: `{cmd.strip()}` (as root)\n\n{header}.\n\n{table(res)}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
