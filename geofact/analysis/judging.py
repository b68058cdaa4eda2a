"""Which cells a mechanism claim is about, and how its verdict moves with its cutoffs (Section 5.1).

The paper judges the readout, intervention and transfer claims on "all cells with sufficient
capacity" without saying where that begins. The rule used here:

    a cell (R, d) has sufficient capacity when every seed of its learned-embedding model memorises
    (accuracy >= perfect) and d is at least `min_headroom` times d_min(R), the smallest grid d that
    memorises.

A run at the threshold memorises without meeting the stop rule (its loss creeps down for the whole
budget), so a verdict on threshold cells is not taken where the paper takes it. The selection does not
look at the stop rule itself: whether the judged runs met it is the regime check of the verdict
(`GridState.judged_regime`, geofact.regime). `cutoff_table` shows the verdict at every
(metric cutoff, headroom cutoff) pair so that a reader can see how much it depends on them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from geofact.training.grid import CapacityGrid
from geofact.regime import Regime, regime


def sufficient_capacity(grid: CapacityGrid, accuracy: np.ndarray, headroom: np.ndarray, min_headroom: float = 1.0) -> np.ndarray:
    """(R, d) bool: cells whose learned runs all memorise, with d / d_min(R) >= min_headroom.

    accuracy: (R, d, seed) for the learned regime; headroom: (R, d) (grid.headroom)."""
    return (accuracy >= grid.perfect).all(-1) & (np.nan_to_num(headroom, nan=0.0) >= min_headroom)


def cutoff_table(values: np.ndarray, population: dict[float, np.ndarray], cutoffs: list[float],
                 above: bool = True) -> list[dict]:
    """Verdict of "every cell of the population has value >= cutoff" (or <= when above=False), for each
    metric cutoff and each population (keyed by its headroom cutoff). values: (R, d) means over seeds."""
    rows = []
    for h, cells in population.items():
        for cutoff in cutoffs:
            judged = values[cells]
            ok = judged >= cutoff if above else judged <= cutoff
            rows.append({"min_headroom": h, "cutoff": cutoff, "cells": int(cells.sum()), "passing": int(ok.sum()),
                         "holds": bool(cells.any() and ok.all())})
    return rows


def format_table(rows: list[dict], metric: str, above: bool = True, population: str = "cells with d/d_min >=") -> str:
    """A Markdown table of cutoff_table rows: population cutoffs (headroom by default) down, metric cutoffs across."""
    hs = sorted({r["min_headroom"] for r in rows})
    cs = sorted({r["cutoff"] for r in rows})
    sign = ">=" if above else "<="
    lines = [f"| {population} | " + " | ".join(f"{metric} {sign} {c:g}" for c in cs) + " |",
             "|---|" + "---|" * len(cs)]
    for h in hs:
        cells = []
        for c in cs:
            r = next(r for r in rows if r["min_headroom"] == h and r["cutoff"] == c)
            verdict = "holds" if r["holds"] else ("no cell" if not r["cells"] else "fails")
            cells.append(f"{verdict} ({r['passing']}/{r['cells']})")
        lines.append(f"| {h:g} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


REGIME_MAX_R = 8  # the headroom requirement covers R up to this (the grid maps larger R only for thresholds)


@dataclass(frozen=True)
class GridState:
    """What every single-hop page reads off a trained capacity grid before it judges anything."""

    accuracy: dict[str, np.ndarray]  # {regime: (R, d, seed)}
    converged: dict[str, np.ndarray]  # {regime: (R, d, seed)} met the stop rule
    d_min: list[int | None]  # learned threshold per R
    headroom: np.ndarray  # (R, d): d / d_min(R)
    population: dict[float, np.ndarray]  # {headroom cutoff: (R, d) cells with sufficient capacity}
    records: dict  # {(regime, R, d, seed): run record}

    def runs(self, regime_name: str | None = None) -> list[dict]:
        """The run records of one regime (None: both)."""
        return [r for k, r in self.records.items() if regime_name in (None, k[0])]

    def grid_regime(self, grid: CapacityGrid) -> Regime:
        """The regime of the whole grid: every run, headroom over R <= REGIME_MAX_R."""
        return regime(self.runs(), self.headroom[np.array(grid.R_values) <= REGIME_MAX_R], grid.perfect)

    def judged_regime(self, grid: CapacityGrid, cells: np.ndarray, regime_name: str | None = "learned") -> Regime:
        """The regime behind a verdict on `cells` (R, d): the runs of those cells (of one regime, or both)
        and their headroom. With no cell, the regime's runs of the whole grid (the verdict then has no
        population, and the regime says so through its headroom)."""
        keys = [k for k in self.records if regime_name in (None, k[0])
                and cells[grid.R_values.index(k[1]), grid.d_values.index(k[2])]]
        runs = [self.records[k] for k in keys] or self.runs(regime_name)
        return regime(runs, self.headroom[cells], grid.perfect)

    def verdict_keys(self, grid: CapacityGrid, judged: np.ndarray) -> list:
        """The runs the mechanism verdicts read: both regimes' runs in the `judged` cells (R, d) and every run
        of a cell where a frozen run memorises (the frozen claims' population). What a page analyses at the
        other reading points (geofact.analysis.trajectory.READINGS), rather than the whole grid."""
        frozen_cells = (self.accuracy["frozen"] >= grid.perfect).any(-1)  # (R, d)
        wanted = judged | frozen_cells
        return [k for k in grid.keys() if wanted[grid.R_values.index(k[1]), grid.d_values.index(k[2])]]


def grid_state(grid: CapacityGrid, records: dict, headroom_cutoffs: list[float] = (1.0,)) -> GridState:
    """Accuracy, stop rule, thresholds, headroom and the sufficient-capacity population per cutoff."""
    accuracy = grid.by_cell({k: r["accuracy"] for k, r in records.items()})
    converged = grid.by_cell({k: r["stopped_early"] for k, r in records.items()})
    d_min = grid.thresholds(accuracy["learned"])
    headroom = grid.headroom(d_min)
    population = {h: sufficient_capacity(grid, accuracy["learned"], headroom, h) for h in headroom_cutoffs}
    return GridState(accuracy, converged, d_min, headroom, population, records)

