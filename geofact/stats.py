"""Small exact statistics used to report Monte Carlo results honestly."""

from __future__ import annotations

import math


def wilson_interval(successes: int, trials: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion (95% by default)."""
    if trials <= 0:
        raise ValueError(f"trials must be > 0, got {trials}")
    p = successes / trials
    denom = 1 + z**2 / trials
    centre = (p + z**2 / (2 * trials)) / denom
    half = z * math.sqrt(p * (1 - p) / trials + z**2 / (4 * trials**2)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def binomial_upper_tail(n: int, f: int, p: float) -> float:
    """P(X >= f) for X ~ Binomial(n, p), exactly (sum of terms)."""
    if f <= 0:
        return 1.0
    return min(1.0, sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(f, n + 1)))
