"""The benchmark tables' arithmetic: medians and spreads of interleaved repeats, prose counts."""
from workbench.bench import suite


def test_merge_repeats_gives_medians_spreads_and_counts():
    rounds = [[{"p": "a", "t": 1.0, "n": 10, "s": "ok"}, {"p": "b", "t": None, "n": 3, "s": "ok"}],
              [{"p": "a", "t": 3.0, "n": 12, "s": "ok"}, {"p": "b", "t": 5.0, "n": 3, "s": "failed"}],
              [{"p": "a", "t": 2.0, "n": 11, "s": "ok"}, {"p": "b", "t": 7.0, "n": 3, "s": "ok"}]]
    a, b = suite.merge_repeats(rounds, "p", ["t"])
    assert a == {"p": "a", "t": 2.0, "t spread": "1–3", "n": 11, "s": "ok", "repeats": "3/3"}
    assert list(a) == ["p", "t", "t spread", "n", "s", "repeats"]  # the spread beside its column
    assert b["t"] == 6.0 and b["t spread"] == "5–7" and b["repeats"] == "2/3"  # a round without a value
    assert b["s"] == "ok / failed" and b["n"] == 3


def test_merge_repeats_of_one_round_is_that_round():
    rows = [{"p": "a", "t": 1.0}]
    assert suite.merge_repeats([rows], "p", ["t"]) == rows


def test_within_counts_from_the_table():
    rows = [{"e": "+5 %"}, {"e": "-25 %"}, {"e": None}, {"e": "+19.9 %"}]
    assert suite.within(rows, "e") == "2 of 3 rows within ±20 % (e)"


def test_repeats_count_the_rounds_where_the_first_timed_column_has_a_value():
    """A protocol that never reached its target still has a throughput: `repeats` counts the target."""
    rounds = [[{"p": "a", "reach_s": None, "rate": 10.0}], [{"p": "a", "reach_s": 2.0, "rate": 12.0}],
              [{"p": "a", "reach_s": None, "rate": 11.0}]]
    (a,) = suite.merge_repeats(rounds, "p", ["reach_s", "rate"])
    assert a["repeats"] == "1/3" and a["reach_s"] == 2.0 and a["rate"] == 11.0 and a["rate spread"] == "10–12"


def test_planner_rounds_compare_each_prediction_with_its_own_runs():
    """Each planner round has its own profile: the row's error is the median of the rounds' errors
    (prediction r against measurement r), not the median prediction against the median run."""
    from workbench.bench.planner import merged
    rounds = [[{"paradigm": "sync", "bandwidth": "loopback", "predicted_step_s": p, "measured_step_s": m,
                "predicted_bytes_per_step": 10.0, "measured_bytes_per_step": 10.0, "bytes_error": 0}]
              for p, m in ((0.010, 0.011), (0.020, 0.019), (0.012, 0.016))]
    (r,) = merged(rounds)
    assert r["measured_step_s"] == 0.016 and r["predicted_step_s"] == 0.012
    errs = sorted((0.010 / 0.011 - 1, 0.020 / 0.019 - 1, 0.012 / 0.016 - 1))
    assert r["error"] == errs[1]  # -9.1 %; the medians' ratio would say -25 %
    assert r["noise"] == (0.019 - 0.011) / 0.016 and r["repeats"] == "3/3"
