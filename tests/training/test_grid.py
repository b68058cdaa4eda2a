import numpy as np
import pytest

from geofact.training.grid import REGIMES, by_cell, capacity_grid, capacity_threshold


def test_capacity_grid_covers_both_regimes_and_clamps_the_batch():
    grid = capacity_grid(N=16, R_values=[1, 4], d_values=[8], seeds=[0, 1], lr=1e-3, max_steps=10, batch_size=32)
    assert len(grid) == 2 * 2 * 1 * 2
    assert grid["frozen", 4, 8, 1].frozen_embeddings and not grid["learned", 4, 8, 1].frozen_embeddings
    assert grid["learned", 1, 8, 0].batch_size == 16 and grid["learned", 4, 8, 0].batch_size == 32  # N R = 16 < 32
    with pytest.raises(ValueError, match="must be non-empty"):
        capacity_grid(16, [], [8], [0], 1e-3, 10, 32)


def test_capacity_threshold_is_where_accuracy_stays_above_the_level():
    assert capacity_threshold([0.2, 0.995, 0.999], [8, 16, 32], 0.99) == 16
    assert capacity_threshold([0.995, 0.5, 0.999], [8, 16, 32], 0.99) == 32  # a dip resets it
    assert capacity_threshold([0.2, 0.5, 0.98], [8, 16, 32], 0.99) is None


def test_by_cell_arranges_values_as_R_by_d_by_seed():
    values = {(name, R, d, s): R * 100 + d + s / 10 for name in REGIMES for R in (1, 2) for d in (8, 16, 32) for s in (0, 1)}
    arrays = by_cell(values, [1, 2], [8, 16, 32], [0, 1])
    assert arrays["learned"].shape == (2, 3, 2) and arrays["frozen"][1, 2, 1] == pytest.approx(232.1)
    assert np.all(np.diff(arrays["learned"][:, :, 0], axis=1) > 0)
