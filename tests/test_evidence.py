"""geofact.evidence: the test of a claim against its alternative, its intervals, and the verdict it records."""

import json
import math

import numpy as np
import pytest

from geofact.evidence import (FAILS, HOLDS, INCONCLUSIVE, Estimate, Range, Contrast, bootstrap_interval, conjunction, exact, judge,
                              proportion_difference, sensitivity_table, separate, t_interval, t_quantile, welch_difference)
from geofact.pages.report import Report


@pytest.mark.parametrize("level,df,table", [(0.95, 1, 12.706), (0.95, 2, 4.303), (0.95, 3, 3.182), (0.95, 10, 2.228),
                                            (0.95, 30, 2.042), (0.99, 5, 4.032), (0.90, 7, 1.895)])
def test_t_quantile_matches_the_printed_table(level, df, table):
    assert t_quantile(level, df) == pytest.approx(table, abs=1e-3)


def estimate(lo, hi, value=None):
    return Estimate("beta", (lo + hi) / 2 if value is None else value, lo, hi, 0.95, "t", 4)


LINEAR, FLAT = Range(0.75, 1.25, "linear"), Range(-0.25, 0.25, "flat")


def test_a_claim_holds_only_where_its_whole_interval_lies_in_its_range():
    assert separate(estimate(0.8, 1.1), LINEAR, FLAT) == HOLDS
    assert separate(estimate(0.4, 1.3), LINEAR, FLAT) == INCONCLUSIVE  # not flat, but reaches beyond linear at both ends
    assert separate(estimate(0.74, 1.2, 1.0), LINEAR, FLAT) == INCONCLUSIVE  # the estimate is linear, its interval not wholly
    # issue 46: exp-transfer-learned held at 0.563 [0.387, 0.739] against a claim of >= 0.5
    assert separate(estimate(0.387, 0.739, 0.563), Range(0.5, 1.0), Range(0.0, 0.1)) == INCONCLUSIVE
    assert separate(estimate(0.4, 1.0, 0.6), LINEAR, FLAT) == INCONCLUSIVE  # not flat, but the estimate is not linear either
    assert separate(estimate(-0.20, 2.05, 0.92), LINEAR, FLAT) == INCONCLUSIVE  # the audit's case: flat not ruled out
    assert separate(estimate(-0.1, 0.2), LINEAR, FLAT) == FAILS  # flat, and not linear
    assert separate(estimate(1.5, 2.0), LINEAR, FLAT) == FAILS  # neither: the claim is what is refuted
    assert separate(estimate(math.nan, math.nan, 1.0), LINEAR, FLAT) == INCONCLUSIVE  # one point: no interval
    assert separate(estimate(0.51, 0.9), Range(0.5, math.inf), Range(-math.inf, 0.5)) == HOLDS  # ranges may touch
    with pytest.raises(ValueError, match="overlap"):
        separate(estimate(0.8, 1.1), LINEAR, Range(1.0, 2.0, "superlinear"))
    with pytest.raises(ValueError, match="lo <= hi"):
        Range(1.0, 0.0)
    with pytest.raises(ValueError, match="lo <= hi"):
        Estimate("x", 0.0, 1.0, -1.0, 0.95, "t", 3)


def test_t_interval_is_the_textbook_one_and_one_value_has_none():
    e = t_interval([1.0, 2.0, 3.0, 4.0], "mean", unit="seeds")
    half = 3.182 * np.std([1, 2, 3, 4], ddof=1) / 2
    assert e.value == 2.5 and e.lo == pytest.approx(2.5 - half, abs=1e-3) and e.hi == pytest.approx(2.5 + half, abs=1e-3)
    assert e.n == 4 and "Student t over 4 seeds" in e.text()
    one = t_interval([0.3], "mean", unit="cells")
    assert one.value == 0.3 and not one.defined and "one cell" in one.method
    with pytest.raises(ValueError, match="finite"):
        t_interval([1.0, float("nan")], "mean")


def test_bootstrap_interval_covers_the_statistic_and_is_seeded():
    values = np.linspace(0.1, 0.9, 12)
    a = bootstrap_interval(values, "mean", resamples=2000, seed=3, unit="cells")
    assert a == bootstrap_interval(values, "mean", resamples=2000, seed=3, unit="cells")
    assert a.value == pytest.approx(0.5) and a.lo < a.value < a.hi and a.hi - a.lo < 0.5
    m = bootstrap_interval(values, "min", statistic=np.min, resamples=2000)
    assert m.value == pytest.approx(0.1) and m.lo == pytest.approx(0.1)
    with pytest.raises(ValueError, match="resamples"):
        bootstrap_interval(values, "mean", resamples=10)


