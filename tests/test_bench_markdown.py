"""``workbench.bench.markdown.update_section``: the full section goes to the result file for (suite,
host, today), its headline with a link to BENCHMARKS.md; a rerun replaces both in place, other
sections stay as they were."""
import re
from datetime import datetime, timezone

from workbench.bench import markdown

BODY = """Command: `python -m workbench.bench overhead --repeats 9 --write`

small_cnn on digits, 4 CPU ranks.

| variant | median step time (ms) |
|---|---|
{rows}

Notes: the per-step bookkeeping costs {cost} µs.

Report: `experiments/bench/overhead/report.html`.
"""


def body(n_rows, cost="43"):
    return BODY.format(rows="\n".join(f"| v{i} | {i}.0 |" for i in range(n_rows)), cost=cost)


def test_full_section_to_the_result_file_and_headline_to_benchmarks(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_BENCH_HOST", "Test Host")
    md = tmp_path / "BENCHMARKS.md"
    md.write_text("# Benchmarks\n\nIntro stays.\n\n<!-- bench:other -->\nkept\n<!-- /bench:other -->\n\n"
                  "## Staleness\n\n<!-- bench:staleness: old -->\nx\n<!-- /bench:staleness: old -->\n\n## Last\n")
    title = "overhead: small_cnn/digits x4"
    day = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    result = markdown.update_section(md, title, body(30))
    assert result == tmp_path / "experiments" / "results" / f"overhead_test-host_{day}.md"
    full = result.read_text()
    assert full.startswith(f"# overhead on test-host, {day}\n")
    assert "| v29 | 29.0 |" in full and "per-step bookkeeping costs 43" in full and "Machine: " in full
    text = md.read_text()
    assert "Intro stays." in text and "<!-- bench:other -->\nkept\n<!-- /bench:other -->" in text
    section = re.search(r"<!-- bench:overhead: small_cnn/digits x4 -->.*?<!-- /bench:overhead: small_cnn/digits x4 -->",
                        text, re.S).group(0)
    assert "Command: `python -m workbench.bench overhead --repeats 9 --write`" in section
    assert "small_cnn on digits, 4 CPU ranks." in section
    assert f"| v{markdown.HEADLINE_ROWS - 1} |" in section and f"| v{markdown.HEADLINE_ROWS} |" not in section
    assert f"(The first {markdown.HEADLINE_ROWS} of 30 rows.) Notes: the per-step bookkeeping costs 43 µs." in section
    assert "Report:" not in section
    assert "Machine: " in section
    link = f"experiments/results/overhead_test-host_{day}.md"
    assert f"[{link}]({link})" in section

    # a second run the same day: both replaced in place, nothing appended twice
    markdown.update_section(md, title, body(3, cost="51"))
    text2, full2 = md.read_text(), result.read_text()
    assert text2.count(f"<!-- bench:{title} -->") == 1 and full2.count(f"<!-- bench:{title} -->") == 1
    assert "| v2 | 2.0 |" in text2 and "| v3 |" not in text2 and "rows.)" not in text2
    assert "costs 51" in full2 and "costs 43" not in full2 and "| v29 |" not in full2
    assert "<!-- bench:other -->\nkept" in text2

    # another section of the same suite, host and day shares the result file
    markdown.update_section(md, "overhead: default job end to end x4", body(2))
    full3 = result.read_text()
    assert "## overhead: small_cnn/digits x4" in full3 and "## overhead: default job end to end x4" in full3
    assert list((tmp_path / "experiments" / "results").iterdir()) == [result]

    # a new title of a suite that has a chapter goes into it, after its last headline
    markdown.update_section(md, "staleness: time to 90%, λ=4", body(2))
    text4 = md.read_text()
    assert text4.index("<!-- /bench:staleness: old -->") < text4.index("<!-- bench:staleness: time to 90%, λ=4 -->") \
        < text4.index("## Last")
    assert (tmp_path / "experiments" / "results" / f"staleness_test-host_{day}.md").exists()


def test_host_and_suite_from_the_title():
    assert markdown.host_of("Crossover tested at the prediction, small_cnn, 2 ranks, on xeon-spr-pinned") == "xeon-spr-pinned"
    assert markdown.suite_of("Crossover tested at the prediction, small_cnn") == "crossover"
    assert markdown.suite_of("network calibration: 100mbit x2") == "calibrate"
    assert markdown.suite_of("Ranks pinned to their cores or not: small_cnn, 2 ranks") == "pinning"
    assert markdown.suite_of("Simulator: small-λ validation and the papers' scale") == "sim"
