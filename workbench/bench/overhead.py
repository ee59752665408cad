"""Overhead of ``trainer=sync`` against a plain hand-written DDP script (workbench/bench/plain_ddp.py)
on the same model, data and process count, measured side by side in one run: the two alternate,
``--repeats`` times each, and the table reports median step times and their ratio.

    python -m workbench.bench.overhead                      # small_cnn on digits, 4 ranks, 3 x 300 steps
    python -m workbench.bench.overhead --nproc 2 --model small_cnn --data synthetic --steps 150
    python -m workbench.bench.overhead --write              # also update BENCHMARKS.md
    python -m workbench.bench.overhead --e2e --repeats 7 --write   # the default job end to end

Step time = seconds between consecutive step ends on rank 0, data loading included, the first
``--skip`` steps dropped (warm-up), evaluation excluded.

``--e2e``: whole processes instead of steps. ``python -m workbench`` (the default job, every file of
its run directory written) against the torchrun script a user writes by hand for the same work
(workbench/bench/plain_e2e.py), alternating which goes first; wall-clock and CPU seconds (user +
system of the whole process tree) per command, medians and the repeats' range.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_plain(a, out: Path) -> list:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={a.nproc}",
           "-m", "workbench.bench.plain_ddp", f"--steps={a.steps}", f"--model={a.model}", f"--data={a.data}",
           f"--batch-size={a.batch_size}", f"--out={out}", *a.overrides]
    subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=ROOT, env={**_env(), "OMP_NUM_THREADS": "1"})
    return json.loads(out.read_text())


def run_workbench(a, tmp: Path, metered: bool) -> list:
    import workbench
    cfg = workbench.compose([f"model={a.model}", f"data={a.data}", f"data.batch_size={a.batch_size}",
                             f"cluster.nproc={a.nproc}", f"trainer.max_steps={a.steps}", f"trainer.eval_every={10**9}",
                             f"trainer.metered={str(metered).lower()}", f"output_root={tmp}", "optim.lr=0.05",
                             "trainer.progress=false", *a.overrides])
    run = workbench.launch(cfg, progress=False)
    return [r["step_time"] for r in run.records() if r["kind"] == "train"]


class CpuMeter:
    """CPU seconds of a command and everything it starts. The workbench's ranks are forked by a
    forkserver that nobody waits for, so ``RUSAGE_CHILDREN`` misses them: a cgroup (v1 cpuacct or
    v2, as root) counts every process in it. Elsewhere, the rusage of waited-for children only."""

    def __init__(self, name: str) -> None:
        import os
        self.dir, self.usage = None, None
        for base, usage in (("/sys/fs/cgroup/cpuacct", "cpuacct.usage"), ("/sys/fs/cgroup", "cpu.stat")):
            if os.path.isfile(f"{base}/cgroup.procs") and os.access(base, os.W_OK):
                try:
                    os.makedirs(f"{base}/{name}", exist_ok=True)
                except OSError:
                    continue
                if os.path.isfile(f"{base}/{name}/{usage}"):
                    self.dir, self.usage = f"{base}/{name}", usage
                    break
        self.kind = "cgroup" if self.dir else "rusage of waited-for children"

    def enter(self) -> None:  # in the child, before exec
        if self.dir:
            with open(f"{self.dir}/cgroup.procs", "w") as f:
                f.write("0")  # "0": the writing process itself

    def read(self) -> float:
        text = open(f"{self.dir}/{self.usage}").read()
        if self.usage == "cpu.stat":
            return int(next(l.split()[1] for l in text.splitlines() if l.startswith("usage_usec"))) / 1e6
        return int(text) / 1e9

    def close(self) -> None:
        import os
        import time
        if self.dir:
            for _ in range(100):  # a forkserver outlives its client by a moment
                try:
                    os.rmdir(self.dir)
                    return
                except OSError:
                    time.sleep(0.1)


def timed(cmd, meter: CpuMeter) -> tuple:
    """(wall s, CPU s of the process tree) of one command; it must succeed."""
    import resource
    import time
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu0 = meter.read() if meter.dir else 0.0
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env={**_env(), "OMP_NUM_THREADS": "1"},
                       preexec_fn=meter.enter)
    wall = time.perf_counter() - t0
    if meter.dir:
        for _ in range(100):  # until the forkserver and its ranks have left the cgroup
            if not open(f"{meter.dir}/cgroup.procs").read().strip():
                break
            time.sleep(0.1)
        cpu = meter.read() - cpu0
    else:
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if p.returncode != 0:
        tail = [l for l in p.stderr.strip().splitlines() if l.strip() and not l.startswith("=")][-3:]
        raise SystemExit(f"overhead: {' '.join(cmd)} failed ({p.returncode}): {' | '.join(tail)}")
    return wall, cpu


def end_to_end(a) -> tuple:
    """Interleaved whole-process runs of the default job and the hand-written script."""
    res = {"plain torchrun script": [], "python -m workbench": []}
    with tempfile.TemporaryDirectory() as d:
        cmds = {"plain torchrun script": [sys.executable, "-m", "torch.distributed.run", "--standalone",
                                          f"--nproc-per-node={a.nproc}", "-m", "workbench.bench.plain_e2e"],
                "python -m workbench": [sys.executable, "-m", "workbench", f"output_root={d}", f"cluster.nproc={a.nproc}"]}
        meter = CpuMeter(f"workbench-overhead-{__import__('os').getpid()}")
        for i in range(a.repeats):
            order = list(cmds) if i % 2 == 0 else list(cmds)[::-1]
            for k in order:
                res[k].append(timed(cmds[k], meter))
            print(f"repeat {i + 1}/{a.repeats}: " + ", ".join(f"{k} {v[-1][0]:.2f} s wall, {v[-1][1]:.2f} s CPU"
                                                             for k, v in res.items()), file=sys.stderr)
        meter.close()
        runs = sorted(Path(d).glob("runs/*/*"))
        missing = [f for f in ("config.yaml", "env.json", "metrics.jsonl", "summary.json", "model.pt")
                   if not all((r / f).exists() for r in runs)]
        if len(runs) != a.repeats or missing:
            raise SystemExit(f"overhead: the default job's runs lack {missing or 'runs'}")
    base_w = statistics.median(w for w, _ in res["plain torchrun script"])
    base_c = statistics.median(c for _, c in res["plain torchrun script"])
    lines = ["| command | median wall (s) | range (s) | wall ratio | median CPU (s) | CPU ratio |", "|---|---|---|---|---|---|"]
    for k, v in res.items():
        w, c = statistics.median(x for x, _ in v), statistics.median(y for _, y in v)
        lines.append(f"| {k} | {w:.2f} | {min(x for x, _ in v):.2f}–{max(x for x, _ in v):.2f} | {w / base_w:.3f} | "
                     f"{c:.1f} | {c / base_c:.3f} |")
    header = (f"the default job end to end (small_cnn on digits, {a.nproc} CPU ranks, 20 epochs, final evaluation) "
              f"against a hand-written torchrun script, {a.repeats} interleaved repeats; CPU from the {meter.kind}")
    return header, "\n".join(lines)


def _env():
    import os
    return dict(os.environ)


def median_after(times: list, skip: int) -> float:
    return statistics.median(times[skip:])


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nproc", type=int, default=4)
    p.add_argument("--model", default="small_cnn")
    p.add_argument("--data", default="digits")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--skip", type=int, default=20)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--e2e", action="store_true", help="whole processes: the default job vs a hand-written torchrun script")
    p.add_argument("--write", action="store_true", help="update the overhead section of BENCHMARKS.md")
    p.add_argument("overrides", nargs="*")
    a = p.parse_args(argv)
    cmd = "python -m workbench.bench overhead " + " ".join(argv if argv is not None else sys.argv[1:])
    if a.e2e:
        header, table = end_to_end(a)
        print(header)
        print(table)
        if a.write:
            from workbench.bench.markdown import update_section
            update_section(ROOT / "BENCHMARKS.md", f"overhead: default job end to end x{a.nproc}",
                           f"Command: `{cmd.strip()}`\n\n{header}.\n\n{table}\n")
        return

    res = {"plain DDP script": [], "trainer=sync (metered hook)": [], "trainer=sync (trainer.metered=false)": []}
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        for i in range(a.repeats):
            res["plain DDP script"].append(median_after(run_plain(a, d / f"plain{i}.json"), a.skip))
            res["trainer=sync (metered hook)"].append(median_after(run_workbench(a, d, True), a.skip))
            res["trainer=sync (trainer.metered=false)"].append(median_after(run_workbench(a, d, False), a.skip))
            print(f"repeat {i + 1}/{a.repeats}: " + ", ".join(f"{k} {v[-1] * 1e3:.2f} ms" for k, v in res.items()),
                  file=sys.stderr)
    base = statistics.median(res["plain DDP script"])
    lines = ["| variant | median step time (ms) | per repeat (ms) | spread | ratio to plain DDP | ratio per repeat |",
             "|---|---|---|---|---|---|"]
    for k, v in res.items():
        med = statistics.median(v)
        # the repeats alternate, so repeat i of each variant ran under the same load: its own ratio
        per = [x / y for x, y in zip(v, res["plain DDP script"])]
        lines.append(f"| {k} | {med * 1e3:.2f} | {', '.join(f'{x * 1e3:.2f}' for x in v)} | "
                     f"{(max(v) - min(v)) / med:.0%} | {med / base:.3f} | {', '.join(f'{r:.3f}' for r in per)} |")
    header = (f"{a.model} on {a.data}, {a.nproc} CPU ranks (gloo), batch {a.batch_size} per rank, "
              f"{a.steps} steps x {a.repeats} repeats alternating, first {a.skip} steps dropped")
    table = "\n".join(lines)
    print(header)
    print(table)
    if a.write:
        from workbench.bench.markdown import update_section
        update_section(ROOT / "BENCHMARKS.md", f"overhead: {a.model}/{a.data} x{a.nproc}",
                       f"Command: `{cmd.strip()}`\n\n{header}.\n\n{table}\n")


if __name__ == "__main__":
    main()
