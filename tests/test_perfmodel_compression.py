"""The compression-utility model on hand-computed cases, and its calibration from a real run."""
import math

import pytest

from workbench.perfmodel.compression import (GBPS, Compression, Network, Workload, allgather_time, allreduce_time,
                                             calibrate, compression_of, compression_ratio, crossover_bandwidth,
                                             fit_collective, iteration_time, predict, speedup, utility)


def test_collective_formulas():
    # 4 workers, 100 MB at 1e9 B/s, α = 1 ms: 2·1ms·3 + 2·1e8·3/(4·1e9) = 6 ms + 150 ms
    assert allreduce_time(1e8, 4, 1e9, 1e-3) == pytest.approx(0.156)
    # all-gather of 1 MB each: 3·1ms + 3·1e6/1e9 = 6 ms
    assert allgather_time(1e6, 4, 1e9, 1e-3) == pytest.approx(0.006)
    assert allreduce_time(1e8, 1, 1e9, 1e-3) == allgather_time(1e8, 1, 1e9) == 0.0
    assert allreduce_time(1e6, 2, 1e9, 1e-3, messages=3) == pytest.approx(3 * 2e-3 + 1e-3)


def test_iteration_time_overlap_and_compression():
    work = Workload(backward_s=0.100, bucket_bytes=[25e6, 25e6, 10e6], workers=4, other_s=0.050, overlap=1.1)
    net = Network(bandwidth=1e9, latency=0.0)
    # communication: 2·60e6·3/(4e9) = 90 ms < λ·T_comp = 110 ms -> compute bound
    assert iteration_time(work, net) == pytest.approx(0.050 + 0.110)
    slow = Network(bandwidth=1e8)
    assert iteration_time(work, slow) == pytest.approx(0.050 + 0.900)  # network bound: 900 ms
    comp = Compression("x", "allreduce", payload_bytes=[1e6, 1e6, 0.4e6], encode_s=0.020, decode_s=0.010)
    # compressed comm 2·2.4e6·3/(4e8) = 36 ms, 4 % of sync's 900 ms, so backward keeps 4 % of its
    # 10 % slowdown: λ_c = 1.004; 50 + 100.4 + 30
    assert iteration_time(work, slow, comp) == pytest.approx(0.1804)
    assert speedup(work, slow, comp) == pytest.approx(0.950 / 0.1804)
    assert compression_ratio(work, comp) == pytest.approx(25)
    ag = Compression("y", "allgather", payload_bytes=[1e6, 1e6, 0.4e6], encode_s=0.0)
    # all-gather: 3·2.4e6/1e8 = 72 ms, 8 % of 900 ms: λ_c = 1.008
    assert iteration_time(work, slow, ag) == pytest.approx(0.050 + 0.1008)
    # a compressor that communicates as much as sync pays the whole λ
    same = Compression("z", "allreduce", payload_bytes=[25e6, 25e6, 10e6])
    assert iteration_time(work, net, same) == pytest.approx(iteration_time(work, net))
    assert iteration_time(work, Network(1e7), ag) == pytest.approx(0.050 + 0.720)


def test_crossover_is_where_the_times_meet():
    # Sync: T = max(0.1, 2·b·(p-1)/(p·BW)) with b = 100e6, p = 2 -> 1e8/BW; compressed adds 10 ms and
    # sends 1 %: T_c = max(0.1, 1e6/BW) + 0.01. They meet where 1e8/BW = 0.11: BW = 1e8/0.11.
    work = Workload(backward_s=0.1, bucket_bytes=[100e6], workers=2)
    comp = Compression("c", "allreduce", payload_bytes=[1e6], encode_s=0.01)
    x = crossover_bandwidth(work, Network(1e9), comp)
    assert x == pytest.approx(1e8 / 0.11, rel=1e-6)
    v = utility(work, Network(1e9), comp, bandwidth=x / 2)
    assert v.pays_off and v.speedup > 1 and v.crossover_bandwidth == pytest.approx(x)
    assert not utility(work, Network(1e9), comp, bandwidth=x * 2).pays_off
    # free compression pays until synchronous SGD's communication hides behind compute (1e8/BW = 0.1),
    # and ties above; with compute-free work it pays at every bandwidth
    assert crossover_bandwidth(work, Network(1e9), Compression("free", "allreduce", [1e6])) == pytest.approx(1e9, rel=1e-6)
    no_compute = Workload(backward_s=0.0, bucket_bytes=[100e6], workers=2)
    assert crossover_bandwidth(no_compute, Network(1e9), Compression("free", "allreduce", [1e6])) == math.inf
    # a payload larger than the gradient never pays
    assert crossover_bandwidth(work, Network(1e9), Compression("big", "allgather", [200e6], encode_s=0.01)) is None


