import itertools
import math

import numpy as np
import pytest

from geofact.evidence import t_interval, t_quantile
from geofact.d_min_search import log_log_curvature
from geofact.thresholds import (LinearStatistic, Threshold, box_estimate, box_of, half_crossing, rungs, seed_box,
                                seed_thresholds)

D = (4, 6, 8, 12, 16, 24, 32)


def accuracy_from(thresholds, level=0.99):
    """(d, seed) accuracies whose per-seed thresholds are `thresholds` (None: never)."""
    return np.array([[1.0 if t is not None and d >= t else 0.5 for t in thresholds] for d in D])


def test_seed_thresholds_need_the_accuracy_to_stay_perfect():
    acc = accuracy_from([8, 16, None])
    acc[D.index(24), 0] = 0.98  # seed 0 stalls at 24: its threshold is the d from which it stays perfect
    assert seed_thresholds(acc, D, 0.99) == [32, 16, None]
    with pytest.raises(ValueError, match="accuracy must be"):
        seed_thresholds(acc[:3], D, 0.99)


def test_half_crossing_is_the_median_seed_made_continuous_on_log_d():
    # two of three seeds at 16, none at 12: F goes 0 -> 2/3 between the rungs, one half is 3/4 of the way on log d
    assert half_crossing([16, 16, 32], D) == pytest.approx(12 * (16 / 12) ** 0.75)
    # one seed flipping from 32 to 16 moves it within the rung, where the mean rule moved by two rungs
    assert 12 < half_crossing([16, 16, 16], D) < half_crossing([16, 16, 32], D) < 16
    assert half_crossing([16, 16, 16], D) == pytest.approx(math.sqrt(12 * 16))  # agreeing seeds: the rung's middle
    # at the grid's floor the same convention, one rung below taken as d_0^2 / d_1
    assert rungs(D) == (4 * 4 / 6, 64.0)
    assert half_crossing([4, 4, 4], D) == pytest.approx(math.sqrt(4 * 4 * 4 / 6))
    assert half_crossing([4, 6, 6], D) == pytest.approx(4.0 * (6 / 4) ** ((0.5 - 1 / 3) / (2 / 3)))
    assert half_crossing([16, None, None], D) is None
    assert half_crossing([16, None], D) == 16.0  # exactly half at 16


def test_threshold_interval_holds_every_seed_in_its_rung():
    t = Threshold.of(accuracy_from([16, 16, 32]), D, 0.99)
    assert (t.lo, t.hi, t.open_ended) == (12.0, 32.0, False) and t.lo < t.value < t.hi
    assert t.text() == "14.9 [12, 32]"
    floor = Threshold.of(accuracy_from([4, 4, 6]), D, 0.99)
    assert floor.lo == pytest.approx(16 / 6) and floor.lo < floor.value < 4
    open_ended = Threshold.of(accuracy_from([16, None, 32]), D, 0.99)
    assert open_ended.open_ended and open_ended.hi == 64.0 and "beyond the grid" in open_ended.text()
    assert open_ended.value == pytest.approx(24 * (32 / 24) ** 0.5)
    never = Threshold.of(accuracy_from([None, None]), D, 0.99)
    assert not never.reached and never.text().startswith("not reached")
    central, low, high = box_of([t, open_ended])
    assert central.tolist() == [t.value, open_ended.value] and low.tolist() == [12.0, 12.0] and high.tolist() == [32.0, 64.0]
    with pytest.raises(ValueError, match="reached thresholds only"):
        box_of([never])
    assert seed_box(16, D) == (12.0, 16.0, 16.0) and seed_box(4, D) == pytest.approx((16 / 6, 4.0, 4.0))
    assert seed_box(None, D) == (32.0, 64.0, 64.0) and seed_box(None, D, beyond=100) == (32.0, 100.0, 100.0)


