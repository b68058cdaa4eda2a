"""The mechanism along training (geofact.pages.along_training): peak, stop and drop per run and cell,
and the erosion test against its tolerance."""

import io
import math
from dataclasses import replace

import numpy as np
import pytest

from geofact.analysis.trajectory import Point
from geofact.evidence import FAILS, HOLDS, INCONCLUSIVE
from geofact.pages.along_training import (
    cell_courses,
    cells_meeting,
    course_table,
    drop_panels,
    erosion_summary,
    erosion_test,
    run_course,
    tolerance_table,
)
from geofact.training.grid import REGIMES, CapacityGrid

GRID = CapacityGrid(N=16, R_values=(1, 2), d_values=(4, 8), seeds=(0, 1, 2), lr=1e-3, batch_size=16, max_steps=100,
                    checkpoints=(0, 50))


def states(values: list[float], steps=(0, 50, 80)) -> list[Point]:
    """A run's kept states and its stop (the last), sorted by step."""
    return [Point(step, 0.1, 1.0, i == len(values) - 1, {"m": v}) for i, (step, v) in enumerate(zip(steps, values))]


def test_a_run_course_is_its_peak_the_peak_step_and_its_stop():
    assert run_course(states([0.2, 0.9, 0.7]), "m") == (0.9, 50, 0.7)
    assert run_course(states([0.2, 0.5, 0.7]), "m") == (0.7, 80, 0.7)  # best at the stop: no drop


def course_cells(drop: float, spread: float = 0.0) -> list:
    """Every run peaks at 0.9 and ends `drop` lower (seed s: plus s * spread); R = 2 cells are judged."""
    points = {(regime, R, d, s): states([0.1, 0.9, 0.9 - drop - s * spread]) for regime in REGIMES
              for R in GRID.R_values for d in GRID.d_values for s in GRID.seeds}
    headroom = np.array([[1.0, 2.0], [3.0, 6.0]])
    judged = np.array([[False, False], [True, True]])
    return cell_courses(GRID, points, "m", headroom, judged)


def test_cells_hold_each_seeds_peak_and_stop_and_their_judged_flag():
    cells = course_cells(0.3, spread=0.01)
    assert len(cells) == 2 * 2 * 2 and sum(c.judged for c in cells) == 4
    cell = next(c for c in cells if c.regime == "frozen" and c.R == 2 and c.d == 8)
    assert cell.headroom == 6.0 and cell.peaks == (0.9, 0.9, 0.9) and cell.peak_steps == (50, 50, 50)
    assert np.allclose(cell.drops, [0.3, 0.31, 0.32])
    drop = cell.estimate("drop")
    assert drop.n == 3 and drop.lo < 0.31 < drop.hi


def test_erosion_is_called_only_where_the_drop_clears_the_tolerance():
    assert erosion_test(course_cells(0.3, spread=0.01), "learned", 0.05).verdict == FAILS  # erodes: "persists" fails
    assert erosion_test(course_cells(0.0, spread=0.001), "learned", 0.05).verdict == HOLDS  # persists
    assert erosion_test(course_cells(0.04, spread=0.02), "learned", 0.05).verdict == INCONCLUSIVE  # at the tolerance
    with pytest.raises(ValueError, match="tolerance must be > 0"):
        erosion_test(course_cells(0.0), "learned", 0.0)


def test_no_judged_cell_gives_no_estimate_and_an_inconclusive_call():
    cells = [c for c in course_cells(0.3) if not c.judged]
    test = erosion_test(cells, "learned", 0.05)
    assert test.verdict == INCONCLUSIVE and math.isnan(test.estimate.value) and "no judged cell" in test.estimate.method


def test_the_summary_counts_cells_at_peak_and_stop_and_tabulates_every_judged_cell():
    cells = course_cells(0.3, spread=0.01)
    assert cells_meeting(cells, "learned", 0.8) == {"peak": 2, "stop": 0, "of": 2}
    text, reported = erosion_summary({16: cells}, "metric", 0.05, [0.02, 0.5], 0.8, "high")
    assert reported["N=16 learned"]["high at peak and stop"] == {"peak": 2, "stop": 0, "of": 2}
    assert reported["N=16 frozen"]["erosion"]["verdict"] == FAILS
    assert text.count("| 16 | learned | 2 |") == 2 and "| 16 | learned | 1 |" not in course_table([c for c in cells if c.judged])
    table = tolerance_table({16: cells}, [0.02, 0.5])
    assert "does not hold | holds" in table  # a drop of about 0.31 is erosion at 0.02 and not at 0.5