def test_latency_makes_many_messages_cost():
    work = Workload(backward_s=0.0, bucket_bytes=[4e3], workers=8)
    net = Network(bandwidth=1e12, latency=1e-3)
    one = Compression("a", "allreduce", [1e3])
    three = Compression("b", "allreduce", [1e3], messages=[3])
    assert iteration_time(work, net, three) - iteration_time(work, net, one) == pytest.approx(2 * 2 * 7 * 1e-3, rel=1e-6)


def test_16_bit_all_reduce_pays_its_host_cost_per_byte():
    # fp16 halves 60 MB to 30 MB: 2·30e6·3/(4·1e9) = 45 ms on the wire, plus 1 ns/B of host summing
    # = 30 ms; a bucket whose all-reduce sums float32 (or that all-gathers) pays no extra
    work = Workload(backward_s=0.0, bucket_bytes=[40e6, 20e6], workers=4)
    net = Network(bandwidth=1e9, allreduce_extra={"float16": 1e-9})
    fp16 = Compression("fp16", "allreduce", payload_bytes=[20e6, 10e6], dtypes=["float16", "float16"])
    assert iteration_time(work, net, fp16) == pytest.approx(0.045 + 0.030)
    mixed = Compression("m", "allreduce", payload_bytes=[20e6, 10e6], dtypes=["float32", "float16"])
    assert iteration_time(work, net, mixed) == pytest.approx(0.045 + 0.010)
    assert iteration_time(work, net, Compression("g", "allgather", [20e6, 10e6], dtypes=["float16", None])) == \
        pytest.approx(3 * 30e6 / 1e9)
    # host work: at a tenth of the bandwidth the wire takes 10x longer, the summing as long as before
    assert iteration_time(work, net.at(1e8), fp16) == pytest.approx(0.450 + 0.030)


def test_hook_overlap_form_exposes_the_last_bucket_and_half_the_earlier_codec():
    # sync, 2 workers at 1e9 B/s: bucket exchanges 30 ms and 10 ms. Paper: max(100, 40) = 100 ms;
    # hook form: the last bucket's 10 ms come after backward's 100 ms
    work = Workload(backward_s=0.100, bucket_bytes=[30e6, 10e6], workers=2)
    net = Network(bandwidth=1e9)
    assert iteration_time(work, net) == pytest.approx(0.100)
    assert iteration_time(work, net, hook=True) == pytest.approx(0.110)
    # compressed to 1 MB a bucket (1 ms each), codec 40 ms and 20 ms: paper max(100, 2) + 60;
    # hook form: backward shares its cores with the first bucket's codec (+20 ms), then the last
    # bucket's codec and exchange (21 ms)
    comp = Compression("c", "allreduce", payload_bytes=[1e6, 1e6], encode_s=0.050, decode_s=0.010,
                       codec_s=[0.040, 0.020])
    assert iteration_time(work, net, comp) == pytest.approx(0.160)
    assert iteration_time(work, net, comp, hook=True) == pytest.approx(0.100 + 0.020 + 0.021)
    # communication-bound: the earlier buckets' exchanges outlast backward
    slow = Network(bandwidth=1e7)  # bucket exchanges 3 s and 1 s
    assert iteration_time(work, slow, hook=True) == pytest.approx(3.0 + 1.0)
    # λ for the hook form is its own (Workload.overlap_hook), else the paper form's
    lam = Workload(backward_s=0.100, bucket_bytes=[30e6, 10e6], workers=2, overlap=1.5, overlap_hook=1.2)
    assert iteration_time(lam, net) == pytest.approx(0.150)
    assert iteration_time(lam, net, hook=True) == pytest.approx(0.120 + 0.010)


