"""When does gradient compression pay? The iteration-time model of Agarwal et al. (MLSys'22;
docs/papers.md §4), extended to all-gather compressors, and its calibration from measured runs.

Synchronous SGD (DDP) overlaps the all-reduce of k buckets with the backward pass:

    T_iter = T_other + max[ λ·T_comp , Σ_i T_comm(b_i, p, BW) ]
    ring all-reduce:  T_comm(b, p, BW) = 2α(p−1) + 2·b·(p−1)/(p·BW)

with T_comp the backward compute time, λ ≥ 1 the overlap inefficiency, T_other what lies outside
the overlap window (forward, optimizer, data). With compression (our extension, as in docs/papers.md):
b is replaced by the compressed payload b_c, T_encode + T_decode are added outside the max, λ
shrinks with the communication left beside backward (:func:`iteration_time`), and
all-gather compressors cost ``T_comm = (p−1)α + (p−1)·b_c/BW``; a compressor needing m collectives
per bucket (PowerSGD: P, Q and the uncompressed tensors) pays m latencies.

Compression pays off at bandwidth BW when its T_iter is below synchronous SGD's; since
compression's extra cost (encode/decode) does not shrink with bandwidth while its saving does,
there is one crossover bandwidth below which it pays (:func:`crossover_bandwidth`).

Calibration (:func:`calibrate`): from a ``trainer=compressed compressor=none`` run with
``trainer.calibrate_steps > 0`` (T_comp from backward passes without communication, α and BW per
collective from timed all-reduces and all-gathers, bucket sizes, T_other, λ), plus, per compressor,
a run of it (payload bytes per bucket, collectives per bucket, encode/decode time).

    python -m workbench.perfmodel.compression <baseline run dir> <compressed run dir> ... [--gbps 1 10]

Units: bytes, seconds, bytes per second (1 Gbps = 1.25e8 B/s).
"""
from __future__ import annotations

import argparse
import math
import statistics
from dataclasses import dataclass, field, replace
from typing import Dict, List, Optional, Sequence

GBPS = 1.25e8  # bytes per second in one gigabit per second


# ---------------------------------------------------------------------------------------------
# Collective costs

# The formulas live in workbench/perfmodel/collectives.py (once for every model); re-exported here
# because calibration and the tests read them from this module.
from workbench.perfmodel.collectives import allgather_time, allreduce_time  # noqa: E402

COLLECTIVE_TIME = {"allreduce": allreduce_time, "allgather": allgather_time}


@dataclass(frozen=True)
class Network:
    """α and BW of each collective (they differ in practice: calibrate both)."""

    bandwidth: float  # bytes/s (all-reduce)
    latency: float = 0.0  # α: seconds per message (all-reduce)
    allgather_bandwidth: Optional[float] = None  # default: bandwidth
    allgather_latency: Optional[float] = None  # default: latency
    # Seconds per payload byte that an all-reduce of this dtype costs on top of float32's: gloo sums
    # 16-bit floats element by element on the host, so fp16 halves the bytes but not the time.
    # Host work, not the link's: it stays when the bandwidth changes (:meth:`at`).
    allreduce_extra: Dict[str, float] = field(default_factory=dict)

    def of(self, collective: str):
        if collective == "allgather":
            return (self.allgather_bandwidth or self.bandwidth,
                    self.latency if self.allgather_latency is None else self.allgather_latency)
        return self.bandwidth, self.latency

    def at(self, bandwidth: float) -> "Network":
        """The same network at another bandwidth (all collectives scaled alike)."""
        ratio = (self.allgather_bandwidth or self.bandwidth) / self.bandwidth
        return replace(self, bandwidth=bandwidth, allgather_bandwidth=bandwidth * ratio)


@dataclass(frozen=True)
class Workload:
    """One model on one cluster, what synchronous SGD sees."""

    backward_s: float  # T_comp: backward compute time without communication
    bucket_bytes: Sequence[float]  # dense bytes of each DDP bucket, in launch order
    workers: int  # p
    other_s: float = 0.0  # T_other: forward, optimizer, data loading (outside the overlap window)
    overlap: float = 1.0  # λ >= 1: how much slower backward runs while communicating
    overlap_hook: Optional[float] = None  # λ calibrated for the hook-overlap form (default: overlap)


