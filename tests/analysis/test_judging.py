import numpy as np

from geofact.analysis.judging import cutoff_table, format_table, grid_state, sufficient_capacity
from geofact.training.grid import CapacityGrid

GRID = CapacityGrid(N=16, R_values=[2, 4], d_values=[8, 16, 32], seeds=[0, 1], lr=1e-3, batch_size=16, max_steps=10)


def test_sufficient_capacity_needs_every_seed_to_memorise_and_headroom():
    accuracy = np.ones((2, 3, 2))
    accuracy[1, 1, 1] = 0.5  # R=4, d=16: one seed does not memorise
    headroom = np.array([[1.0, 2.0, 4.0], [np.nan, 1.0, 2.0]])
    assert sufficient_capacity(GRID, accuracy, headroom, min_headroom=2.0).tolist() == [[False, True, True], [False, False, True]]
    assert sufficient_capacity(GRID, accuracy, headroom, 1.0).tolist() == [[True, True, True], [False, False, True]]


def test_the_cutoff_table_moves_with_both_cutoffs():
    values = np.array([[0.5, 0.92, 0.99], [0.1, 0.95, 0.97]])
    population = {1.0: np.array([[False, True, True], [False, True, True]]), 4.0: np.array([[False, False, True], [False, False, False]])}
    rows = cutoff_table(values, population, [0.9, 0.95])
    verdict = {(r["min_headroom"], r["cutoff"]): (r["holds"], r["passing"], r["cells"]) for r in rows}
    assert verdict == {(1.0, 0.9): (True, 4, 4), (1.0, 0.95): (False, 3, 4), (4.0, 0.9): (True, 1, 1), (4.0, 0.95): (True, 1, 1)}
    table = format_table(rows, "readout")
    assert "| 1 | holds (4/4) | fails (3/4) |" in table
    assert cutoff_table(values, {6.0: np.zeros((2, 3), bool)}, [0.9])[0]["holds"] is False  # no cell: never "holds"


def test_grid_state_reads_thresholds_population_and_regime_off_the_records():
    grid = CapacityGrid(N=16, R_values=[2], d_values=[8, 16, 32], seeds=[0], lr=1e-3, batch_size=16, max_steps=10)
    records = {}
    for name in ("learned", "frozen"):
        for d, (acc, met) in zip(grid.d_values, [(0.5, False), (1.0, False), (1.0, True)]):
            records[name, 2, d, 0] = {"accuracy": acc, "stopped_early": met, "steps": 5 if met else 10, "final_loss": 1e-5 if met else 1e-2}
    state = grid_state(grid, records, [1.0, 2.0])
    assert state.d_min == [16] and state.headroom.tolist() == [[0.5, 1.0, 2.0]]
    assert state.population[1.0].tolist() == [[False, True, True]] and state.population[2.0].tolist() == [[False, False, True]]
    whole = state.grid_regime(grid)
    assert (whole.runs, whole.memorised, whole.converged, whole.headroom_max) == (6, 4, 2, 2.0)
    at_threshold = state.judged_regime(grid, state.population[1.0])  # d=16 memorised without meeting the stop rule
    assert (at_threshold.runs, at_threshold.converged_fraction, at_threshold.headroom_max) == (2, 0.5, 2.0)
    roomy = state.judged_regime(grid, state.population[2.0], None)
    assert (roomy.runs, roomy.converged_fraction) == (2, 1.0)


def test_the_runs_read_at_other_points_are_the_judged_cells_and_the_cells_where_a_frozen_run_memorises():
    records = {}
    for name in ("learned", "frozen"):
        for R in GRID.R_values:
            for d in GRID.d_values:
                for s in GRID.seeds:
                    memorised = (name == "learned" and d >= 16) or (name, R, d, s) == ("frozen", 4, 8, 1)
                    records[name, R, d, s] = {"accuracy": 1.0 if memorised else 0.3, "stopped_early": memorised,
                                              "steps": 5, "final_loss": 1e-5}
    state = grid_state(GRID, records, [2.0])
    judged = state.population[2.0]  # d = 32 at both R (d_min = 16)
    keys = state.verdict_keys(GRID, judged)
    cells = sorted({(k[1], k[2]) for k in keys})
    assert cells == [(2, 32), (4, 8), (4, 32)]  # the judged cells, and R = 4, d = 8 where one frozen seed memorises
    assert len(keys) == len(cells) * 2 * len(GRID.seeds)  # every run of those cells, both regimes
