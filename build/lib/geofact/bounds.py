"""Theorem 4.2 (`thm:k-hop lower bound`, proof in Appendix G): bits a no-CoT k-hop transformer needs.

    W >= max(B_global, B_local) - R D,
    B_global = (R - 1) N log2(N / e) - N D,
    B_local  = p [R^k (log2 N - 1) - D],   p = floor(N / (2 R^{2k})),

with W the bits of the attention/MLP weights and D the bits of one token embedding. The statement
and its proof disagree on B_local: the proof's last step has M = R^{2k} where the statement has R^k
(`leaves="proof"` gives the proof's version). `exact=True` replaces Stirling's log2 N! >= N log2(N/e)
by log2 N! itself, which is what the counting argument bounds before the approximation.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np

Leaves = Literal["statement", "proof"]


def _check(N: int, R: int, k: int) -> None:
    if int(N) != N or N < 2:
        raise ValueError(f"N must be an integer >= 2, got {N!r}")
    if int(R) != R or R < 2:
        raise ValueError(f"R must be an integer >= 2 (the theorem assumes R >= 2), got {R!r}")
    if int(k) != k or k < 2:
        raise ValueError(f"k must be an integer >= 2 (the theorem assumes k >= 2), got {k!r}")


def log2_factorial(N: int) -> float:
    return math.lgamma(N + 1) / math.log(2)


def n_disjoint_trees(N: int, R: int, k: int) -> int:
    """p = floor(N / (2 R^{2k})): the number of vertex-disjoint depth-k trees the proof extracts."""
    _check(N, R, k)
    return N // (2 * R ** (2 * k))


def b_global(N: int, R: int, k: int, D: np.ndarray | float, exact: bool = False) -> np.ndarray:
    """(R - 1) N log2(N/e) - N D, or (R - 1) log2 N! - N D with exact=True."""
    _check(N, R, k)
    log_fact = log2_factorial(N) if exact else N * math.log2(N / math.e)
    return (R - 1) * log_fact - N * np.asarray(D, dtype=float)


def b_local(N: int, R: int, k: int, D: np.ndarray | float, leaves: Leaves = "statement") -> np.ndarray:
    """p [L (log2 N - 1) - D] with L = R^k (statement) or R^{2k} (the proof's M)."""
    if leaves not in ("statement", "proof"):
        raise ValueError(f"leaves must be 'statement' or 'proof', got {leaves!r}")
    n_leaves = R**k if leaves == "statement" else R ** (2 * k)
    return n_disjoint_trees(N, R, k) * (n_leaves * (math.log2(N) - 1) - np.asarray(D, dtype=float))


def min_weight_bits(
    N: int, R: int, k: int, D: np.ndarray | float, leaves: Leaves = "statement", exact: bool = False
) -> np.ndarray:
    """The theorem's lower bound on W, max(B_global, B_local) - R D, clipped at 0 (bits are non-negative)."""
    D = np.asarray(D, dtype=float)
    bound = np.maximum(b_global(N, R, k, D, exact), b_local(N, R, k, D, leaves)) - R * D
    return np.maximum(bound, 0.0)
