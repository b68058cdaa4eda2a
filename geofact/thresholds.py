"""Capacity thresholds with their uncertainty, and verdicts that carry it (issue 45).

A threshold read as "the smallest grid d whose accuracy, averaged over 2-3 seeds, is perfect" is a knife
edge: one seed whose accuracy at a cell ends at 0.985 instead of 0.995 (which the rounding of another
CPU's BLAS decides) moves it by one or two rungs of the grid, and a verdict built on it moves too (on
exp-capacity, d_min of R = 8 was 32 on one machine and 16 on another).

**The threshold.** Each seed has its own threshold: the smallest grid d from which its accuracy stays at the
perfect level (`seed_thresholds`); its true value lies in that rung, above the grid d below it. The fraction
of seeds memorising at d, F(d) = #{seeds with threshold <= d} / #seeds, is a step function; the threshold
reported is where it crosses one half, F interpolated linearly on log d between rungs (`half_crossing`): the
median seed's threshold, made continuous (seeds that agree give the middle of their rung). A seed other than
the median moving by a rung moves it within its rung; the median seed moving moves it with that seed.

**Its interval** holds every seed's threshold: from the rung below the smallest seed's threshold to the
largest seed's (`Threshold.lo`, `Threshold.hi`). Past the grid's ends two conventions, stated where used
(`rungs`): a seed memorising at the smallest d has its threshold within one more rung below (the grid's
first ratio), and one that never memorises counts as twice the largest d (a lower bound, `open_ended`).

**Verdicts that carry it.** A verdict built on thresholds (a slope over R, a mean ratio over units) is
taken on the central thresholds, and its interval is the union of its Student-t intervals over every
value each threshold may take within its interval (`box_estimate`): it holds only where the whole of that
union agrees. The union is exact from the box's vertices: the lower end of a Student-t interval (mean -
t s / sqrt(n), or slope - t se) is a concave function of the data and the upper end a convex one (s and se
are norms of linear maps of it), so over a box both extremes lie at vertices; past MAX_BOX_UNITS units, an
outer bound.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from geofact.evidence import Estimate, t_quantile

MAX_BOX_UNITS = 20  # 2^20 vertices, in chunks: the box's union is exact by enumeration up to here
_CHUNK = 1 << 15


def rungs(d_values: Sequence[int], beyond: float | None = None) -> tuple[float, float]:
    """(below, above): the conventional rung under the smallest d (d_0^2 / d_1, the grid's first ratio once more)
    and over the largest (`beyond`, default twice it): a seed memorising at the smallest d is taken to have its
    threshold within one more rung below, one that never memorises to have it at most `beyond`. Both are
    conventions, stated where they are used: the grid says nothing past its ends."""
    d = [float(x) for x in d_values]
    below = d[0] * d[0] / d[1] if len(d) > 1 else d[0] / 2
    return below, float(beyond) if beyond is not None else 2 * d[-1]


def seed_thresholds(accuracy: np.ndarray, d_values: Sequence[int], level: float) -> list[int | None]:
    """Per seed, the smallest grid d from which its accuracy stays >= level (None: never on the grid).
    accuracy: (d, seed)."""
    accuracy = np.asarray(accuracy, dtype=float)
    if accuracy.ndim != 2 or accuracy.shape[0] != len(d_values):
        raise ValueError(f"accuracy must be (d, seed) with {len(d_values)} values of d, got shape {accuracy.shape}")
    out = []
    for k in range(accuracy.shape[1]):
        ok = accuracy[:, k] >= level
        out.append(next((d_values[j] for j in range(len(d_values)) if ok[j:].all()), None))
    return out


def half_crossing(per_seed: Sequence[int | None], d_values: Sequence[int]) -> float | None:
    """The d where F(d), the fraction of seeds whose threshold is <= d, crosses one half, F linear on log d
    between rungs and 0 one rung below the grid (`rungs`); None where half the seeds never memorise on the grid.
    Seeds that agree on a rung give the middle of that rung on log d, at the grid's floor as anywhere else."""
    n = len(per_seed)
    if n == 0:
        raise ValueError("per_seed must hold at least one seed's threshold")
    ds = [rungs(d_values)[0], *(float(d) for d in d_values)]
    fraction = [0.0, *(sum(t is not None and t <= d for t in per_seed) / n for d in d_values)]
    for j in range(1, len(ds)):
        if fraction[j] >= 0.5:
            weight = (0.5 - fraction[j - 1]) / (fraction[j] - fraction[j - 1])
            if weight == 1:  # exactly half the seeds at d_j: the rung itself, not a rounding of it
                return ds[j]
            return float(math.exp(math.log(ds[j - 1]) + weight * (math.log(ds[j]) - math.log(ds[j - 1]))))
    return None


def seed_box(threshold: int | None, d_values: Sequence[int], beyond: float | None = None) -> tuple[float, float, float]:
    """(low, central, high) of one seed's threshold on the grid: it lies above the rung below it and at or below
    itself (the central value); at the smallest d, above the conventional rung below the grid; a seed that
    never memorised lies above the largest d, and counts as `beyond` (`rungs`)."""
    below, past = rungs(d_values, beyond)
    if threshold is None:
        return float(d_values[-1]), past, past
    j = list(d_values).index(threshold)
    return (float(d_values[j - 1]) if j else below), float(threshold), float(threshold)


@dataclass(frozen=True)
class Threshold:
    """One capacity threshold (one R, one regime) over its seeds: the half-crossing and its interval, which
    holds every seed's threshold (each anywhere in its rung of the grid)."""

    per_seed: tuple[int | None, ...]
    value: float | None  # half_crossing; None: half the seeds never memorise on the grid
    lo: float  # every seed's threshold lies above this (one rung below the grid where a seed memorised at its floor)
    hi: float  # ... and at or below this (`beyond` where a seed never memorised on the grid)
    open_ended: bool  # a seed never memorised on the grid: `hi` is the convention `beyond`, not a measurement

    @classmethod
    def of(cls, accuracy: np.ndarray, d_values: Sequence[int], level: float, beyond: float | None = None) -> Threshold:
        """From accuracy (d, seed) on the grid's d_values, at the perfect level."""
        per_seed = seed_thresholds(accuracy, d_values, level)
        boxes = [seed_box(t, d_values, beyond) for t in per_seed]
        value = half_crossing(per_seed, d_values)
        return cls(tuple(per_seed), value, min(b[0] for b in boxes), max(b[2] for b in boxes), None in per_seed)

    @property
    def reached(self) -> bool:
        return self.value is not None

    def text(self) -> str:
        if self.value is None:
            return f"not reached (seeds {list(self.per_seed)})"
        hi = f"{self.hi:.3g}" + (" (a seed beyond the grid)" if self.open_ended else "")
        return f"{self.value:.3g} [{self.lo:.3g}, {hi}]"

    def as_dict(self) -> dict:
        return {"per_seed": list(self.per_seed), "value": self.value, "lo": self.lo, "hi": self.hi, "open_ended": self.open_ended}


def box_of(thresholds: Sequence[Threshold]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(central, low, high) arrays of reached thresholds, for `box_estimate`."""
    if not all(t.reached for t in thresholds):
        raise ValueError("box_of takes reached thresholds only (a threshold not reached has no central value)")
    central = np.array([t.value for t in thresholds], dtype=float)
    return central, np.array([t.lo for t in thresholds], dtype=float), np.maximum([t.hi for t in thresholds], central)


@dataclass(frozen=True)
class LinearStatistic:
    """A statistic linear in the data, w . y, with the Student-t interval w . y +- t scale |P y| (P the
    projector onto the fit's residuals, on `df` degrees of freedom): a mean over units, or a coefficient
    of a least-squares fit (a slope, a curvature)."""

    weights: np.ndarray  # (n,)
    projector: np.ndarray  # (n, n)
    scale: float
    df: int

    @classmethod
    def mean(cls, n: int) -> LinearStatistic:
        """The mean of n units: se = s / sqrt(n)."""
        if n < 2:
            raise ValueError(f"a Student-t interval needs at least 2 units, got {n}")
        return cls(np.full(n, 1 / n), np.eye(n) - 1 / n, 1 / math.sqrt(n * (n - 1)), n - 1)

    @classmethod
    def coefficient(cls, design: np.ndarray, index: int) -> LinearStatistic:
        """Coefficient `index` of the least-squares fit on `design` (points, coefficients)."""
        design = np.asarray(design, dtype=float)
        n, k = design.shape
        if n <= k:
            raise ValueError(f"an interval on a fitted coefficient needs more points ({n}) than coefficients ({k})")
        inverse = np.linalg.inv(design.T @ design)
        hat = design @ inverse @ design.T
        return cls((inverse @ design.T)[index], np.eye(n) - hat, math.sqrt(inverse[index, index] / (n - k)), n - k)

    @classmethod
    def slope(cls, x) -> LinearStatistic:
        x = np.asarray(x, dtype=float)
        return cls.coefficient(np.stack([np.ones_like(x), x], axis=1), 1)

    def bounds(self, values: np.ndarray, confidence: float) -> tuple[np.ndarray, np.ndarray]:
        """(lo, hi) of each row of `values` (scenarios, n)."""
        values = np.atleast_2d(values)
        half = t_quantile(confidence, self.df) * self.scale * np.linalg.norm(values @ self.projector, axis=1)
        centre = values @ self.weights
        return centre - half, centre + half


def box_estimate(quantity: str, statistic: LinearStatistic, central, low, high, confidence: float, method: str) -> Estimate:
    """The statistic at the central data, with the union of its Student-t intervals over every data in the box
    [low, high] (one entry per unit). Exact from the box's 2^n vertices up to MAX_BOX_UNITS units (module
    docstring); beyond, an outer bound: the linear part's extremes over the box, widened by the largest
    growth of |P y| (P is a projector, so |P (y - y0)| <= |y - y0|)."""
    central, low, high = (np.asarray(a, dtype=float) for a in (central, low, high))
    n = len(central)
    if not (len(low) == len(high) == n == len(statistic.weights)) or (low > central).any() or (high < central).any():
        raise ValueError("central, low and high must have one entry per unit of the statistic with low <= central <= high")
    value = float(central @ statistic.weights)
    if not np.isfinite(np.concatenate([low, high])).all():  # a threshold beyond the grid: no end bounds it
        return Estimate(quantity, value, -math.inf, math.inf, confidence, f"{method}; unbounded: a threshold lies beyond the grid", n)
    if n <= MAX_BOX_UNITS:
        lo, hi = statistic.bounds(central, confidence)
        lo, hi = float(lo[0]), float(hi[0])
        bits = 1 << np.arange(n)
        for start in range(0, 1 << n, _CHUNK):  # vertex v takes high where bit i of v is set
            corners = (np.arange(start, min(start + _CHUNK, 1 << n))[:, None] & bits) > 0
            chunk_lo, chunk_hi = statistic.bounds(np.where(corners, high, low), confidence)
            lo, hi = min(lo, float(chunk_lo.min())), max(hi, float(chunk_hi.max()))
        return Estimate(quantity, value, lo, hi, confidence,
                        f"{method}; the union of its intervals over every threshold within its interval", n)
    w = statistic.weights
    linear_lo = float(np.where(w > 0, low, high) @ w)
    linear_hi = float(np.where(w > 0, high, low) @ w)
    reach = float(np.linalg.norm(np.maximum(high - central, central - low)))
    half = t_quantile(confidence, statistic.df) * statistic.scale * (float(np.linalg.norm(statistic.projector @ central)) + reach)
    return Estimate(quantity, value, linear_lo - half, linear_hi + half, confidence,
                    f"{method}; an outer bound of its intervals over every threshold within its interval", n)