def test_calibration_prices_16_bit_sums_beyond_float32s_line(tmp_path):
    """A float32 line through 4 KiB and 8 MiB, and a float16 all-reduce of 4 MiB that took 10 ms more
    than that line says: 10 ms / 4 MiB of extra host time per byte (no in-situ rescaling here: the
    buckets' own communication time matches the calibrated line)."""
    import json
    p, bw, lat = 2, 1e9, 1e-4
    colls = [{"collective": "allreduce", "dtype": "float32", "bytes": b, "seconds": allreduce_time(b, p, bw, lat)}
             for b in (4096, 8 * 2**20)]
    colls.append({"collective": "allreduce", "dtype": "float16", "bytes": 4 * 2**20,
                  "seconds": allreduce_time(4 * 2**20, p, bw, lat) + 0.010})
    bucket = {"dense_bytes": 1e6, "payload_bytes": 1e6, "comm_s": allreduce_time(1e6, p, bw, lat), "encode_s": 0.0,
              "decode_s": 0.0, "messages": 1.0}
    (tmp_path / "summary.json").write_text(json.dumps({"status": "completed", "compression": {
        "world": p, "buckets": [bucket], "profile_skip": 0, "collective": "allreduce", "compressor": {"name": "none"},
        "calibration": {"backward_compute_s": 0.01, "collectives": colls}}}))
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"kind": "train", "step": 1, "step_time": 0.02, "backward_ms": 10.0}))
    work, net = calibrate(tmp_path)
    assert net.bandwidth == pytest.approx(bw) and net.latency == pytest.approx(lat)
    assert net.allreduce_extra == {"float16": pytest.approx(0.010 / (4 * 2**20))}


def test_fit_collective_recovers_bandwidth_and_latency():
    p, bw, lat = 4, 2e9, 50e-6
    ar = [{"collective": "allreduce", "bytes": b, "seconds": allreduce_time(b, p, bw, lat)} for b in (4e3, 2.6e5, 2e6)]
    ag = [{"collective": "allgather", "bytes": b, "seconds": allgather_time(b, p, bw / 2, 2 * lat)} for b in (4e3, 2e6)]
    fbw, flat = fit_collective(ar + ag, "allreduce", p)
    assert fbw == pytest.approx(bw) and flat == pytest.approx(lat)
    fbw, flat = fit_collective(ar + ag, "allgather", p)
    assert fbw == pytest.approx(bw / 2) and flat == pytest.approx(2 * lat)


def test_calibration_from_real_runs(run_overrides):
    """Short real runs give a complete, self-consistent model (no claim on accuracy here: that is
    a benchmark, BENCHMARKS.md (compression section))."""
    from conftest import launch_run
    common = run_overrides + ["cluster.nproc=2", "trainer=compressed", "trainer.max_steps=5", "data.batch_size=8",
                              "trainer.eval_every=100"]
    base = launch_run(common + ["compressor=none", "trainer.calibrate_steps=2"])
    topk = launch_run(common + ["compressor=topk", "compressor.k=0.01"])
    work, net = calibrate(base.path)
    assert work.workers == 2 and work.backward_s > 0 and work.overlap >= 1 and len(work.bucket_bytes) >= 1
    assert net.bandwidth > 0 and net.latency >= 0
    comp = compression_of(topk.path)
    assert comp.collective == "allgather" and compression_ratio(work, comp) > 10
    rows = predict(base.path, [base.path, topk.path], [1.0])
    assert [r["compressor"] for r in rows] == ["none", "topk"]
    assert all(r["predicted_ms"] > 0 and r["measured_ms"] > 0 for r in rows)
    assert rows[0]["speedup@1Gbps"] == 1.0 and (rows[1]["crossover_gbps"] is None or rows[1]["crossover_gbps"] > 0)
