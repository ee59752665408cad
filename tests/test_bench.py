"""The benchmark suites' CI smoke versions (``--tiny``): each runs end to end, writes its CSV,
Markdown and HTML report, and its byte counts equal the analytic ones. Timings are never asserted."""
import csv
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _suite(tmp_path, *args):
    p = subprocess.run([sys.executable, "-m", "workbench.bench", *args, "--tiny", f"--out={tmp_path}"], cwd=ROOT,
                       capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stdout


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_bytes_suite_measures_the_analytic_counts(tmp_path):
    out = _suite(tmp_path, "bytes")
    rows = list(csv.DictReader(open(tmp_path / "bytes-2w" / "bytes_N2.csv")))
    assert [r["run"].split(" ")[0] for r in rows] == ["sync", "ps", "stanza", "compressed:", "compressed:", "compressed:"]
    for r in rows:
        assert r["status"] == "completed", r
        assert int(r["sent_B"]) == int(r["analytic_sent_B"]), r  # exact, to the byte
    assert (tmp_path / "bytes-2w" / "report.html").read_text().count("plotly") > 0
    assert "| small_cnn |" in out


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_staleness_suite_reports_time_to_target_and_staleness(tmp_path):
    _suite(tmp_path, "staleness")
    rows = list(csv.DictReader(open(tmp_path / "staleness-2w" / "time_lambda2.csv")))
    assert len(rows) == 6 and {r["straggler"] for r in rows} == {"none", "rank 1 +0.05s/step"}
    assert all(r["status"] == "completed" for r in rows)
    hard = [r for r in rows if r["protocol"].startswith("hardsync")]
    assert all(float(r["mean_tau"]) == 0 and float(r["max_tau"]) == 0 for r in hard)  # hardsync: never stale
    assert (tmp_path / "staleness-2w" / "report.md").exists()


def test_unknown_suite_is_a_clear_error():
    p = subprocess.run([sys.executable, "-m", "workbench.bench", "latency"], cwd=ROOT, capture_output=True, text=True)
    assert p.returncode == 2 and "latency" in p.stderr and "bytes" in p.stderr


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_stanza_suite_predicts_every_allocation(tmp_path):
    _suite(tmp_path, "stanza")
    rows = list(csv.DictReader(open(tmp_path / "stanza-small_cnn-3p" / "sweep_small_cnn_3.csv")))
    assert [r["allocation"] for r in rows] == ["2 CONV + 1 FC", "1 CONV + 2 FC", "sync x3 (data parallel)"]
    assert all(r["status"] == "completed" and float(r["predicted"]) > 0 and float(r["measured"]) > 0 for r in rows)


@pytest.mark.slow
@pytest.mark.root
@pytest.mark.timeout(900)
def test_bandwidth_suite_sweeps_emulated_links(tmp_path):
    from workbench.network.emulated import namespaces
    others = [n for n in namespaces() if n.startswith("wb")]  # another sweep's, on a shared machine
    out = _suite(tmp_path, "bandwidth")
    d = tmp_path / "bandwidth-small_cnn-2w"
    rows = list(csv.DictReader(open(d / "sweep_N2.csv")))
    kinds = ("sync", "powersgd")  # --tiny: the crossover's pair (ps and stanza run emulated in the planner's verify test)
    assert [(r["bandwidth"], r["run"].split(" ")[-1 if r["run"].startswith("compressed") else 0]) for r in rows] == [
        (bw, k) for bw in ("5mbit", "100mbit") for k in kinds]
    for r in rows:
        r["kind"] = r["run"].split(" ")[-1 if r["run"].startswith("compressed") else 0]
    assert all(r["status"] == "completed" and float(r["samples/s"]) > 0 for r in rows), rows
    # the link probe ran at every rate and achieved about the configured rate, no more
    assert all(0.5 <= int(r["link"].rstrip("%")) / 100 <= 1.15 for r in rows), rows
    slow = {r["kind"]: float(r["samples/s"]) for r in rows if r["bandwidth"] == "5mbit"}
    fast = {r["kind"]: float(r["samples/s"]) for r in rows if r["bandwidth"] == "100mbit"}
    # not a timing target: at 5 Mbit/s one step's gradients take ~1 s on the wire, at 100 Mbit/s ~0.05 s
    assert fast["sync"] > slow["sync"]
    assert all(float(r["predicted samples/s"]) > 0 for r in rows)  # the planner's model predicts every run
    assert json.loads((d / "index.json").read_text())["profile"] == str(d / "profile.json")  # measured before the runs
    cross = list(csv.DictReader(open(d / "crossover_N2.csv")))
    assert [c["compressor"] for c in cross] == ["powersgd"] and cross[0]["predicted crossover"]
    assert cross[0]["predicted, read at the sweep's rates"]
    winners = list(csv.DictReader(open(d / "winners_N2.csv")))
    assert len(winners) == 2 and all(w["powersgd / sync"] for w in winners), winners
    assert "plotly" in (d / "report.html").read_text() and "| small_cnn | 5mbit |" in out
    left = [n for n in namespaces() if n.startswith("wb")]
    mine = {n for f in (d / "runs").rglob("network.json") for n in json.loads(f.read_text())["namespaces"]}
    assert mine and not set(left) & mine, left  # every run cleaned up its namespaces
    assert others or left == [], left  # and every link probe, unless another sweep shares the machine
    before, runs = (d / "sweep_N2.csv").read_text(), sorted((d / "runs").rglob("summary.json"))
    again = _suite(tmp_path, "bandwidth", "--from-runs")  # no new runs: the tables rebuilt from the model's index
    assert (d / "sweep_N2.csv").read_text() == before and "| small_cnn | 5mbit |" in again
    resumed = _suite(tmp_path, "bandwidth", "--resume")  # every run is complete: nothing runs again
    assert sorted((d / "runs").rglob("summary.json")) == runs and (d / "sweep_N2.csv").read_text() == before
    assert f"resume small_cnn: {len(runs)} completed runs kept" in resumed
    # a run lost before its summary runs again, and every kept run after it stays in the index
    first = json.loads((d / "index.json").read_text())["runs"][0]
    (Path(first["run_dir"]) / "summary.json").unlink()
    _suite(tmp_path, "bandwidth", "--resume")
    after = json.loads((d / "index.json").read_text())["runs"]
    assert len(after) == len(runs) and after[0]["run_dir"] != first["run_dir"], after
    # a sweep from before the sweeps took profiles: the rebuild profiles now, says so, and records it
    index = json.loads((d / "index.json").read_text())
    (d / "index.json").write_text(json.dumps({**index, "profile": None}))
    (d / "profile.json").unlink()
    rebuilt = _suite(tmp_path, "bandwidth", "--from-runs")
    assert json.loads((d / "index.json").read_text())["profile"] == str(d / "profile.json") and (d / "profile.json").exists()
    assert "profile measured with the rebuild" in (d / "report.md").read_text() and "| small_cnn | 5mbit |" in rebuilt


def _refusal(tmp_path, *args):
    p = subprocess.run([sys.executable, "-m", "workbench.bench", "bandwidth", *args, f"--out={tmp_path}"], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    lines = p.stderr.strip().splitlines()
    assert p.returncode != 0 and len(lines) == 1 and lines[0].startswith("error: "), p.stderr
    return lines[0]


def test_bandwidth_suite_refuses_to_rebuild_or_resume_what_it_cannot(tmp_path, capsys):
    assert "no sweep of vgg16 at N=3" in _refusal(tmp_path, "--from-runs", "--models", "vgg16")
    # a sweep taken with other settings is not continued: its rows would not be the same experiment
    d = tmp_path / "bandwidth-vgg16-3w"
    d.mkdir()
    (d / "index.json").write_text(json.dumps({"settings": {"steps": 9}, "probes": {}, "runs": []}))
    assert "other settings" in _refusal(tmp_path, "--resume", "--models", "vgg16")
    # more rates add to a sweep; fewer would leave its measured rows out
    swept = {"rates": ["500mbit", "2gbit"], "workers": 3, "batch": 16, "steps": 5, "compressors": ["powersgd"]}
    (d / "index.json").write_text(json.dumps({"settings": swept, "probes": {}, "runs": []}))
    assert "other settings" in _refusal(tmp_path, "--resume", "--models", "vgg16", "--compressors", "powersgd",
                                        "--bandwidths", "500mbit")
    from workbench.bench.bandwidth import kept_runs
    more = {"vgg16": {**swept, "rates": ["500mbit", "2gbit", "4gbit"]}}
    probes, profiles = {}, {}
    assert kept_runs(more, lambda m: d, more, probes, profiles) == {} and profiles == {"vgg16": None}
    assert "adds the rates 4gbit to its sweep of 500mbit, 2gbit" in capsys.readouterr().out
    # a profile of another model predicts nothing of this one's; one profile is not two models'
    from perfmodel_fixtures import synthetic_profile
    synthetic_profile().save(tmp_path / "other.json")
    assert "measured for model=m, not vgg16" in _refusal(tmp_path, "--from-runs", "--models", "vgg16", "--profile",
                                                             str(tmp_path / "other.json"))
    assert "one model's profile" in _refusal(tmp_path, "--models", "vgg16,resnet18", "--profile", str(tmp_path / "other.json"))


def test_bandwidth_suite_predicts_every_run_and_reads_crossovers_as_measured():
    """The sweep's predictions are the planner's model on the emulated links (a synthetic profile,
    no runs), and a crossover is read from the model's speed-ups at the sweep's rates the way the
    measured one is: log-linearly between the two rates it falls between."""
    from perfmodel_fixtures import synthetic_profile
    from workbench.bench import bandwidth as bw
    from workbench.plan import emulated_crossover_bps
    prof = synthetic_profile(ranks=3)
    pred = bw.predictions("small_cnn", ["5mbit", "100mbit"], prof, 3, 16, ["powersgd"])
    assert set(pred["samples"]) == {(r, k) for r in ("5mbit", "100mbit") for k in ("sync", "ps", "stanza", "powersgd")}
    assert pred["samples"][("5mbit", "sync")] < pred["samples"][("100mbit", "sync")]
    assert pred["samples"][("5mbit", "ps")] < pred["samples"][("100mbit", "ps")]
    assert pred["ratio"]["5mbit"] > pred["ratio"]["100mbit"] > 0
    assert pred["crossover"]["powersgd"] == emulated_crossover_bps(bw.planner_cfg("small_cnn", 3, 16), prof, 3, "powersgd")

    def rows(c_100m, c_1g):
        return [{"model": "m", "bandwidth": b, "run": k, "kind": k, "samples/s": v} for b, k, v in
                [("100mbit", "sync", 10.0), ("100mbit", "c", c_100m), ("1gbit", "sync", 10.0), ("1gbit", "c", c_1g)]]
    model = {"samples": {("100mbit", "sync"): 10.0, ("100mbit", "c"): 40.0, ("1gbit", "sync"): 10.0, ("1gbit", "c"): 2.5},
             "crossover": {"c": 5e8}}
    tables = bw.model_tables("m", ["100mbit", "1gbit"], rows(20.0, 5.0), 2, 16, 5, 2, model, ["c"],
                             [rows(20.0, 5.0), rows(20.0, 12.0)])
    cross = tables[2].rows[0]
    # measured 2.0 -> 0.5: 1 is crossed 2/3 of the way, 10^(2/3) x 100 Mbit/s; the model's 4.0 -> 0.25: 0.8 of it
    assert cross["measured crossover"] == "464 Mbit/s" and cross["predicted crossover"] == "500 Mbit/s"
    assert cross["predicted / measured"] == "1.08"
    assert cross["predicted, read at the sweep's rates"] == "631 Mbit/s" and cross["read / measured"] == "1.36"
    assert cross["measured, per round"] == "464 Mbit/s; above the sweep"  # the second round never crossed
    assert [r["predicted samples/s"] for r in tables[0].rows] == [10.0, 40.0, 10.0, 2.5]
    runs = [{"run_dir": f"/x/runs/{d}/{t}_sync_m"} for d, t in [("2026-12-01", "22-01-20"), ("2026-12-01", "23-10-00")]]
    assert bw.runs_span(runs) == "2026-12-01 22:01–23:10 UTC"
    assert bw.runs_span(runs + [{"run_dir": "/x/runs/2026-12-02/01-59-03_sync_m"}]) == "2026-12-01 22:01– 2026-12-02 01:59 UTC"
    # the notes count from the tables: errors 0, +100 %, 0, −50 %; the crossover 1.08 and 1.36
    assert bw.accuracy(tables) == ("The planner's model against the 4 measured rows: samples/s |error| median 25.0 %, "
                                   "90th percentile 100.0 %, 2 of 4 within 20 %. Crossovers located by the sweep: 1 of 1; "
                                   "within 20 % of the measured one: 1 as predicted, 0 read at the sweep's rates.")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_compression_suite_predicts_every_compressor(tmp_path):
    out = _suite(tmp_path, "compression", "--repeats", "2")
    d = tmp_path / "compression-small_cnn-2p"
    rows = {r["compressor"]: r for r in csv.DictReader(open(d / "compression_small_cnn_2.csv"))}
    assert list(rows) == ["none", "fp16", "topk", "powersgd"]
    assert all(r["status"] == "completed" and float(r["predicted ms"]) > 0 and r["error"].endswith("%")
               and r["spread"].endswith("%") for r in rows.values()), rows
    index = json.loads((d / "index.json").read_text())
    assert all(len(v) == 2 for v in index["runs"].values())  # 2 rounds each, each after its own profile
    assert index["profiles"] == [str(d / f"profile-r{k}.json") for k in (1, 2)]
    from workbench.perfmodel.profile import Profile
    prof = Profile.load(index["profiles"][0])  # the planner's profile, with the suite's own compressor settings
    assert set(prof.codecs) == set(rows) and {f"compressed/{c}" for c in rows} <= set(prof.loops)
    assert float(rows["none"]["ratio"]) == 1 and float(rows["fp16"]["ratio"]) == 2  # exact: half the bytes
    assert float(rows["none"]["vs none"]) == 1 and rows["none"]["crossover Gbps"] == ""
    assert rows["topk"]["crossover Gbps"] not in ("", None)
    assert "The model is the planner's" in out
    assert (d / "report.html").read_text().count("plotly") > 0
    # --from-runs rebuilds the same table from the index, without new runs
    again = _suite(tmp_path, "compression", "--from-runs")
    assert [ln for ln in again.splitlines() if ln.startswith("| fp16")] == [ln for ln in out.splitlines() if ln.startswith("| fp16")]


def test_planner_suite_compares_each_rounds_crossover_with_its_own_profile():
    """Rounds measured on other days or machines each carry their profile: a crossover's ratio is
    the median of the rounds' own ratios, each round's measured crossover against its profile's."""
    import statistics

    from perfmodel_fixtures import synthetic_profile
    from workbench.bench import bandwidth as bw
    from workbench.bench.planner import crossovers
    from workbench.plan import emulated_crossover_bps
    cfg = bw.planner_cfg("small_cnn", 3, 16)
    profs = [synthetic_profile(ranks=3), synthetic_profile(ranks=3, t_c=3e-3)]  # a slower host in round 2

    def rnd(prof, comp_lo, comp_hi):  # sync 10 ms at both rates; the compressor's steps
        return [{"paradigm": k, "bandwidth": b, "measured_step_s": v, "_profile": prof} for k, b, v in
                [("sync", "emulated:100mbit", 0.010), ("sync", "emulated:1gbit", 0.010),
                 ("compressed/powersgd", "emulated:100mbit", comp_lo), ("compressed/powersgd", "emulated:1gbit", comp_hi)]]
    rounds = [rnd(profs[0], 0.005, 0.020), rnd(profs[1], 0.004, 0.016)]
    (row,) = crossovers({"small_cnn": rounds}, {"small_cnn": cfg}, 3)
    measured = [bw.crossing([(1e8, 2.0), (1e9, 0.5)]), bw.crossing([(1e8, 2.5), (1e9, 0.625)])]
    predicted = [emulated_crossover_bps(cfg, p, 3, "powersgd") for p in profs]
    assert row["predicted / measured"] == f"{statistics.median(p / m for p, m in zip(predicted, measured)):.2f}"
    assert row["rounds"] == "2/2" and row["speed-up vs sync, lowest → highest rate"] == "2.25 → 0.56"
    assert row["measured crossover"] == bw.rate_range(measured)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_planner_suite_resumes_and_predicts_kept_rounds_again(tmp_path):
    """Each (round, bandwidth) is stored with its profile once measured; ``--resume`` runs only what
    is missing and scores the kept measurements with the model as it is now."""
    def runs():
        return sorted((tmp_path / "planner" / "runs").rglob("summary.json"))

    def table():
        return {r["paradigm"]: r for r in csv.DictReader(open(tmp_path / "planner-small_cnn" / "planner_N2.csv"))}

    def drift_text(units):  # the table's drift column: the rounds' (before + after) / 2 over the reference
        ratios = []
        for u in units:
            drift = json.loads(u.read_text())["drift"]
            assert set(drift) == {"reference_s", "before_s", "after_s"} and all(v > 0 for v in drift.values())
            ratios.append((drift["before_s"] + drift["after_s"]) / 2 / drift["reference_s"])
        lo, hi = f"{min(ratios):.2f}", f"{max(ratios):.2f}"
        return lo if lo == hi else f"{lo}–{hi}"
    _suite(tmp_path, "planner", "--repeats", "1", "--resume")
    first, measured = runs(), table()
    assert len(first) == 3 and set(measured) == {"sync", "ps/sync", "ps/async"}  # 1 round x 3 paradigms
    units = sorted((tmp_path / "planner" / "rounds").glob("*.json"))
    assert [u.name for u in units] == ["small_cnn-N2-b16-loopback-r1-sync_ps.json"]
    # the drift guard: the host's span right after the profile, before and after the unit's runs
    assert {r["drift"] for r in measured.values()} == {drift_text(units)}
    out = _suite(tmp_path, "planner", "--repeats", "1", "--resume")  # nothing missing: nothing runs
    assert runs() == first and "1 of 1 (round, bandwidth) measurements were kept" in out
    assert "Drift guard (column 'drift'): the lockstep span of every rank in a fresh launch" in out
    assert {k: r["measured ms"] for k, r in table().items()} == {k: r["measured ms"] for k, r in measured.items()}
    # the round kept elsewhere (experiments/planner-rounds is the directory git keeps) and not here:
    # round 1 is read from there, round 2 runs; a sitting with a time limit measures whole rounds,
    # then stops and says what is missing (round 3)
    store = tmp_path / "kept"
    store.mkdir()
    shutil.move(str(units[0]), store / units[0].name)
    out = _suite(tmp_path, "planner", "--repeats", "3", "--resume", "--rounds", str(store), "--stop-after", "0.001")
    assert len(runs()) == len(first) + 3, runs()
    assert "Incomplete: 1 of 3 (round, bandwidth) measurements" in out and "1 of 3 (round, bandwidth) measurements were kept" in out
    kept = sorted(store.glob("*.json"))
    assert [u.name for u in kept] == [f"small_cnn-N2-b16-loopback-r{k}-sync_ps.json" for k in (1, 2)]
    assert set(table()) == set(measured) and {r["drift"] for r in table().values()} == {drift_text(kept)}
    out = _suite(tmp_path, "planner", "--repeats", "3", "--resume", "--rounds", str(store), "--stop-after", "0")
    assert len(runs()) == len(first) + 3 and "Incomplete: 1 of 3" in out and "2 of 3 (round, bandwidth) measurements were kept" in out


def test_the_crossover_suite_tests_a_prediction_at_20_percent_either_side():
    """A crossover predicted at c is tested at c/1.2 and c·1.2, rounded inwards (so a crossing
    between them is within 20 % of c); each round has its own prediction; the verdict is the
    medians', with the rounds that agree, and the rounds' own crossings against their predictions."""
    from workbench.bench.bandwidth import crossing
    from workbench.bench.crossover import brackets, scored, verdict
    assert brackets(1e9) == ("emulated:834mbit", "emulated:1200mbit")  # 833.3 up, 1200 down
    assert brackets(5e8) == ("emulated:417mbit", "emulated:600mbit")
    assert verdict([1.1, 0.95, 1.2], [0.9, 0.8, 1.05]) == ("within 20 %", 1)  # rounds: within, lower, higher
    assert verdict([0.9], [0.8]) == ("lower", 1) and verdict([1.3], [1.1]) == ("higher", 1)
    assert verdict([0.9, 0.95], [1.1, 1.2]) == ("inverted", 2)

    def rnd(c, sync_lo, sync_hi, upper=True):  # the compressor's step 10 ms at both rates
        lo, hi = brackets(c)
        pair = {"lower": {"rate": lo, "sync_s": sync_lo, "compressor_s": 0.010}}
        if upper:
            pair["upper"] = {"rate": hi, "sync_s": sync_hi, "compressor_s": 0.010}
        return {"c": c, "predicted": [1.1, 0.9], "pair": pair}
    # round 3 lacks its upper rate: it does not count; round 2 predicted 800 Mbit/s
    row = scored([rnd(1e9, 0.012, 0.009), rnd(8e8, 0.011, 0.0096), rnd(1e9, 0.020, None, upper=False)])
    assert row["rounds"] == "2 of 3" and row["verdict"] == "within 20 %" and row["rounds agreeing"] == "2/2"
    assert row["measured speed-up there"] == "1.15 → 0.93" and row["predicted speed-up there"] == "1.10 → 0.90"
    assert row["spread (min–max)"] == "1.10–1.20 → 0.90–0.96"
    assert row["predicted crossover"] == "800 Mbit/s – 1 Gbit/s"
    assert row["rates tested (Mbit/s)"] == "834–1200; 667–960"
    r1, r2 = crossing([(834e6, 1.2), (1200e6, 0.9)]) / 1e9, crossing([(667e6, 1.1), (960e6, 0.96)]) / 8e8
    assert row["measured / predicted"] == f"{(r1 + r2) / 2:.2f}"
    assert scored([{"c": 1e9, "predicted": [1.1, 0.9], "pair": {}}])["verdict"] == "not measured"
    low = scored([rnd(1e9, 0.009, 0.009)])
    assert low["verdict"] == "lower" and low["measured / predicted"] == "< 0.83" and low["rounds"] == 1
    assert scored([{"c": float("inf")}, {"c": float("inf")}])["verdict"] == "not tested: pays at every rate"


@pytest.mark.slow
@pytest.mark.root
@pytest.mark.timeout(900)
def test_the_crossover_suite_runs_interleaved_pairs_at_the_predicted_crossover(tmp_path):
    """From a stored round (a synthetic profile, so the prediction and its two rates are known) the
    suite runs sync and PowerSGD behind links of c/1.2 and c·1.2, stores each pair, and scores them;
    run again with --resume it runs nothing."""
    from perfmodel_fixtures import synthetic_profile
    from workbench.runs import store as runstore
    from workbench.bench import bandwidth as bw
    from workbench.bench.crossover import brackets
    from workbench.plan import emulated_crossover_bps
    prof = synthetic_profile(ranks=2)
    c = emulated_crossover_bps(bw.planner_cfg("small_cnn", 2, 16), prof, 2, "powersgd")
    store = tmp_path / "rounds"
    store.mkdir()
    runstore.write_json(store / "small_cnn-N2-b16.json", {"rounds": {"1": {"profile": prof.to_json(), "pairs": {}}}})
    args = ["crossover", "--only", "powersgd", "--resume", "--rounds", str(store)]
    out = _suite(tmp_path, *args)
    pair = runstore.read_json(store / "small_cnn-N2-b16.json")["rounds"]["1"]["pairs"]["powersgd"]
    assert [pair[s]["rate"] for s in ("lower", "upper")] == list(brackets(c))
    assert all(p["sync_s"] > 0 and p["compressor_s"] > 0 for p in pair.values())
    runs = sorted((tmp_path / "crossover" / "runs").rglob("summary.json"))
    assert len(runs) == 4
    (row,) = csv.DictReader(open(tmp_path / "crossover-small_cnn-2ranks" / "crossover_N2.csv"))  # a section per rank count
    assert row["compressor"] == "powersgd" and row["rounds"] == "1"
    assert row["verdict"] in ("within 20 %", "lower", "higher", "inverted") and row["rounds agreeing"] == "1/1"
    assert "tested crossovers lie within 20 % of the prediction" in out
    _suite(tmp_path, *args, "--host", "box-2")  # runs nothing; another machine's rounds score to a section of their own
    assert len(sorted((tmp_path / "crossover" / "runs").rglob("summary.json"))) == 4
    (again,) = csv.DictReader(open(tmp_path / "crossover-small_cnn-2ranks-on-box-2" / "crossover_N2.csv"))
    assert again == row


@pytest.mark.parametrize("args, says", [
    (["--only", "nope"], "unknown compressor 'nope' for --only; choose from"),
    (["--range", "5gbit,1gbit"], "invalid value '5gbit,1gbit' for --range"),
    (["--range", "fast,1gbit"], "invalid value 'fast' for --range"),
    (["--models", "nope"], "unknown model 'nope' for --models"),
    (["--workers", "1"], "invalid value 1 for --workers"),
    (["--host", "my host"], "invalid value 'my host' for --host"),
])
def test_the_crossover_suite_refuses_bad_input_in_one_line(args, says, tmp_path):
    p = subprocess.run([sys.executable, "-m", "workbench.bench", "crossover", *args, f"--out={tmp_path}"], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and says in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert not (tmp_path / "crossover").exists()  # nothing profiled or run


def test_the_planner_suite_refuses_a_bad_host_and_rounds_pinned_the_other_way(tmp_path):
    """--host names a section and a directory; --pin against a stored (round, bandwidth) profiled
    unpinned (the committed AMD rounds): one line, exit 2, before anything is profiled or run."""
    rounds = tmp_path / "rounds"
    rounds.mkdir()
    shutil.copy(ROOT / "experiments/planner-rounds/small_cnn-N3-b16-loopback-r1.json", rounds)
    for args, says in [(["--host", "my host"], "invalid value 'my host' for --host"),
                       (["--models", "small_cnn", "--resume", "--rounds", str(rounds), "--pin"],
                        f"invalid value True for --pin: {rounds} holds small_cnn-N3-b16-loopback-r1.json taken unpinned")]:
        p = subprocess.run([sys.executable, "-m", "workbench.bench", "planner", *args, f"--out={tmp_path}"], cwd=ROOT,
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 2 and says in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
        assert not (tmp_path / "planner").exists()  # nothing profiled or run


def test_the_crossover_suite_scores_a_pair_only_against_the_prediction_it_was_measured_for():
    from workbench.bench.crossover import scored
    assert scored([{"c": 1e9, "stale": True}])["verdict"] == "not scored: measured for another prediction"


def test_a_stored_round_without_a_compressors_codec_is_refused_in_one_line(tmp_path):
    """Resuming rounds profiled for other compressors (--only) once ended, rounds later, in a
    KeyError from the model; now one ConfigError before anything runs names the round and the way out."""
    from workbench.bench.crossover import check_stored_codecs
    from workbench.core import ConfigError
    unit = {"rounds": {"1": {"profile": {"codecs": {"signsgd": {}, "topk": {}}}, "pairs": {}}}}
    check_stored_codecs(unit, ["topk"], tmp_path / "r.json")
    with pytest.raises(ConfigError) as e:
        check_stored_codecs(unit, ["topk", "qsgd"], tmp_path / "r.json")
    assert "'qsgd' for --only: round 1" in str(e.value) and "signsgd, topk" in str(e.value)
    assert "another --rounds" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(ConfigError, match="for --only: round 1"):
        check_stored_codecs(unit, [], tmp_path / "r.json")  # every registered compressor


def test_rounds_stored_pinned_the_other_way_are_refused_in_one_line(tmp_path):
    """--pin against rounds whose profiles were taken unpinned (the committed version-12 ones), and
    the reverse: one line, exit 2, nothing profiled or run."""
    from workbench.bench.crossover import check_stored_pinning
    from workbench.core import ConfigError
    unit = {"rounds": {"2": {"profile": {"machine": {"pinned": True}}}, "10": {"profile": {"machine": {}}}}}
    with pytest.raises(ConfigError, match=r"for --pin: .* holds rounds 10 taken unpinned"):
        check_stored_pinning(unit, True, tmp_path / "r.json")
    with pytest.raises(ConfigError, match="holds rounds 2 taken pinned"):
        check_stored_pinning(unit, False, tmp_path / "r.json")
    rounds = tmp_path / "rounds"
    rounds.mkdir()
    shutil.copy(ROOT / "experiments/crossover-rounds/xeon-host-v12/small_cnn-N2-b16.json", rounds)
    p = subprocess.run([sys.executable, "-m", "workbench.bench", "crossover", "--models", "small_cnn", "--workers", "2",
                        "--pin", "--resume", f"--rounds={rounds}", f"--out={tmp_path / 'out'}"], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "invalid value True for --pin" in p.stderr, p.stderr
    assert "holds rounds 1, 2, 3, 4, 5 taken unpinned" in p.stderr and len(p.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out" / "crossover").exists()  # nothing profiled or run


def test_the_crossover_suite_reads_each_stored_run_against_the_model():
    """--errors: every stored run (both sides of each pair, sync and the compressor) with its
    measured step as stored and the model's prediction from its round's profile; sync behind a
    slower link is predicted slower. Read from a committed sitting (16-core host)."""
    import json

    from workbench.bench.crossover import run_errors
    path = ROOT / "experiments/crossover-rounds/h200-host/sitting1-small_cnn-N3-b16.json"
    pairs = json.loads(path.read_text())["rounds"]["1"]["pairs"]
    rows = run_errors(path)
    assert len(rows) == 2 * sum(len(p) for p in pairs.values())  # sync and the compressor at each side
    for r in rows:
        side = next(s for s in pairs[r["compressor"]].values() if s["rate"] == r["rate"])
        assert r["measured_s"] == side["sync_s" if r["paradigm"] == "sync" else "compressor_s"]
        assert 0 < r["predicted_s"] < 1
    for name in pairs:
        sync = {r["rate"]: r["predicted_s"] for r in rows if r["compressor"] == name and r["paradigm"] == "sync"}
        lo, hi = pairs[name]["lower"]["rate"], pairs[name]["upper"]["rate"]
        assert sync[lo] > sync[hi]


def test_the_crossover_errors_sum_up_per_link_rate_band():
    """--errors' per-band lines, by hand: each run falls in the band of its link rate, sync and the
    compressors apart; the shortfall is measured − predicted, the error predicted ÷ measured − 1."""
    from workbench.bench.crossover import by_rate

    def run(rate, paradigm, measured, predicted):
        return {"rate": rate, "paradigm": paradigm, "measured_s": measured, "predicted_s": predicted,
                "error": predicted / measured - 1}
    rows = [run("emulated:399mbit", "sync", 0.020, 0.018), run("emulated:400mbit", "sync", 0.010, 0.011),
            run("emulated:1gbit", "compressed/topk", 0.010, 0.012), run("emulated:1200mbit", "compressed/topk", 0.020, 0.020),
            run("emulated:1gbit", "sync", 0.012, 0.012)]
    got = {(b["band"][0], b["side"]): b for b in by_rate(rows)}
    assert sorted(got) == [(0.0, "sync"), (400e6, "sync"), (800e6, "compressors"), (800e6, "sync")]
    assert got[0.0, "sync"]["runs"] == 1 and got[0.0, "sync"]["shortfall_s"] == pytest.approx(0.002)
    assert got[400e6, "sync"]["median_error"] == pytest.approx(0.1)
    c = got[800e6, "compressors"]
    assert c["runs"] == 2 and c["shortfall_s"] == pytest.approx(-0.001) and c["median_error"] == pytest.approx(0.1)
    assert got[400e6, "sync"]["band"] == (400e6, 600e6)


def test_rounds_stored_with_an_older_profile_of_the_same_fields_are_kept(tmp_path):
    """Version 12 changed how a profile's loops are timed (three passes, the median), not what a
    profile holds: the committed rounds, profiled at version 11, are still read and scored from their
    own profiles (``PROFILE_READABLE``); a profile older than that is measured again."""
    import json

    from workbench.bench.planner import load_unit
    from workbench.perfmodel.profile import PROFILE_READABLE, PROFILE_VERSION
    path = ROOT / "experiments/planner-rounds/small_cnn-N3-b16-emulated_1gbit-r1.json"
    unit = load_unit(path)
    assert unit is not None and PROFILE_READABLE <= unit["profile"].version < PROFILE_VERSION
    old = json.loads(path.read_text())
    old["profile"]["version"] = PROFILE_READABLE - 1
    (tmp_path / path.name).write_text(json.dumps(old))
    assert load_unit(tmp_path / path.name) is None


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_pinning_suite_runs_each_paradigm_pinned_and_not(tmp_path):
    import os
    _suite(tmp_path, "pinning")
    d = tmp_path / "pinning-small_cnn-2ranks"
    rows = list(csv.DictReader(open(d / "pinning_small_cnn_2.csv")))
    assert sorted(r["paradigm"] for r in rows) == ["compressed/fp16", "sync"]
    for r in rows:
        assert float(r["pinned: step ms"]) > 0 and float(r["not pinned: step ms"]) > 0, r
    # the pinned column really ran pinned where the host has a core per rank (its profile says so)
    fits = len(os.sched_getaffinity(0)) >= 2
    assert f"Ranks pinned in the pinned column: {fits}" in (d / "report.md").read_text()


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_accuracy_suite_builds_five_tables_with_a_verdict_each(tmp_path):
    out = _suite(tmp_path, "accuracy")
    from workbench.bench import accuracy
    for t in "abcde":
        rows = list(csv.DictReader(open(tmp_path / "accuracy-tiny" / t / f"table_{t}.csv")))
        assert len(rows) == 2, (t, rows)
        assert all(r["status"] == "completed" for r in rows), rows
        stored = json.loads((tmp_path / "accuracy-tiny" / t / "index.json").read_text())
        assert len(stored["entries"]) == 2 and all((tmp_path / "accuracy-tiny" / t / e["run"]).is_dir() for e in stored["entries"])
        assert "Claim:" in (tmp_path / "accuracy-tiny" / t / "report.md").read_text()
    a = list(csv.DictReader(open(tmp_path / "accuracy-tiny" / "a" / "table_a.csv")))
    assert all(float(r["gns"]) > 0 for r in a)  # sync on 2 ranks logs the gradient noise scale
    e = list(csv.DictReader(open(tmp_path / "accuracy-tiny" / "e" / "table_e.csv")))
    assert e[0]["compressor"] == "uncompressed sync"
    for claim in ("Goyal", "Shallue", "Alchemist RQ4", "Rudra", "Agarwal"):
        assert claim in out
    # the same tables again from the stored runs, without running anything
    tables, notes = accuracy.load(tmp_path / "accuracy-tiny" / "*")
    assert sorted(tables) == list("abcde") and sorted(notes) == list("abcde")
    assert [r["batch"] for r in tables["b"]] == [64, 128]
    # (e): each seed's sync run keeps every compressor's measured update; the law's steps beside the measured
    sync_rec = json.loads((tmp_path / "accuracy-tiny" / "e" / "index.json").read_text())["entries"][0]["record"]
    rho, omega, ef, _ = sync_rec["update_stats"]["bf16"]
    assert rho == pytest.approx(1, abs=1e-4) and 0 <= omega < 1e-4 and not ef
    assert (sync_rec["global_batch"], sync_rec["workers"]) == (64, 2)  # --tiny: 2 ranks of 32
    low = accuracy.load(tmp_path / "accuracy-tiny" / "e", target=0.01)[0]["e"]  # a target the tiny sync run reaches
    assert low[0]["steps_to_target"] is not None and low[0]["predicted_steps"] == low[0]["steps_to_target"]
    assert low[1]["predicted_steps"] == pytest.approx(low[0]["steps_to_target"], rel=1e-3)  # bf16: rho 1, omega ~0
    # (c): each run keeps its samples per step and its paradigm's declared update; the law's steps beside
    c_entries = json.loads((tmp_path / "accuracy-tiny" / "c" / "index.json").read_text())["entries"]
    assert [e["record"]["update"] for e in c_entries] == [[1.0, 0.0], [1.0, 0.0]]  # sync, ps hardsync
    low = accuracy.load(tmp_path / "accuracy-tiny" / "c", target=0.01)[0]["c"]
    assert low[0]["steps_to_target"] is not None and low[0]["predicted_steps"] == low[0]["steps_to_target"]
    assert low[1]["predicted_steps"] > 0
    # each entry keeps its run's evaluations: the same tables without any run directory (a fresh checkout)
    for t in "abcde":
        (tmp_path / "accuracy-tiny" / t / "runs").rename(tmp_path / f"runs-{t}")
    assert accuracy.load(tmp_path / "accuracy-tiny" / "*") == (tables, notes)
    # --resume keeps the runs that ended and runs again the one that did not; --stop-after 0 starts none
    e_dir = tmp_path / "accuracy-tiny" / "e"
    stored = json.loads((e_dir / "index.json").read_text())
    entries = stored["entries"]
    entries[1]["record"]["status"] = "failed"
    # a record from before it held the compressors' update: the resume fills it in where the run is here
    (tmp_path / "runs-e").rename(e_dir / "runs")
    del entries[0]["record"]["update_stats"]
    (e_dir / "index.json").write_text(json.dumps(stored))
    out = _suite(tmp_path, "accuracy", "--only", "a,e", "--resume", "--stop-after", "0")
    refilled = json.loads((e_dir / "index.json").read_text())["entries"][0]["record"]
    assert refilled["update_stats"] == sync_rec["update_stats"]
    entries[0]["record"]["update_stats"] = sync_rec["update_stats"]
    assert "(a) kept 2 runs that ended, ran 0\n" in out and "(e) kept 1 runs that ended, ran 0, left 1 " in out
    assert "1 runs not measured yet" in (e_dir / "report.md").read_text()
    out = _suite(tmp_path, "accuracy", "--only", "e", "--resume")
    assert "(e) kept 1 runs that ended, ran 1" in out
    again = json.loads((e_dir / "index.json").read_text())["entries"]
    assert again[0] == entries[0] and again[1]["run"] != entries[1]["run"]  # the same order, one new run
    # --index-dir: the index in a folder of its own (what a campaign keeps in git), resumed from there
    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "e.json").write_text(json.dumps({**stored, "entries": again[:1]}))
    out = _suite(tmp_path, "accuracy", "--only", "e", "--resume", "--index-dir", str(kept))
    assert "(e) kept 1 runs that ended, ran 1" in out
    assert [e["seed"] for e in json.loads((kept / "e.json").read_text())["entries"]] == [0, 0]
    assert accuracy.load(kept / "*.json")[0]["e"][1]["compressor"] == again[1]["config"]["compressor"]


def test_accuracy_suite_refuses_unknown_tables_and_rules_in_one_line(tmp_path):
    for args, says in ((["--only", "a,z"], "--only"), (["--rules", "cubic"], "--rules"),
                       (["--stop-after", "-1"], "--stop-after"), (["--from-runs", "--resume"], "--from-runs")):
        p = subprocess.run([sys.executable, "-m", "workbench.bench", "accuracy", *args, f"--out={tmp_path}"], cwd=ROOT,
                           capture_output=True, text=True, timeout=300)
        assert p.returncode == 2 and says in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
        assert not list(tmp_path.iterdir())
