"""The capacity grid of Section 5 (R x d x seeds, learned and frozen embeddings), shared by the
exp-capacity page and the mechanism analyses, which read the same cached models.
"""

from __future__ import annotations

import numpy as np

from geofact.training.config import TrainConfig

REGIMES = {"learned": False, "frozen": True}  # name -> TrainConfig.frozen_embeddings


def capacity_config(N: int, R: int, d: int, frozen: bool, seed: int, lr: float, max_steps: int,
                    batch_size: int) -> TrainConfig:
    """One run of the grid; the batch shrinks to N R when the task has fewer facts than a batch."""
    return TrainConfig(N=N, R=R, d=d, frozen_embeddings=frozen, seed=seed, lr=lr, max_steps=max_steps,
                       batch_size=min(batch_size, N * R))


def capacity_grid(N: int, R_values: list[int], d_values: list[int], seeds: list[int], lr: float, max_steps: int,
                  batch_size: int) -> dict[tuple[str, int, int, int], TrainConfig]:
    """{(regime, R, d, seed): config} over both regimes."""
    if not (R_values and d_values and seeds):
        raise ValueError("R_values, d_values and seeds must be non-empty")
    return {(name, R, d, s): capacity_config(N, R, d, frozen, s, lr, max_steps, batch_size)
            for name, frozen in REGIMES.items() for R in R_values for d in d_values for s in seeds}


def capacity_threshold(mean_accuracy: np.ndarray, d_values: list[int], level: float) -> int | None:
    """Smallest d of the grid from which the mean accuracy (one entry per d) stays >= level (None: never)."""
    ok = np.asarray(mean_accuracy) >= level
    for j in range(len(d_values)):
        if ok[j:].all():
            return d_values[j]
    return None


def by_cell(values: dict[tuple[str, int, int, int], float], R_values: list[int], d_values: list[int],
            seeds: list[int]) -> dict[str, np.ndarray]:
    """{regime: array (R, d, seed)} from per-run values keyed as capacity_grid keys them."""
    return {name: np.array([[[values[name, R, d, s] for s in seeds] for d in d_values] for R in R_values], dtype=float)
            for name in REGIMES}
