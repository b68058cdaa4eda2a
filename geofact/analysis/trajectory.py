"""The mechanism analyses along training: every run of a capacity grid, at each kept checkpoint and at
its stop (Section 5.1 takes them once, after training; the trajectory shows whether the structure is
there before, and from when).

    records = train_grid(grid, cache)                     # trains what is missing, keeps the checkpoints
    points = analyse_grid(grid, records, cache, fn)       # fn(TrainedModel) -> {metric: value}
    finals = final_values(grid, points, "s")              # {regime: (R, d, seed)} at the stop rule
    curve = value_at_steps(points[key], "s", steps)       # one run's metric at given steps

A run that met the stop rule before a checkpoint step has no checkpoint there: its state from then on
is its final one, so `value_at_steps` carries the final value forward.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from geofact.analysis.trained import TrainedModel
from geofact.notebook import progress
from geofact.training.grid import CapacityGrid
from geofact.training.sweep import run_sweep

Key = tuple[str, int, int, int]  # (regime, R, d, seed)


@dataclass(frozen=True)
class Point:
    """One state of one run: a checkpoint, or the run's final weights."""

    step: int  # updates so far
    loss: float  # training loss of that step's batch
    accuracy: float  # over all N R facts
    final: bool  # the state at the stop rule (or the step budget)
    values: dict[str, float]  # the analysis' metrics

    def get(self, metric: str) -> float:
        """A metric of the analysis, or the state's own "loss" / "accuracy"."""
        return getattr(self, metric) if metric in ("loss", "accuracy") else self.values[metric]


def train_grid(grid: CapacityGrid, cache_dir: Path, device: str = "cpu") -> dict[Key, dict]:
    """{key: run record} of every run of the grid, training (with the grid's checkpoints) what is missing."""
    configs = grid.configs()
    return dict(zip(configs, run_sweep(list(configs.values()), cache_dir, device=device, checkpoints=grid.checkpoints)))


def analyse_grid(grid: CapacityGrid, records: dict[Key, dict], cache_dir: Path,
                 analyse: Callable[[TrainedModel], dict[str, float]], desc: str = "analyses",
                 checkpoints: bool = True, keys: list[Key] | None = None) -> dict[Key, list[Point]]:
    """`analyse` on every run's checkpoints (if `checkpoints`) and final weights; models load one at a
    time (a paper-scale grid does not fit in memory at once). `keys` restricts it to some runs."""
    configs = grid.configs()
    keys = list(configs) if keys is None else keys
    wanted = set(grid.checkpoints) if checkpoints else set()  # a run cached with more checkpoints shows only the grid's
    states = [(key, cp["step"], cp["loss"]) for key in keys for cp in records[key].get("checkpoints", []) if cp["step"] in wanted]
    states += [(key, None, records[key]["final_loss"]) for key in keys]
    out: dict[Key, list[Point]] = {key: [] for key in keys}
    for key, step, loss in progress(states, desc=desc):
        model = TrainedModel.load(cache_dir, configs[key], step)
        final = step is None
        out[key].append(Point(records[key]["steps"] if final else step, float(loss),
                              records[key]["accuracy"] if final else model.accuracy(), final, analyse(model)))
    for points in out.values():
        points.sort(key=lambda p: (p.step, p.final))
    return out


def final_values(grid: CapacityGrid, points: dict[Key, list[Point]], metric: str) -> dict[str, np.ndarray]:
    """{regime: (R, d, seed)} of a metric at each run's stop."""
    return grid.by_cell({key: pts[-1].get(metric) for key, pts in points.items()})


def value_at_steps(points: list[Point], metric: str, steps: list[int]) -> np.ndarray:
    """One run's metric at each of `steps` (its checkpoints; its final value once it has stopped)."""
    final = points[-1]
    by_step = {p.step: p.get(metric) for p in points if not p.final}
    out = []
    for t in steps:
        if t in by_step:
            out.append(by_step[t])
        elif t >= final.step:
            out.append(final.get(metric))
        else:
            out.append(np.nan)
    return np.array(out, dtype=float)
