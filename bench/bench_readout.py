"""The readout's ridge fits: geofact's torch closed form against scikit-learn's Ridge, and the cost of
choosing the penalty by subject-grouped cross-validation (scikit-learn's GroupKFold).

Run: python bench/bench_readout.py [--N 512] [--R 8] [--d 64] [--k 64]
Prints per-relation fits per second of each solver and their ratio, measured in one process on the same
data, and the largest difference between their maps (they must agree, or the benchmark fails); then the
time of one cross-validated readout (cv_alpha over six penalties, five folds) against one fixed-penalty
readout.
"""

from __future__ import annotations

import argparse
import time

import torch
from sklearn.linear_model import Ridge

from geofact.analysis.readout import cv_alpha, linear_readout, ridge, split_subjects


def timed(fn, repeats: int) -> tuple[float, object]:
    out = fn()  # warm-up
    start = time.perf_counter()
    for _ in range(repeats):
        out = fn()
    return (time.perf_counter() - start) / repeats, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--N", type=int, default=512)
    parser.add_argument("--R", type=int, default=8)
    parser.add_argument("--d", type=int, default=64)
    parser.add_argument("--k", type=int, default=64)
    parser.add_argument("--alpha", type=float, default=1e-3)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    g = torch.Generator().manual_seed(0)
    features = torch.randn(args.R, args.N, args.d, generator=g)  # (R, N, d)
    answers = torch.stack([torch.randperm(args.N, generator=g) for _ in range(args.R)])  # (R, N)
    vectors = torch.randn(args.N, args.k, generator=g)  # (N, k)
    train = split_subjects(args.N, 0.2, seed=0)

    def torch_fits():
        return [ridge(features[r, train], vectors[answers[r, train]], args.alpha) for r in range(args.R)]

    def sklearn_fits():
        return [Ridge(alpha=args.alpha).fit(features[r, train].numpy(), vectors[answers[r, train]].numpy())
                for r in range(args.R)]

    t_torch, maps = timed(torch_fits, args.repeats)
    t_sklearn, models = timed(sklearn_fits, args.repeats)
    gap = max(float((W - torch.from_numpy(m.coef_.T)).abs().max()) for (W, _), m in zip(maps, models))
    if gap > 1e-3:
        raise SystemExit(f"the two solvers disagree: largest map difference {gap:.2e}")
    print(f"N={args.N}, R={args.R}, d={args.d}, k={args.k}, alpha={args.alpha:g}, {torch.get_num_threads()} threads")
    print(f"torch closed form : {args.R / t_torch:10.0f} fits/s")
    print(f"sklearn Ridge     : {args.R / t_sklearn:10.0f} fits/s")
    print(f"ratio torch / sklearn: {t_sklearn / t_torch:.2f}x   (largest map difference {gap:.1e})")
    t_fixed, _ = timed(lambda: linear_readout(features, answers, vectors, train, args.alpha), max(1, args.repeats // 4))
    alphas = (1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0)
    t_cv, (chosen, _) = timed(lambda: cv_alpha(features, answers, vectors, train, alphas, folds=5), 1)
    print(f"one readout at a fixed penalty: {t_fixed * 1e3:.1f} ms; choosing it by 5-fold CV over {len(alphas)} penalties: "
          f"{t_cv * 1e3:.0f} ms ({t_cv / t_fixed:.0f}x; chose {chosen:g})")


if __name__ == "__main__":
    main()
