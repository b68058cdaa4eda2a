"""d_min(N): the smallest embedding dimension at which trained accuracy reaches a level (Section 5.1,
`fig:scaling`), found by doubling then bisection, and the two curve fits the paper compares.

The search assumes accuracy grows with d (more capacity never hurts). Trained accuracy is noisy, so
a curve can be non-monotone near the threshold; the search reports every d it tried with its
accuracy, so a page can show where that happened.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Generator, Hashable

import numpy as np


@dataclass
class DminSearch:
    level: float
    d_min: int | None  # smallest passing d found; None when even d_max fails
    d_max: int
    trials: list[tuple[int, float]] = field(default_factory=list)  # (d, accuracy) in the order tried

    @property
    def bracket(self) -> tuple[int, int | None]:
        """(largest failing d tried, smallest passing d tried): d_min lies in (lo, hi]."""
        failing = [d for d, a in self.trials if a < self.level]
        passing = [d for d, a in self.trials if a >= self.level]
        return max(failing, default=0), min(passing, default=None)


def _check(level: float, d_start: int, d_max: int, rel_tol: float) -> None:
    if not 0 < level <= 1:
        raise ValueError(f"level must be in (0, 1], got {level}")
    if not 1 <= d_start <= d_max:
        raise ValueError(f"d_start must be in [1, d_max={d_max}], got {d_start}")
    if rel_tol < 0:
        raise ValueError(f"rel_tol must be >= 0, got {rel_tol}")


def _search(level: float, d_start: int, d_max: int, rel_tol: float) -> Generator[int, float, DminSearch]:
    """One search as a generator: yields the next d to try, is sent its accuracy, returns the result."""
    search = DminSearch(level=level, d_min=None, d_max=d_max)

    def passes(d: int, acc: float) -> bool:
        search.trials.append((d, float(acc)))
        return acc >= level

    lo, d = 0, d_start
    while not passes(d, (yield d)):
        if d == d_max:
            return search
        lo, d = d, min(2 * d, d_max)
    hi = d
    while hi - lo > max(1, math.floor(rel_tol * hi)):
        mid = (lo + hi) // 2
        if passes(mid, (yield mid)):
            hi = mid
        else:
            lo = mid
    search.d_min = hi
    return search


def find_d_min(accuracy_at: Callable[[int], float], level: float = 0.95, d_start: int = 2, d_max: int = 4096,
               rel_tol: float = 0.0) -> DminSearch:
    """Smallest d in [1, d_max] with accuracy_at(d) >= level.

    Doubles d from d_start until a d passes (or d_max, the last try, fails), then bisects between the
    last failing and the first passing d until they are adjacent, or within rel_tol of the passing
    one (rel_tol = 0.125 stops at 12.5% resolution and saves the last, most expensive, steps).
    """
    return find_d_min_many(lambda asks: [accuracy_at(d) for _, d in asks], [None], level, d_start, d_max, rel_tol)[None]


def find_d_min_many(accuracies_at: Callable[[list[tuple[Hashable, int]]], list[float]], keys: list[Hashable],
                    level: float = 0.95, d_start: int = 2, d_max: int = 4096, rel_tol: float = 0.0) -> dict[Hashable, DminSearch]:
    """find_d_min for several curves at once, in rounds: each round asks `accuracies_at` for every
    unfinished curve's next (key, d) in one call, so a trainer can stack the runs that share a shape
    (in the doubling phase all curves try the same d)."""
    _check(level, d_start, d_max, rel_tol)
    searches = {k: _search(level, d_start, d_max, rel_tol) for k in keys}
    asks = {k: next(g) for k, g in searches.items()}
    done: dict[Hashable, DminSearch] = {}
    while asks:
        pending = list(asks.items())
        answers = accuracies_at(pending)
        asks = {}
        for (k, _), acc in zip(pending, answers, strict=True):
            try:
                asks[k] = searches[k].send(acc)
            except StopIteration as stop:
                done[k] = stop.value
    return {k: done[k] for k in keys}


@dataclass(frozen=True)
class Fit:
    """y ~ model(x) with its parameters and R^2 (computed on y itself, so the two fits compare)."""

    form: str  # "a + b log2 N" or "c N^alpha"
    params: dict[str, float]
    r2: float

    def __call__(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=float)
        if self.form == LOG_FORM:
            return self.params["a"] + self.params["b"] * np.log2(x)
        return self.params["c"] * x ** self.params["alpha"]


LOG_FORM, POWER_FORM = "a + b log2 N", "c N^alpha"


def _r2(y: np.ndarray, pred: np.ndarray) -> float:
    ss_res = float(((y - pred) ** 2).sum())
    ss_tot = float(((y - y.mean()) ** 2).sum())
    return 1.0 - ss_res / ss_tot if ss_tot > 0 else float("nan")


def fit_log(x, y) -> Fit:
    """Least squares y = a + b log2 x (the trainable prediction, Theorem 4.1's d = Theta(R log N))."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if len(x) < 2:
        raise ValueError(f"a fit needs at least 2 points, got {len(x)}")
    b, a = np.polyfit(np.log2(x), y, 1)
    fit = Fit(LOG_FORM, {"a": float(a), "b": float(b)}, float("nan"))
    return Fit(LOG_FORM, fit.params, _r2(y, fit(x)))


def fit_power(x, y) -> Fit:
    """y = c x^alpha by least squares in log-log (the frozen-embedding prediction); R^2 on y."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if len(x) < 2:
        raise ValueError(f"a fit needs at least 2 points, got {len(x)}")
    if (y <= 0).any():
        raise ValueError("a power-law fit needs y > 0")
    alpha, log_c = np.polyfit(np.log(x), np.log(y), 1)
    fit = Fit(POWER_FORM, {"c": float(np.exp(log_c)), "alpha": float(alpha)}, float("nan"))
    return Fit(POWER_FORM, fit.params, _r2(y, fit(x)))
