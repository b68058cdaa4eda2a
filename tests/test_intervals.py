"""geofact.intervals against published values."""

import pytest

from geofact.intervals import clopper_pearson, wilson

# Newcombe (1998), "Two-sided confidence intervals for the single proportion: comparison of seven
# methods", Statistics in Medicine 17, Table II: 95% intervals, method 3 (Wilson score) and method 5
# (Clopper-Pearson exact), to four decimals.
NEWCOMBE = [((81, 263), (0.2553, 0.3662), (0.2527, 0.3676)),
            ((15, 148), (0.0624, 0.1605), (0.0578, 0.1617)),
            ((0, 20), (0.0, 0.1611), (0.0, 0.1684)),
            ((1, 29), (0.0061, 0.1718), (0.0009, 0.1776))]


@pytest.mark.parametrize("counts, score, exact", NEWCOMBE)
def test_wilson_and_clopper_pearson_give_newcombes_table(counts, score, exact):
    assert wilson(*counts) == pytest.approx(score, abs=5e-5)
    assert clopper_pearson(*counts) == pytest.approx(exact, abs=5e-5)


def test_all_successes_keep_an_interval_below_one():
    lo, hi = clopper_pearson(3, 3)
    assert hi == 1.0 and lo == pytest.approx(0.025 ** (1 / 3))  # (alpha / 2)^(1/n): 0.292
    assert clopper_pearson(4096, 4096)[0] < 1.0  # a perfect count over many facts is still an interval


@pytest.mark.parametrize("call, match", [
    (lambda: wilson(5, 4), "successes"), (lambda: clopper_pearson(1, 0), "trials"),
    (lambda: wilson(1, 2, confidence=1.0), "confidence")])
def test_bad_input_names_what_is_wrong(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_the_wilson_interval_holds_the_proportion_exactly_at_its_ends():
    for n in range(1, 400):
        for k in (0, n // 3, n):
            lo, hi = wilson(k, n)
            assert lo <= k / n <= hi  # never short of p by a rounding error (an error bar of negative length)
    assert wilson(0, 7)[0] == 0.0 and wilson(7, 7)[1] == 1.0