def test_judge_records_the_test_against_the_alternative():
    r = Report("nb")
    estimate = Estimate("beta", 0.92, -0.20, 2.05, 0.95, "Student t over 4 R values", 4)
    test = Contrast(estimate, claim=Range(0.75, 1.25, "linear"), alternative=Range(-0.25, 0.25, "flat"))
    verdict = judge(r, "c", test, measured="d_min ~ R^beta", population={"runs": "learned"})
    entry = r.claims["c"]
    assert verdict == entry["verdict"] == "inconclusive"
    assert entry["estimate"]["lo"] == -0.2 and entry["tests"][0]["alternative_range"]["label"] == "flat"
    assert entry["population"] == {"runs": "learned"} and "the alternative flat [-0.25, 0.25]" in entry["measured"]
    json.dumps(r.as_dict(), allow_nan=False)
    with pytest.raises(ValueError, match="reported twice"):
        judge(r, "c", test, measured="", population={})


def test_a_claim_of_several_parts_holds_only_if_every_part_does():
    assert conjunction([HOLDS, HOLDS]) == HOLDS
    assert conjunction([HOLDS, INCONCLUSIVE]) == INCONCLUSIVE
    assert conjunction([INCONCLUSIVE, FAILS]) == FAILS
    with pytest.raises(ValueError, match="at least one"):
        conjunction([])
    r = Report("nb")
    steeper = Contrast(Estimate("alpha_frozen - alpha_learned", 0.3, 0.1, 0.5, 0.95, "Welch t", 14), Range(0, math.inf), Range(-math.inf, 0))
    half = Contrast(Estimate("alpha_frozen", 0.9, 0.8, 1.0, 0.95, "t", 14), Range(0.25, 0.75), Range(0.75, math.inf))
    assert judge(r, "c", [steeper, half], measured="", population={}) == FAILS
    assert r.claims["c"]["estimate"]["quantity"] == "alpha_frozen - alpha_learned" and len(r.claims["c"]["tests"]) == 2


def test_the_sensitivity_table_shows_the_verdict_at_every_level_and_setting():
    def at(level):
        half = {0.9: 0.3, 0.95: 0.5, 0.99: 1.2}[level]
        return Estimate("beta", 0.9, 0.9 - half, 0.9 + half, level, "t", 4)

    table = sensitivity_table(at, lambda tol: (Range(1 - tol, 1 + tol, "linear"), Range(-tol, tol, "flat")),
                              settings=[0.25, 0.5], setting_name="tolerance")
    rows = table.splitlines()
    assert rows[0] == "| confidence | tolerance 0.25 | tolerance 0.5 |"
    assert rows[2] == "| 90%: [0.6, 1.2] | inconclusive | holds |"  # holds where the whole interval is linear
    assert rows[3] == "| 95%: [0.4, 1.4] | inconclusive | inconclusive |"
    assert rows[4] == "| 99%: [-0.3, 2.1] | inconclusive | inconclusive |"


def test_welch_difference_widens_with_both_errors_and_degrades_to_no_interval():
    d = welch_difference((0.48, 0.015, 12), (0.46, 0.015, 12), "alpha_frozen - alpha_learned")
    assert d.value == pytest.approx(0.02) and d.lo < 0 < d.hi  # the audit's case: the two exponents are not told apart
    df = int((2 * 0.015**2) ** 2 / (2 * 0.015**4 / 12))
    assert d.hi - d.value == pytest.approx(t_quantile(0.95, df) * math.sqrt(2) * 0.015) and f"{df} degrees" in d.method
    assert not welch_difference((0.5, float("nan"), 0), (0.4, 0.1, 5), "x").defined


def test_a_universal_claim_is_one_test_per_unit_and_its_text_counts_them():
    r = Report("nb")
    cells = [Contrast(Estimate(f"readout in cell {i}", v, v - 0.02, min(1.0, v + 0.02), 0.95, "t", 3),
                      Range(0.9, 1.0, "near-perfect"), Range(0.0, 0.9, "below")) for i, v in enumerate([0.95, 0.99, 0.91, 0.97])]
    assert judge(r, "c", cells, measured="m", population={}) == INCONCLUSIVE  # cell 2's interval reaches below 0.9
    assert "4 parts: 3 holds, 1 inconclusive, 0 does not hold" in r.claims["c"]["measured"]


