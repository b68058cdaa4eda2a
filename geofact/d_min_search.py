"""d_min(N): the smallest embedding dimension at which trained accuracy reaches a level (Section 5.1,
`fig:scaling`), found by doubling then bisection, and the two curve fits the paper compares.

The search assumes accuracy grows with d (more capacity never hurts). Trained accuracy is noisy, so
a curve can be non-monotone near the threshold; the search reports every d it tried with its
accuracy, so a page can show where that happened.

Curves of one family (d_min at N = 2^7, 2^8, ...) can be searched as a chain: each starts from a
guess extrapolated from the curves before it and gallops from there instead of doubling from
d_start, which brackets d_min in about half the runs when d_min moves little from one curve to the
next (`find_d_min_streaming(..., after=...)`). Every search ends with its level bracketed to
rel_tol either way. Where accuracy grows with d there is one crossing and both find it; where a
noisy curve crosses the level more than once, the guess decides which crossing is bracketed, so
chained and unchained searches can report different d_min (both honest brackets of a crossing).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Generator, Hashable

import numpy as np

from geofact.evidence import t_quantile


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


def _search(level: float, d_start: int, d_max: int, rel_tol: float,
            guess: int | None = None) -> Generator[int, float, DminSearch]:
    """One search as a generator: yields the next d to try, is sent its accuracy, returns the result.

    Without a guess, d doubles from d_start until it passes. With one, d starts there and gallops:
    up while failing, down while passing, by steps that double from rel_tol of the guess (at least
    1), so that a guess close to d_min brackets it in two runs. Then bisection, in both cases.
    """
    search = DminSearch(level=level, d_min=None, d_max=d_max)

    def passes(d: int, acc: float) -> bool:
        search.trials.append((d, float(acc)))
        return acc >= level

    if guess is None:
        lo, d = 0, d_start
        while not passes(d, (yield d)):
            if d == d_max:
                return search
            lo, d = d, min(2 * d, d_max)
        hi = d
    else:
        d = min(max(guess, 1), d_max)
        step = max(1, math.floor(rel_tol * d))
        if passes(d, (yield d)):
            lo, hi = 0, d
            while hi > 1:
                d = max(1, hi - step)
                if not passes(d, (yield d)):
                    lo = d
                    break
                hi, step = d, 2 * step
        else:
            lo = d
            while True:
                if lo == d_max:
                    return search
                d = min(lo + step, d_max)
                if passes(d, (yield d)):
                    hi = d
                    break
                lo, step = d, 2 * step
    while hi - lo > max(1, math.floor(rel_tol * hi)):
        mid = (lo + hi) // 2
        if passes(mid, (yield mid)):
            hi = mid
        else:
            lo = mid
    search.d_min = hi
    return search


def chain_guess(earlier: list[int | None], d_max: int) -> int:
    """Where a chained search starts, from the d_min of the curves before it (nearest first): the
    last one's, times its ratio to the one before (geometric extrapolation: d_min grows by a similar
    factor per step of a doubling N); d_max after a curve that failed within d_max."""
    last = earlier[0]
    if last is None:
        return d_max
    if len(earlier) < 2 or earlier[1] is None:
        return last
    return min(max(1, round(last * last / earlier[1])), d_max)


def family_d_min(searches: list[DminSearch]) -> int | None:
    """A family's d_min for the chain's guess: its curves' mean (rounded), those that failed within d_max left out;
    None when all did."""
    found = [s.d_min for s in searches if s.d_min is not None]
    return round(sum(found) / len(found)) if found else None


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
    asked: list[tuple[Hashable, int]] = []

    def answer_round() -> list[tuple[Hashable, int, float]]:
        pending = asked.copy()
        asked.clear()
        return [(k, d, acc) for (k, d), acc in zip(pending, accuracies_at(pending), strict=True)]

    return find_d_min_streaming(asked.extend, answer_round, keys, level, d_start, d_max, rel_tol)


def find_d_min_streaming(ask: Callable[[list[tuple[Hashable, int]]], None],
                         answers: Callable[[], list[tuple[Hashable, int, float]]], keys: list[Hashable],
                         level: float = 0.95, d_start: int = 2, d_max: int = 4096,
                         rel_tol: float = 0.0, after: dict[Hashable, Hashable] | None = None,
                         together: dict[Hashable, Hashable] | None = None) -> dict[Hashable, DminSearch]:
    """find_d_min for several curves, each advancing as soon as its own answer comes back.

    `ask` is handed the (key, d) pairs to measure next; `answers()` waits until some of them are
    measured and returns those as (key, d, accuracy). Rounds (find_d_min_many) make every curve wait
    for the slowest run of the round; here a trainer with several workers (training.sweep.SweepPool)
    never idles while some curve has a run to try. Without `after`, the result is the same: each
    curve's trials depend only on its own accuracies.

    `after` maps a curve to the curve it follows (its predecessor in a chain, e.g. the same curve at
    N / 2): it starts once that one is done, at `chain_guess` of the chain's results so far, instead
    of doubling from d_start.

    `together` maps curves to a family (e.g. the seeds of one curve at one N): a chained family starts once every
    curve of the family it follows is done, all its curves at one guess, `chain_guess` of the families' d_min
    (`family_d_min`). Each curve's search is still its own, from that guess; while the curves of a family answer
    alike they ask the same d at the same time, which a trainer stacks (runs of one shape: exp-scaling's seeds).
    """
    _check(level, d_start, d_max, rel_tol)
    follows = dict(after or {})
    for k, first in follows.items():
        if k not in keys or first not in keys:
            raise ValueError(f"after must map curves among keys to curves among keys, got {k!r} -> {first!r}")
        seen = {k}
        while first in follows:
            if first in seen:
                raise ValueError(f"after has a cycle through {first!r}")
            seen.add(first)
            first = follows[first]
    together = together or {}
    family = {k: ("family", together[k]) if k in together else ("curve", k) for k in keys}  # tagged: no label is a key
    members: dict[Hashable, list[Hashable]] = {}
    for k in keys:
        members.setdefault(family[k], []).append(k)
    for f, curves in members.items():
        if len({family[follows[k]] if k in follows else None for k in curves}) != 1:
            raise ValueError(f"the curves of family {f[1]!r} must all follow curves of one family, or none")
    searches: dict[Hashable, Generator[int, float, DminSearch]] = {}
    outstanding: dict[Hashable, int] = {}
    done: dict[Hashable, DminSearch] = {}
    waiting: dict[Hashable, list[Hashable]] = {}  # family -> the curves that follow its curves
    for k, first in follows.items():
        waiting.setdefault(family[first], []).append(k)

    def start(k: Hashable) -> tuple[Hashable, int]:
        earlier, p = [], follows.get(k)
        while p is not None:
            earlier.append(family_d_min([done[m] for m in members[family[p]]]))
            p = follows.get(p)
        guess = chain_guess(earlier, d_max) if earlier else None
        searches[k] = _search(level, d_start, d_max, rel_tol, guess)
        outstanding[k] = next(searches[k])
        return k, outstanding[k]

    ask([start(k) for k in keys if k not in follows])
    while outstanding:
        following, answered = [], answers()
        if not answered:
            raise RuntimeError(f"answers() returned nothing while {len(outstanding)} curves wait for one")
        for k, d, acc in answered:
            if outstanding.get(k) != d:
                raise ValueError(f"an answer for curve {k!r} at d = {d}, which was not asked")
            try:
                outstanding[k] = searches[k].send(acc)
                following.append((k, outstanding[k]))
            except StopIteration as stop:
                del outstanding[k]
                done[k] = stop.value
                if all(m in done for m in members[family[k]]):
                    following += [start(n) for n in waiting.pop(family[k], [])]
        if following:
            ask(following)
    return {k: done[k] for k in keys}


@dataclass(frozen=True)
class Fit:
    """y ~ model(x) with its parameters, R^2 (computed on y itself, so the two fits compare) and a
    confidence interval on the shape parameter (b of the log form, alpha of the power law)."""

    form: str  # "a + b log2 N" or "c N^alpha"
    params: dict[str, float]
    r2: float
    interval: tuple[float, float] = (float("nan"), float("nan"))  # on b or alpha; NaN with fewer than 3 points
    level: float = 0.95  # of the interval

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


def _line(u: np.ndarray, v: np.ndarray, level: float) -> tuple[float, float, tuple[float, float]]:
    """Least squares v = intercept + slope u, and the Student-t interval on the slope."""
    slope, intercept = np.polyfit(u, v, 1)
    n = len(u)
    if n < 3:
        return float(intercept), float(slope), (float("nan"), float("nan"))
    residual = v - (intercept + slope * u)
    s_xx = float(((u - u.mean()) ** 2).sum())
    se = math.sqrt(float((residual**2).sum()) / (n - 2) / s_xx) if s_xx > 0 else float("nan")
    half = t_quantile(level, n - 2) * se
    return float(intercept), float(slope), (float(slope - half), float(slope + half))


def _points(x, y) -> tuple[np.ndarray, np.ndarray]:
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if len(x) < 2 or len(x) != len(y):
        raise ValueError(f"a fit needs at least 2 (x, y) points of equal count, got {len(x)} and {len(y)}")
    if len(set(x.tolist())) < 2:
        raise ValueError("a fit needs at least 2 distinct x")
    return x, y


def fit_log(x, y, level: float = 0.95) -> Fit:
    """Least squares y = a + b log2 x (the trainable prediction, Theorem 4.1's d = Theta(R log N)),
    with a `level` interval on b (x may repeat: one point per seed)."""
    x, y = _points(x, y)
    a, b, interval = _line(np.log2(x), y, level)
    fit = Fit(LOG_FORM, {"a": a, "b": b}, float("nan"))
    return Fit(LOG_FORM, fit.params, _r2(y, fit(x)), interval, level)


def fit_power(x, y, level: float = 0.95) -> Fit:
    """y = c x^alpha by least squares in log-log (the frozen-embedding prediction); R^2 on y, and a
    `level` interval on alpha."""
    x, y = _points(x, y)
    if (y <= 0).any():
        raise ValueError("a power-law fit needs y > 0")
    log_c, alpha, interval = _line(np.log(x), np.log(y), level)
    fit = Fit(POWER_FORM, {"c": float(np.exp(log_c)), "alpha": alpha}, float("nan"))
    return Fit(POWER_FORM, fit.params, _r2(y, fit(x)), interval, level)


def log_log_curvature(x, y) -> tuple[float, float, int]:
    """(gamma, its standard error, degrees of freedom) of least squares log y = c0 + c1 log x + gamma (log x)^2.

    A power law c x^alpha is straight in log-log (gamma = 0); a + b log x, the trainable prediction, is
    concave there (gamma < 0) whatever a and b: the sign of gamma tells the two forms apart where their
    R^2 on a short range of x cannot (exp-scaling)."""
    x, y = _points(x, y)
    if (y <= 0).any():
        raise ValueError("a log-log fit needs y > 0")
    u = np.log(x)
    df = len(u) - 3
    if len(set(u.tolist())) < 3:  # a parabola needs three distinct x
        return float("nan"), float("nan"), max(df, 0)
    design = np.stack([np.ones_like(u), u, u**2], axis=1)
    coef, *_ = np.linalg.lstsq(design, np.log(y), rcond=None)
    if df < 1:  # fitted exactly: no error to estimate
        return float(coef[2]), float("nan"), 0
    residual = np.log(y) - design @ coef
    covariance = float((residual**2).sum()) / df * np.linalg.inv(design.T @ design)
    return float(coef[2]), math.sqrt(max(float(covariance[2, 2]), 0.0)), df
