"""Exact all-pairs check of ±1 codes: bit-packed popcounts against a plain Gram-matrix loop.

Run: python bench/bench_codes.py [--k 8192] [--m 60]
Prints pairs per second for each method and their ratio, measured in one process on the same codes.
Both methods must agree on the number of violating pairs, or the benchmark fails.
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
import torch

from geofact import codes


def gram_violations(c: np.ndarray, threshold: float, block: int = 2048) -> int:
    """The obvious way: float32 Gram blocks with torch, counting |<v_i, v_j>| > threshold for i < j."""
    x = torch.as_tensor(c, dtype=torch.float32)
    total = 0
    for i in range(0, len(x), block):
        g = torch.triu(x[i : i + block] @ x[i:].T, diagonal=1)  # (rows, k - i); keeps pairs j > i only
        total += int((g.abs() > threshold).sum())
    return total


def timed(fn, repeats: int) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return best, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--k", type=int, default=8192)
    parser.add_argument("--m", type=int, default=60)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    c = codes.random_codes(args.k, args.m, np.random.default_rng(0))
    t = 0.3 * args.m  # low enough that many pairs violate, so the two counts are a real cross-check
    pairs = math.comb(args.k, 2)
    t_pop, n_pop = timed(lambda: codes.pair_stats(c, t).n_violations, args.repeats)
    t_gram, n_gram = timed(lambda: gram_violations(c, t), args.repeats)
    assert n_pop == n_gram, (n_pop, n_gram)
    print(f"k={args.k} m={args.m} pairs={pairs:.3g} violations={n_pop} torch threads={torch.get_num_threads()}")
    print(f"popcount (geofact.codes.pair_stats): {pairs / t_pop:.3g} pairs/s")
    print(f"float32 Gram blocks (torch):         {pairs / t_gram:.3g} pairs/s")
    print(f"ratio popcount / Gram: {t_gram / t_pop:.2f}x")


if __name__ == "__main__":
    main()