def test_an_inconclusive_test_says_how_many_units_would_decide_it():
    growth = Contrast(Estimate("beta", 0.92, -0.20, 2.05, 0.95, "t", 4), Range(0.75, 1.25, "linear"), Range(-0.25, 0.25, "flat"))
    # the estimate is linear; the interval's half-width 1.13 must shrink to the 0.17 between it and the claim's lower end
    assert growth.units_to_decide() == math.ceil(4 * (1.13 / 0.17) ** 2) and "about 177 units (now 4)" in growth.text()
    below = Contrast(Estimate("beta", 0.5, 0.2, 0.8, 0.95, "t", 4), Range(0.75, 1.25, "linear"), Range(-0.25, 0.25, "flat"))
    assert below.units_to_decide() == math.ceil(4 * (0.3 / 0.25) ** 2)  # to miss the claim's range
    on_edge = Contrast(Estimate("d", 0.0, -0.1, 0.1, 0.95, "t", 5), Range(0.0, 1.0), Range(-1.0, 0.0))
    assert math.isinf(on_edge.units_to_decide()) and "no number of units decides it" in on_edge.text()
    decided = Contrast(Estimate("d", 0.5, 0.4, 0.6, 0.95, "t", 5), Range(0.0, 1.0), Range(-1.0, 0.0))
    assert decided.units_to_decide() is None and "would decide" not in decided.text()


def test_a_missing_estimate_is_inconclusive_and_says_why():
    e = Estimate.missing("readout", "no cell has sufficient capacity")
    assert not e.defined and e.n == 0 and e.method == "no cell has sufficient capacity"
    assert separate(e, Range(0.9, 1.0), Range(0.0, 0.9)) == INCONCLUSIVE
    assert Contrast(e, Range(0.9, 1.0), Range(0.0, 0.9)).units_to_decide() is None


def test_proportion_difference_is_newcombes_score_interval():
    # Newcombe (1998), Table II, example (a): 56/70 against 48/80 gives 0.2 with [0.0524, 0.3339]
    e = proportion_difference((56, 70), (48, 80), "p1 - p2")
    assert e.value == pytest.approx(0.2) and e.lo == pytest.approx(0.0524, abs=5e-4) and e.hi == pytest.approx(0.3339, abs=5e-4)
    at_the_edges = proportion_difference((32, 32), (0, 32), "all against none")
    assert at_the_edges.hi == 1.0 and 0.8 < at_the_edges.lo < 1.0  # a Wald interval would be [1, 1]
    with pytest.raises(ValueError, match="successes <= trials"):
        proportion_difference((5, 4), (1, 4), "x")


def test_an_exact_quantity_has_its_point_as_interval():
    e = exact(7.32, "parameters (millions)")
    assert (e.lo, e.value, e.hi) == (7.32, 7.32, 7.32) and e.defined
    assert separate(e, Range(6.9, 7.7, "within 5%"), Range(7.7, math.inf, "more")) == HOLDS



