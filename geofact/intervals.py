"""Intervals that stay inside the range of what they measure (issue 46, "the last lenient verdicts").

A Student-t interval on a handful of accuracies can reach above 1 (0.824 [0.622, 1.03]), and on an
absolute value below 0; three identical values give a zero-width interval ("1 [1, 1]") that claims a
certainty three seeds cannot give. These are the intervals a verdict should use instead:

- a count of successes among trials (facts recalled, seeds that memorise): `clopper_pearson`, the exact
  interval (Clopper & Pearson 1934), conservative at every n; `wilson`, the score interval (Wilson 1927),
  closer to its nominal level on average (Newcombe 1998 compares both; tests/test_intervals.py checks
  them against his Table II);
- the mean of a few fractions, each a unit's value in [0, 1] (a cell's accuracy over seeds):
  `logit_t`, the Student-t interval on the logit scale mapped back, with each value held a
  half-count away from 0 and 1 (`trials`: what each fraction counts) so that a perfect value keeps an
  interval below 1;
- the mean of a few positive values (a ratio, an absolute difference): `log_t`, the Student-t interval
  on the log scale mapped back, inside (0, inf).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

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
    return max(0.0, centre - half), min(1.0, centre + half)


def _t_on(values: np.ndarray, confidence: float) -> tuple[float, float, float]:
    mean = float(values.mean())
    half = float(stats.t.ppf(1 - (1 - confidence) / 2, values.size - 1)) * float(values.std(ddof=1)) / math.sqrt(values.size)
    return mean, mean - half, mean + half


def logit_t(fractions: Sequence[float], trials: int, confidence: float = 0.95) -> tuple[float, float, float]:
    """(centre, lo, hi) for the mean of `fractions` (each in [0, 1], each a count over `trials`): a
    Student-t interval over the units on the logit scale, mapped back, so both ends lie in (0, 1). Each
    fraction is first held half a count from the ends ((k + 1/2) / (trials + 1)), so that units all at 1
    keep an interval that does not claim certainty. The centre is the back-mapped mean logit (not the
    plain mean)."""
    x = np.asarray(fractions, dtype=float)
    if x.ndim != 1 or x.size < 2:
        raise ValueError(f"fractions must be at least 2 values (units), got {x.size}")
    if np.any(~np.isfinite(x)) or np.any(x < 0) or np.any(x > 1):
        raise ValueError("fractions must lie in [0, 1]")
    if not (isinstance(trials, (int, np.integer)) and trials >= 1):
        raise ValueError(f"trials must be an integer >= 1, got {trials!r}")
    _check_level(confidence)
    held = (x * trials + 0.5) / (trials + 1)
    centre, lo, hi = _t_on(np.log(held / (1 - held)), confidence)
    expit = lambda v: 1 / (1 + math.exp(-v))  # noqa: E731
    return expit(centre), expit(lo), expit(hi)


def log_t(values: Sequence[float], confidence: float = 0.95) -> tuple[float, float, float]:
    """(geometric mean, lo, hi) of positive `values`: a Student-t interval over the units on the log scale,
    mapped back, so both ends are > 0."""
    x = np.asarray(values, dtype=float)
    if x.ndim != 1 or x.size < 2:
        raise ValueError(f"values must be at least 2 values (units), got {x.size}")
    if np.any(~np.isfinite(x)) or np.any(x <= 0):
        raise ValueError("values must be finite and > 0 (use logit_t for fractions, or shift a quantity that can be 0)")
    _check_level(confidence)
    centre, lo, hi = _t_on(np.log(x), confidence)
    return math.exp(centre), math.exp(lo), math.exp(hi)