def test_the_drop_figure_draws_grids_without_a_threshold():
    from matplotlib import pyplot as plt

    cells = course_cells(0.3)
    no_threshold = [replace(c, headroom=math.nan) for c in cells]
    fig, axes = plt.subplots(1, 2)
    drop_panels(axes, {16: no_threshold}, "metric", 0.05)
    fig.savefig(io.BytesIO(), format="png")  # a log axis with nothing on it would raise here
    assert axes[0].get_xscale() == "linear" and "no threshold" in axes[0].get_title()
    fig, axes = plt.subplots(1, 2)
    drop_panels(axes, {16: cells}, "metric", 0.05)
    fig.savefig(io.BytesIO(), format="png")
    assert axes[0].get_xscale() == "log" and len(axes[1].lines) > 0
    with pytest.raises(ValueError, match="one axis per regime"):
        drop_panels(axes[:1], {16: cells}, "metric")
    plt.close("all")


def test_a_grid_keeping_a_tail_reports_the_range_over_its_tail_and_stop():
    tailed = replace(GRID, keep_tail=(10, 2))  # a run stopping at step 80 keeps steps 60 and 70
    points = {(regime, R, d, s): states([0.1, 0.9, 0.8 + 0.01 * s, 0.95, 0.85], steps=(0, 50, 60, 70, 80))
              for regime in REGIMES for R in GRID.R_values for d in GRID.d_values for s in GRID.seeds}
    cells = cell_courses(tailed, points, "m", np.array([[1.0, 2.0], [3.0, 6.0]]), np.array([[False, False], [True, True]]))
    assert np.allclose(cells[0].tails, [0.15, 0.14, 0.13]) and cells[0].keep_tail == (10, 2)  # step 50 is no tail state
    assert cells[0].peaks == (0.9, 0.9, 0.9)  # the tail's 0.95 is no peak: peaks are read at the checkpoints and the stop
    text, reported = erosion_summary({16: cells}, "metric", 0.135, [0.05], 0.8, "high")
    assert reported["tail"]["N=16 learned"] == {"median": pytest.approx(0.14), "max": pytest.approx(0.15), "n": 6,
                                               "at_least_tolerance": 4}
    assert "last 2 multiples of 10 steps" in text
    untailed = cell_courses(GRID, points, "m", np.ones((2, 2)), np.ones((2, 2), dtype=bool))
    assert untailed[0].tails == () and "tail" not in erosion_summary({16: untailed}, "metric", 0.09, [0.05], 0.8, "high")[1]


def test_courses_by_n_are_the_pages_own_cells_at_its_n_and_the_drop_figure_shows_them(monkeypatch):
    from matplotlib import pyplot as plt

    from geofact.pages import along_training

    points = {(regime, R, d, s): states([0.1, 0.9, 0.6]) for regime in REGIMES for R in GRID.R_values
              for d in GRID.d_values for s in GRID.seeds}
    headroom, judged = np.array([[1.0, 2.0], [3.0, 6.0]]), np.array([[False, False], [True, True]])
    second = course_cells(0.1)[:2]
    asked = []
    monkeypatch.setattr(along_training, "grid_cells", lambda *args: asked.append(args) or {16: second, 32: second})
    by_n = along_training.courses_by_n(GRID, points, "m", headroom, judged, ["second grid"], "cache", len, "name", {},
                                       3.0, "cpu", "desc")
    assert by_n[16] == cell_courses(GRID, points, "m", headroom, judged) + second and by_n[32] == second
    assert asked == [(["second grid"], "cache", len, "name", {}, "m", 3.0, "cpu", "desc")]
    monkeypatch.setattr(plt, "show", lambda: None)
    along_training.drop_figure(by_n, "metric", 0.05)
    assert [ax.get_xscale() for ax in plt.gcf().axes] == ["log", "log"]
    plt.close("all")
