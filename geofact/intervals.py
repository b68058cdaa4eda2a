"""Intervals that stay inside the range of what they measure (issue 46, "the last lenient verdicts").

A count of successes among trials (facts recalled, seeds that memorise) takes `clopper_pearson`, the
exact interval (Clopper & Pearson 1934), conservative at every n, or `wilson`, the score interval
(Wilson 1927), closer to its nominal level on average (Newcombe 1998 compares both;
tests/test_intervals.py checks them against his Table II). A mean of accuracies takes
geofact.evidence.fraction_interval, which hulls a Student-t interval cut to [0, 1] with the pooled
count's Clopper-Pearson interval.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats


def _check_counts(successes: int, trials: int) -> None:
    if not (isinstance(trials, (int, np.integer)) and trials >= 1):
        raise ValueError(f"trials must be an integer >= 1, got {trials!r}")
    if not (isinstance(successes, (int, np.integer)) and 0 <= successes <= trials):
        raise ValueError(f"successes must be an integer in [0, trials = {trials}], got {successes!r}")


def _check_level(confidence: float) -> None:
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")


def clopper_pearson(successes: int, trials: int, confidence: float = 0.95) -> tuple[float, float]:
    """The exact binomial interval: the proportions p whose two-sided tail test at 1 - confidence does not
    reject `successes` of `trials` (from the beta quantiles). Inside [0, 1]; 0 or 1 at the ends only
    for 0 or all successes."""
    _check_counts(successes, trials)
    _check_level(confidence)
    alpha = 1 - confidence
    lo = 0.0 if successes == 0 else float(stats.beta.ppf(alpha / 2, successes, trials - successes + 1))
    hi = 1.0 if successes == trials else float(stats.beta.ppf(1 - alpha / 2, successes + 1, trials - successes))
    return lo, hi


def wilson(successes: int, trials: int, confidence: float = 0.95) -> tuple[float, float]:
    """The Wilson score interval of `successes` of `trials`, inside [0, 1]."""
    _check_counts(successes, trials)
    _check_level(confidence)
    z = float(stats.norm.ppf(1 - (1 - confidence) / 2))
    p = successes / trials
    denom = 1 + z**2 / trials
    centre = (p + z**2 / (2 * trials)) / denom
    half = z * math.sqrt(p * (1 - p) / trials + z**2 / (4 * trials**2)) / denom
    # the interval holds p; at p = 0 or 1 its end equals p only up to rounding, which a plot's error bar
    # (p - lo, hi - p) would turn into a negative length
    return min(p, max(0.0, centre - half)), max(p, min(1.0, centre + half))