@dataclass(frozen=True)
class Compression:
    """What a compressor changes: its payloads, collective and encode/decode time."""

    name: str
    collective: str  # allreduce | allgather
    payload_bytes: Sequence[float]  # per bucket, this worker's payload
    encode_s: float = 0.0  # per step, all buckets
    decode_s: float = 0.0
    messages: Sequence[float] = field(default_factory=tuple)  # collectives per bucket (default 1 each)
    dtypes: Sequence[Optional[str]] = field(default_factory=tuple)  # what each bucket's all-reduce sums
    codec_s: Sequence[float] = field(default_factory=tuple)  # encode + decode per bucket (default: the
    # totals shared out by payload)

    @property
    def ratio(self) -> float:
        return math.nan  # needs the dense sizes: see compression_ratio()


def compression_ratio(work: Workload, comp: Compression) -> float:
    total = sum(comp.payload_bytes)
    return sum(work.bucket_bytes) / total if total else math.inf


def comm_times(work: Workload, net: Network, comp: Optional[Compression] = None) -> List[float]:
    """T_comm of each bucket."""
    if comp is None:
        bw, lat = net.of("allreduce")
        return [allreduce_time(b, work.workers, bw, lat) for b in work.bucket_bytes]
    bw, lat = net.of(comp.collective)
    fn = COLLECTIVE_TIME[comp.collective]
    msgs = list(comp.messages) or [1.0] * len(comp.payload_bytes)
    times = [fn(b, work.workers, bw, lat, m) for b, m in zip(comp.payload_bytes, msgs)]
    if comp.collective == "allreduce" and work.workers > 1:
        dtypes = list(comp.dtypes) or [None] * len(times)
        times = [t + net.allreduce_extra.get(d, 0.0) * b for t, b, d in zip(times, comp.payload_bytes, dtypes)]
    return times


def _overlap(work: Workload, net: Network, comp: Optional[Compression], hook: bool = False) -> float:
    """λ − 1 is the backward pass's slowdown from the communication running beside it (copies and
    reductions on the same cores), calibrated with synchronous SGD's full gradients. A compressor
    leaves only its own communication beside backward, so it pays that slowdown in proportion:
    λ_c = 1 + (λ − 1)·min(1, Σ T_comm,c / Σ T_comm,sync). (Charging a 72×-compressed run the full λ
    over-predicted its step by up to 30 % on VGG-16, where λ = 3.4.)"""
    lam = work.overlap_hook if hook and work.overlap_hook is not None else work.overlap
    if comp is None:
        return lam
    comm, dense = sum(comm_times(work, net, comp)), sum(comm_times(work, net))
    return 1 + (lam - 1) * (min(1.0, comm / dense) if dense > 0 else 1.0)


def _codec_times(comp: Optional[Compression], n: int) -> List[float]:
    if comp is None:
        return [0.0] * n
    if comp.codec_s:
        return list(comp.codec_s)
    total, payload = comp.encode_s + comp.decode_s, sum(comp.payload_bytes)
    return [total * b / payload if payload else total / n for b in comp.payload_bytes]


# While a bucket's encode/decode runs on the hook's thread beside backward, the two threads share
# the rank's cores and each advances at about half speed: the codec time measured then (at shared
# speed) delays backward by about half of it. The last bucket's codec runs alone, after backward.
SHARED_CODEC = 0.5