def test_linear_statistics_give_the_textbook_intervals():
    rng = np.random.default_rng(0)
    values = rng.normal(size=(3, 6))
    lo, hi = LinearStatistic.mean(6).bounds(values, 0.95)
    for row, a, b in zip(values, lo, hi):
        ref = t_interval(row, "x", 0.95)
        assert (a, b) == pytest.approx((ref.lo, ref.hi))
    x = np.log([2.0, 4.0, 8.0, 16.0])
    y = 0.9 * x + rng.normal(scale=0.1, size=4)
    (a,), (b,) = LinearStatistic.slope(x).bounds(y, 0.95)
    slope, intercept = np.polyfit(x, y, 1)
    se = math.sqrt(((y - slope * x - intercept) ** 2).sum() / 2 / ((x - x.mean()) ** 2).sum())
    assert (a + b) / 2 == pytest.approx(slope) and (b - a) / 2 == pytest.approx(4.302652729911275 * se, rel=1e-6)
    # a quadratic's curvature (exp-scaling's test of a + b log N against a power law) as geofact.d_min_search fits it
    u = np.log([128.0, 128.0, 256.0, 256.0, 512.0, 512.0])
    y = np.log([16.0, 17.0, 23.0, 25.0, 39.0, 36.0])
    gamma, se, df = log_log_curvature(np.exp(u), np.exp(y))
    (a,), (b,) = LinearStatistic.coefficient(np.stack([np.ones_like(u), u, u**2], axis=1), 2).bounds(y, 0.95)
    assert (a + b) / 2 == pytest.approx(gamma) and (b - a) / 2 == pytest.approx(t_quantile(0.95, df) * se)
    with pytest.raises(ValueError, match="more points"):
        LinearStatistic.coefficient(np.ones((2, 2)), 1)


def test_box_estimate_covers_every_data_in_the_box():
    # the union from the vertices contains the interval at any point of the box (sampled), and is reached at one
    rng = np.random.default_rng(1)
    central = np.array([0.4, 0.6, 0.2, 0.5])
    low, high = central - np.array([0.3, 0.0, 0.2, 0.1]), central + np.array([0.1, 0.2, 0.0, 0.3])
    mean = LinearStatistic.mean(4)
    box = box_estimate("mean", mean, central, low, high, 0.95, "Student t over 4")
    samples = low + (high - low) * rng.random((2000, 4))
    lo, hi = mean.bounds(samples, 0.95)
    assert box.lo <= lo.min() and box.hi >= hi.max()
    corners = np.array([np.where(c, high, low) for c in itertools.product((0, 1), repeat=4)])
    assert box.lo == pytest.approx(mean.bounds(corners, 0.95)[0].min()) and box.value == pytest.approx(central.mean())
    point = box_estimate("mean", mean, central, central, central, 0.95, "t")
    assert (point.lo, point.hi) == pytest.approx(tuple(x[0] for x in mean.bounds(central, 0.95)))
    unbounded = box_estimate("mean", mean, central, low, np.append(high[:3], math.inf), 0.95, "t")
    assert (unbounded.lo, unbounded.hi) == (-math.inf, math.inf) and not unbounded.defined
    with pytest.raises(ValueError, match="low <= central <= high"):
        box_estimate("mean", mean, central, high, low, 0.95, "t")


def test_box_estimate_past_enumeration_is_an_outer_bound():
    # 22 units: no enumeration; the bound must still contain every sampled interval, and not by much at this spread
    rng = np.random.default_rng(2)
    x = np.log(np.repeat([8.0, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192], 2))
    central = 0.5 * x + rng.normal(scale=0.05, size=22)
    low, high = central - 0.05, central + 0.02
    slope = LinearStatistic.slope(x)
    box = box_estimate("alpha", slope, central, low, high, 0.95, "Student t on the slope")
    assert "outer bound" in box.method
    lo, hi = slope.bounds(low + (high - low) * rng.random((5000, 22)), 0.95)
    assert box.lo <= lo.min() and box.hi >= hi.max() and box.hi - box.lo < 3 * (hi.max() - lo.min())


def test_box_estimate_enumerates_in_chunks_exactly():
    # 17 units (past one chunk of vertices): the same union as a brute-force pass over every vertex
    rng = np.random.default_rng(3)
    central = rng.normal(size=17)
    low, high = central - rng.random(17) * 0.3, central + rng.random(17) * 0.3
    mean = LinearStatistic.mean(17)
    box = box_estimate("mean", mean, central, low, high, 0.95, "t")
    vertices = np.where((np.arange(1 << 17)[:, None] & (1 << np.arange(17))) > 0, high, low)
    lo, hi = mean.bounds(vertices, 0.95)
    assert (box.lo, box.hi) == pytest.approx((lo.min(), hi.max())) and "union" in box.method
