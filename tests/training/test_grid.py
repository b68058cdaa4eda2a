import json

import numpy as np
import pytest

from geofact.training.grid import (CELLS_ENV, PAPER_GRID, REGIMES, CapacityGrid, by_cell, capacity_threshold, ladder_grids,
                                  restriction)

SMALL = dict(N=16, R_values=[1, 4], d_values=[8, 16], seeds=[0, 1], lr=1e-3, batch_size=32, max_steps=10)


def test_capacity_grid_covers_both_regimes_and_clamps_the_batch():
    grid = CapacityGrid(**SMALL, checkpoints=[0, 5])
    configs = grid.configs()
    assert len(configs) == 2 * 2 * 2 * 2 and list(configs) == list(grid.keys())
    assert configs["frozen", 4, 8, 1].frozen_embeddings and not configs["learned", 4, 8, 1].frozen_embeddings
    assert configs["learned", 1, 8, 0].batch_size == 16 and configs["learned", 4, 8, 0].batch_size == 32  # N R = 16 < 32
    assert grid.config(1, 8, False, 0, N=64).batch_size == 32  # the run's own N R = 64 facts, not the grid's 16
    assert grid.config(1, 8, False, 0, N=8, batch_size=32).batch_size == 8
    assert configs["learned", 4, 16, 0].loss_threshold == 1e-4 and grid.checkpoints == (0, 5)
    assert grid.config(4, 8, False, 0, lr=0.5).lr == 0.5  # a variant of the grid's recipe
    assert CapacityGrid.from_parameter(None) is PAPER_GRID and CapacityGrid.from_parameter(SMALL) == CapacityGrid(**SMALL)


@pytest.mark.parametrize("field,value,message", [
    ("R_values", [], "R_values must be a non-empty increasing list"),
    ("d_values", [16, 8], "d_values must be a non-empty increasing list"),
    ("checkpoints", [0, 10], "checkpoints must be below max_steps=10"),
    ("perfect", 1.5, r"perfect must be in \(0, 1\]"),
    ("lr", -1.0, "lr must be > 0"),
    ("attention", "soft", "attention must be 'uniform' or 'learned'"),
])
def test_capacity_grid_names_the_bad_field(field, value, message):
    with pytest.raises(ValueError, match=message):
        CapacityGrid(**{**SMALL, field: value})
    with pytest.raises(ValueError, match="capacity_grid must be a dict"):
        CapacityGrid.from_parameter([1, 2])


def test_capacity_threshold_is_where_accuracy_stays_above_the_level():
    assert capacity_threshold([0.2, 0.995, 0.999], [8, 16, 32], 0.99) == 16
    assert capacity_threshold([0.995, 0.5, 0.999], [8, 16, 32], 0.99) == 32  # a dip resets it
    assert capacity_threshold([0.2, 0.5, 0.98], [8, 16, 32], 0.99) is None


def test_thresholds_and_headroom_per_R():
    grid = CapacityGrid(**{**SMALL, "d_values": [8, 16, 32]})
    accuracy = np.array([[[0.5, 0.6], [1.0, 1.0], [1.0, 1.0]], [[0.1, 0.1], [0.5, 0.5], [0.97, 1.0]]])  # (R, d, seed)
    d_min = grid.thresholds(accuracy)
    assert d_min == [16, None]
    headroom = grid.headroom(d_min)
    assert headroom[0].tolist() == [0.5, 1.0, 2.0] and np.isnan(headroom[1]).all()


def test_by_cell_arranges_values_as_R_by_d_by_seed():
    values = {(name, R, d, s): R * 100 + d + s / 10 for name in REGIMES for R in (1, 2) for d in (8, 16, 32) for s in (0, 1)}
    arrays = by_cell(values, [1, 2], [8, 16, 32], [0, 1])
    assert arrays["learned"].shape == (2, 3, 2) and arrays["frozen"][1, 2, 1] == pytest.approx(232.1)
    assert np.all(np.diff(arrays["learned"][:, :, 0], axis=1) > 0)


LADDERS = {"N": 64, "seeds": [0, 1], "lr": 1e-3, "batch_size": 64, "max_steps": 100, "checkpoints": [0, 50],
           "d_ladders": [{"R": 2, "d_values": [4, 8, 16]}, {"R": 4, "d_values": [8, 16]}]}


def test_ladder_grids_give_one_capacity_grid_per_R_with_its_own_d():
    grids = ladder_grids(LADDERS, precision="bf16")
    assert [(g.R_values, g.d_values) for g in grids] == [((2,), (4, 8, 16)), ((4,), (8, 16))]
    assert all(g.N == 64 and g.seeds == (0, 1) and g.checkpoints == (0, 50) and g.precision == "bf16" for g in grids)
    assert ladder_grids(None) == []


@pytest.mark.parametrize("change, message", [
    ({"d_ladders": []}, "d_ladders"),
    ({"R_values": [2]}, "not R_values or d_values"),
    ({"d_ladders": [{"R": 2}]}, "d_ladders must be"),
    ({"d_ladders": [{"R": 4, "d_values": [8]}, {"R": 2, "d_values": [8]}]}, "increasing, distinct R"),
    ({"d_ladders": [{"R": 2, "d_values": [8, 4]}]}, "d_values must be a non-empty increasing"),
])
def test_ladder_grids_name_what_is_wrong(change, message):
    with pytest.raises(ValueError, match=message):
        ladder_grids({**LADDERS, **change})


def test_a_lease_builds_the_grid_on_the_cells_it_names(monkeypatch):
    monkeypatch.delenv(CELLS_ENV, raising=False)
    whole = CapacityGrid.from_parameter(None)
    monkeypatch.setenv(CELLS_ENV, json.dumps({"d": [768, 256]}))
    part = CapacityGrid.from_parameter(None)
    assert part.d_values == (256, 768) and part.R_values == whole.R_values
    assert part.config(4, 256, True, 1) == whole.config(4, 256, True, 1)  # the same runs, so the same records
    monkeypatch.setenv(CELLS_ENV, json.dumps({"R": [2], "d": [32]}))
    assert (CapacityGrid.from_parameter(None).R_values, CapacityGrid.from_parameter(None).d_values) == ((2,), (32,))
    monkeypatch.setenv(CELLS_ENV, json.dumps({"d": [100]}))
    with pytest.raises(ValueError, match=r"grid cells: d must be among the grid's \[32, 64"):
        CapacityGrid.from_parameter(None)
    for bad in ('{"d": []}', '{"N": [4]}', '[4]', 'd=4'):
        monkeypatch.setenv(CELLS_ENV, bad)
        with pytest.raises(ValueError, match="GEOFACT_GRID_CELLS must be JSON"):
            restriction()