def backward_phase(work: Workload, net: Network, comp: Optional[Compression] = None) -> float:
    """The hook-overlap form of the backward phase: from the start of backward until the last
    bucket is reduced and decoded.

    DDP hands each bucket to the communication hook as soon as its gradients are complete; our
    hook works through the buckets in order on its own thread. Every bucket but the last exchanges
    behind the rest of backward and shares the cores with it while it encodes and decodes; the last
    one, complete only when backward's compute ends, is exposed:

        T_bwd = max(λ'_c·T_comp + ½·Σ_{i<k} T_codec,i , Σ_{i<k} w_i) + w_k
        w_i = T_codec,i + T_comm,i,   T_codec = T_encode + T_decode

    (the earlier buckets are taken as ready at once: exact for the last bucket, optimistic for the
    others; λ' is calibrated for this form, ``Workload.overlap_hook``.)"""
    comm = comm_times(work, net, comp)
    lam = _overlap(work, net, comp, hook=True)
    if not comm:
        return lam * work.backward_s
    codec = _codec_times(comp, len(comm))
    w = [c + e for c, e in zip(comm, codec)]
    return max(lam * work.backward_s + SHARED_CODEC * sum(codec[:-1]), sum(w[:-1])) + w[-1]


def iteration_time(work: Workload, net: Network, comp: Optional[Compression] = None, hook: bool = False) -> float:
    """Agarwal et al.'s T_iter = T_other + max(λ_c·T_comp, Σ T_comm) (+ T_encode + T_decode with a
    compressor): all codec time exposed, the communication hidden behind backward up to its length.

    ``hook``: the hook-overlap form instead, T_other + :func:`backward_phase`, which credits our
    hook's encoding on its own thread beside backward and charges the last bucket's exchange. Which
    fits depends on the model and host: on loopback ResNet-18 (4 ranks, 2 cores) this form fits all
    nine compressors within 20 % and the paper's eight; on VGG-16 and on the emulated links the
    paper's form fits and this one under-predicts (BENCHMARKS.md, compression section)."""
    if hook:
        return work.other_s + backward_phase(work, net, comp)
    t = work.other_s + max(_overlap(work, net, comp) * work.backward_s, sum(comm_times(work, net, comp)))
    if comp is not None:
        t += comp.encode_s + comp.decode_s
    return t


def speedup(work: Workload, net: Network, comp: Compression) -> float:
    """Synchronous SGD's iteration time over the compressed one (> 1: compression pays)."""
    return iteration_time(work, net) / iteration_time(work, net, comp)


def crossover_bandwidth(work: Workload, net: Network, comp: Compression, lo: float = 1e3, hi: float = 1e13,
                        points: int = 400) -> Optional[float]:
    """The bandwidth (bytes/s; latencies as in ``net``) below which ``comp`` beats synchronous SGD
    and above which it does not. ``None`` if the verdict is the same over all of [lo, hi]:
    ``math.inf`` is returned instead when compression pays everywhere in that range."""
    gain = lambda bw: iteration_time(work, net.at(bw)) - iteration_time(work, net.at(bw), comp)  # noqa: E731
    grid = [lo * (hi / lo) ** (i / (points - 1)) for i in range(points)]
    signs = [gain(b) > 0 for b in grid]
    if all(signs):
        return math.inf
    if not any(signs):
        return None
    last = max(i for i, s in enumerate(signs) if s)  # the highest bandwidth where compression still pays
    if last == points - 1:
        return math.inf
    a, b = grid[last], grid[last + 1]
    for _ in range(100):
        mid = math.sqrt(a * b)
        if gain(mid) > 0:
            a = mid
        else:
            b = mid
    return math.sqrt(a * b)


@dataclass(frozen=True)
class Verdict:
    pays_off: bool
    speedup: float
    sync_s: float
    compressed_s: float
    crossover_bandwidth: Optional[float]  # bytes/s; compression pays below it


def utility(work: Workload, net: Network, comp: Compression, bandwidth: Optional[float] = None) -> Verdict:
    """Will ``comp`` pay off at ``bandwidth`` (default: the network's), and below which bandwidth does it?"""
    n = net.at(bandwidth) if bandwidth else net
    ts, tc = iteration_time(work, n), iteration_time(work, n, comp)
    return Verdict(tc < ts, ts / tc, ts, tc, crossover_bandwidth(work, net, comp))


# ---------------------------------------------------------------------------------------------
# Calibration from runs