def test_a_mean_of_fractions_keeps_its_interval_inside_zero_and_one():
    from geofact.evidence import fraction_interval, universal

    near = fraction_interval([0.998, 1.0, 0.999], "CoT accuracy", trials=1024, unit="seeds")
    assert near.hi <= 1 and near.lo > 0.99 and near.value == pytest.approx(0.999)  # a Student t reached 1.001 here
    t = t_interval([0.998, 1.0, 0.999], "x")
    assert near.lo <= t.lo and near.hi == 1.0 < t.hi and "hulled with the Clopper-Pearson" in near.method
    # cells as unlike as these: the interval holds the mean (a logit-scale interval sat above it, [0.82, 0.9997])
    mixed = fraction_interval([0.3, 0.999, 0.999, 0.5, 0.999, 0.99], "frozen accuracy", trials=4096, unit="cells")
    assert mixed.lo < mixed.value < mixed.hi and mixed.hi == 1.0
    assert (mixed.lo, mixed.value) == pytest.approx((t_interval([0.3, 0.999, 0.999, 0.5, 0.999, 0.99], "x").lo, 0.7978), abs=1e-4)
    perfect = fraction_interval([1.0, 1.0, 1.0], "accuracy", trials=256, unit="seeds")
    assert perfect.value == 1.0 and perfect.lo < perfect.hi == 1.0  # not "1 [1, 1]": the mean is the estimate
    assert perfect.lo == pytest.approx(0.025 ** (1 / 768))  # Clopper-Pearson's lower end for 768 of 768
    one = fraction_interval([0.5], "accuracy", trials=10, unit="seeds")
    assert one.n == 1 and one.method.startswith("Clopper-Pearson") and (one.lo, one.hi) == pytest.approx((0.187, 0.813), abs=1e-3)
    with pytest.raises(ValueError, match=r"values in \[0, 1\]"):
        fraction_interval([0.5, 1.2], "x", trials=10)
    tests = universal({"a": np.array([1.0, 1.0, 1.0]), "b": np.array([0.96, 0.97, 0.98])}, "acc at {}",
                      Range(0.95, 1.0), Range(0.0, 0.95), trials=4096)
    assert all(t.estimate.hi <= 1.0 for t in tests) and "cut to [0, 1]" in tests[0].estimate.method


def test_a_universal_claim_shows_first_the_part_its_verdict_rests_on():
    # issue 46: exp-lr-paper showed the frozen part's 0.652 [-0.04, 1.35] while its verdict came from the learned part
    from geofact.evidence import universal

    tests = universal({"learned": np.array([0.016, 0.016]), "frozen": np.array([0.182, 0.99])}, "accuracy, {}",
                      Range(0.99, 1.0, "perfect"), Range(0.0, 0.99, "below"), trials=1024)
    assert [t.verdict for t in tests] == [FAILS, INCONCLUSIVE] and tests[0].estimate.quantity == "accuracy, learned"
    per_unit = universal({"R=2": np.array([1.0, 1.0]), "R=16": np.array([1.0, 1.0])}, "acc at {}", Range(0.99, 1.0),
                         Range(0.0, 0.99), trials={"R=2": 256, "R=16": 2048})
    assert per_unit[0].estimate.quantity == "acc at R=2" and per_unit[0].estimate.lo < per_unit[1].estimate.lo


def test_an_interval_cut_to_the_quantitys_range_keeps_its_estimate_and_says_so():
    # issue 46: |log2 ratio| = 0.069 [-0.109, 0.247]; an absolute value cannot be negative
    e = Estimate("|log2 ratio|", 0.069, -0.109, 0.247, 0.95, "Student t over 6", 6)
    cut = e.within(0.0)
    assert (cut.lo, cut.value, cut.hi) == (0.0, 0.069, 0.247) and cut.method.endswith("cut to the quantity's range [0, inf]")
    assert separate(cut, Range(0.0, 0.585), Range(0.585, math.inf)) == HOLDS
    assert separate(e, Range(0.0, 0.585), Range(0.585, math.inf)) == INCONCLUSIVE
    assert e.within(-1.0) is e and Estimate.missing("x", "none").within(0.0).lo != 0.0
    with pytest.raises(ValueError, match="outside the quantity's range"):
        e.within(0.1)


def test_an_estimate_that_could_not_be_made_says_why_instead_of_nan():
    from geofact.evidence import Estimate

    missing = Estimate.missing("curvature", "only 3 values of N; a curvature and its error need four")
    assert missing.text() == "curvature: no estimate (only 3 values of N; a curvature and its error need four)"
    no_interval = Estimate("slope", 0.5, float("nan"), float("nan"), 0.95, "one point", 1)
    assert "nan" not in no_interval.text() and "no interval" in no_interval.text()


def test_an_estimate_is_written_one_way_on_every_page():
    from geofact.evidence import estimate_words

    assert estimate_words({"estimate": {"value": 0.5634, "lo": 0.3871, "hi": 0.7392}}) == "0.563 [0.387, 0.739]"
    assert estimate_words({"estimate": {"value": 0.92, "lo": "nan", "hi": "nan"}}) == "0.92 (no interval)"  # from JSON
    assert estimate_words({"estimate": {"value": math.nan, "lo": 0.0, "hi": 1.0}}) == "no estimate"
    assert estimate_words({}) == "" and estimate_words({"estimate": None}) == "" and estimate_words({"estimate": {"value": 1}}) == ""
