"""The exact binomial tail the code-book Monte Carlo is tested with (its intervals: `geofact.intervals`)."""

from __future__ import annotations

import math


def binomial_upper_tail(n: int, f: int, p: float) -> float:
    """P(X >= f) for X ~ Binomial(n, p), exactly (sum of terms)."""
    if f <= 0:
        return 1.0
    return min(1.0, sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(f, n + 1)))