def fit_collective(samples: Sequence[dict], collective: str, p: int):
    """(bandwidth, latency) from timed collectives ``[{collective, bytes, seconds}]``: the line
    seconds = A + B·bytes through the smallest and the largest message (robust to the noise of a
    shared machine in between), read through the collective's cost formula."""
    pts = sorted((s["bytes"], s["seconds"]) for s in samples
                 if s["collective"] == collective and s.get("dtype", "float32") == "float32")
    if not pts or p <= 1:
        return None
    (xs, ys), (xl, yl) = pts[0], pts[-1]
    b = (yl - ys) / (xl - xs) if xl > xs else 0.0
    a = ys - b * xs
    if b <= 0 or a < 0:  # no usable slope: charge everything to bandwidth
        a, b = 0.0, yl / xl
    if collective == "allreduce":
        return 2 * (p - 1) / (p * b), a / (2 * (p - 1))
    return (p - 1) / b, a / (p - 1)


def _median(values) -> float:
    v = [x for x in values if x is not None and not (isinstance(x, float) and math.isnan(x))]
    return statistics.median(v) if v else math.nan


def _steady_records(run, skip: int) -> List[dict]:
    return [r for r in run.records() if r.get("kind") == "train" and r["step"] > skip]


def measured_step_s(run) -> float:
    """Median step time over the steps after the run's profile_skip."""
    c = run.summary["compression"]
    return _median(r["step_time"] for r in _steady_records(run, c["profile_skip"]))


def calibrate(baseline_run, in_situ: bool = True) -> tuple:
    """(Workload, Network) from a ``compressor=none`` run with ``trainer.calibrate_steps > 0``.

    α and BW come from the timed collectives; with ``in_situ`` the all-reduce bandwidth is then
    re-read from the buckets' own communication time during training (which competes with backward
    for CPU and memory bandwidth, and is what the compressed runs will see). The all-gather keeps
    its timed bandwidth: scaled by the all-reduce's in-situ slowdown it came out at 0.04 Gbps on 4
    ranks and over-priced QSGD 2.3×. 16-bit all-reduces timed beside float32's give each 16-bit
    dtype its extra host seconds per byte over float32's timed line (``Network.allreduce_extra``)."""
    from workbench.runs import Run
    run = baseline_run if isinstance(baseline_run, Run) else Run(baseline_run)
    c = run.summary["compression"]
    cal = c.get("calibration")
    if not cal:
        raise ValueError(f"{run.path}: no calibration; rerun with trainer.calibrate_steps=3")
    p = c["world"]
    ar = fit_collective(cal["collectives"], "allreduce", p) or (math.inf, 0.0)
    ag = fit_collective(cal["collectives"], "allgather", p) or ar
    buckets = c["buckets"]
    ar_cal = ar
    if in_situ and p > 1 and buckets:
        wire = sum(2 * b["dense_bytes"] * (p - 1) / p for b in buckets)
        t = sum(b["comm_s"] for b in buckets) - len(buckets) * 2 * ar[1] * (p - 1)
        if t > 0 and wire > 0:
            ar = (wire / t, ar[1])
    extra = {}
    for smp in cal["collectives"]:  # 16-bit all-reduces: what they took beyond float32's line
        if smp["collective"] == "allreduce" and smp.get("dtype", "float32") != "float32" and p > 1:
            line = allreduce_time(smp["bytes"], p, ar_cal[0], ar_cal[1])
            extra[smp["dtype"]] = max(0.0, smp["seconds"] - line) / smp["bytes"]
    net = Network(bandwidth=ar[0], latency=ar[1], allgather_bandwidth=ag[0], allgather_latency=ag[1],
                  allreduce_extra=extra)
    recs = _steady_records(run, c["profile_skip"])
    step = _median(r["step_time"] for r in recs)
    backward = _median(r["backward_ms"] / 1e3 for r in recs)
    work = Workload(backward_s=cal["backward_compute_s"], bucket_bytes=[b["dense_bytes"] for b in buckets], workers=p,
                    other_s=0.0)
    comm = comm_times(work, net)
    # T_other is what the step spends outside max(λ·T_comp, ΣT_comm): step − backward while backward
    # outlasts the exchange, step − ΣT_comm when the exchange runs past it (a loaded machine's slower
    # collectives). Taking step − backward there counted the tail twice: the baseline then "predicted"
    # itself 15 % slow.
    work = replace(work, other_s=step - max(backward, sum(comm)))
    # λ: backward took longer than its compute alone, and more than the network explains; for the
    # hook-overlap form, longer than its compute and the last bucket's exchange (backward_phase
    # solved for λ)
    overlap = backward / work.backward_s if backward > sum(comm) and work.backward_s > 0 else 1.0
    exposed = backward - (comm[-1] if comm else 0.0)
    hook = exposed / work.backward_s if exposed > sum(comm[:-1]) and work.backward_s > 0 else 1.0
    return replace(work, overlap=max(1.0, overlap), overlap_hook=max(1.0, hook)), net


