"""The benchmark suites' CI smoke versions (``--tiny``): each runs end to end, writes its CSV,
Markdown and HTML report, and its byte counts equal the analytic ones. Timings are never asserted."""
import csv
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


@pytest.mark.timeout(900)
def test_stanza_suite_predicts_every_allocation(tmp_path):
    _suite(tmp_path, "stanza")
    rows = list(csv.DictReader(open(tmp_path / "stanza-small_cnn-3p" / "sweep_small_cnn_3.csv")))
    assert [r["allocation"] for r in rows] == ["2 CONV + 1 FC", "1 CONV + 2 FC", "sync x3 (data parallel)"]
    assert all(r["status"] == "completed" and float(r["predicted"]) > 0 and float(r["measured"]) > 0 for r in rows)