def compression_of(run) -> Compression:
    """The compressor's payloads, collectives and encode/decode time, measured in ``run``."""
    from workbench.runs import Run
    run = run if isinstance(run, Run) else Run(run)
    c = run.summary["compression"]
    bs = c["buckets"]
    return Compression(name=c["compressor"]["name"], collective=c["collective"],
                       payload_bytes=[b["payload_bytes"] for b in bs], messages=[b["messages"] for b in bs],
                       dtypes=[b.get("allreduce_dtype") for b in bs], codec_s=[b["encode_s"] + b["decode_s"] for b in bs],
                       encode_s=sum(b["encode_s"] for b in bs), decode_s=sum(b["decode_s"] for b in bs))


def predict(baseline_run, runs: Sequence, bandwidths_gbps: Sequence[float] = ()) -> List[dict]:
    """Per run: measured vs predicted iteration time on this network, ratio, crossover bandwidth
    and the predicted speed-up at each of ``bandwidths_gbps``."""
    from workbench.runs import Run
    work, net = calibrate(baseline_run)
    rows = []
    for r in runs:
        run = r if isinstance(r, Run) else Run(r)
        comp = compression_of(run)
        is_none = comp.name == "none"
        pred = iteration_time(work, net, None if is_none else comp)
        pred_hook = iteration_time(work, net, None if is_none else comp, hook=True)
        meas = measured_step_s(run)
        cross = None if is_none else crossover_bandwidth(work, net, comp)
        row = {"compressor": comp.name, "collective": comp.collective, "ratio": compression_ratio(work, comp),
               "encode_decode_ms": 1e3 * (comp.encode_s + comp.decode_s), "measured_ms": 1e3 * meas,
               "predicted_ms": 1e3 * pred, "error": pred / meas - 1 if meas else math.nan,
               "predicted_hook_ms": 1e3 * pred_hook, "error_hook": pred_hook / meas - 1 if meas else math.nan,
               "crossover_gbps": None if cross is None else cross / GBPS}
        for g in bandwidths_gbps:
            row[f"speedup@{g:g}Gbps"] = 1.0 if is_none else speedup(work, net.at(g * GBPS), comp)
        rows.append(row)
    return rows


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m workbench.perfmodel.compression", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("baseline", help="run dir of trainer=compressed compressor=none trainer.calibrate_steps>0")
    ap.add_argument("runs", nargs="+", help="run dirs of compressed runs (same model, data, nproc)")
    ap.add_argument("--gbps", type=float, nargs="*", default=[1.0, 10.0], help="bandwidths to predict speed-ups at")
    args = ap.parse_args(argv)
    work, net = calibrate(args.baseline)
    print(f"calibrated: T_comp {1e3 * work.backward_s:.1f} ms, T_other {1e3 * work.other_s:.1f} ms, λ {work.overlap:.2f}, "
          f"{len(work.bucket_bytes)} buckets ({sum(work.bucket_bytes) / 2**20:.2f} MiB), p {work.workers}; "
          f"all-reduce {net.bandwidth / GBPS:.2f} Gbps α {1e6 * net.latency:.0f} µs; "
          f"all-gather {net.of('allgather')[0] / GBPS:.2f} Gbps α {1e6 * net.of('allgather')[1]:.0f} µs")
    for row in predict(args.baseline, args.runs, args.gbps):
        print("  ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()))


if __name__ == "__main__":
    main()
