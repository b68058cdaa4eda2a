"""The capacity grid of Section 5 (R x d x seeds, learned and frozen embeddings): one definition per
profile, shared by exp-capacity and the three mechanism pages (exp-readout, exp-interventions,
exp-freeze-transfer), which read the same cached models and checkpoints.

A profile sets it once, as `capacity_grid` in its `defaults` (notebooks/profiles/*.yaml); every page
that declares a `capacity_grid` parameter receives the same dict and builds `CapacityGrid(**it)`.
`None` means the paper's grid (`PAPER_GRID`, Section 5.1 and Appendix B).

A GPU lease can train and analyse part of the grid at a time: `geofact compute --grid-R ... --grid-d ...`
names the cells in $GEOFACT_GRID_CELLS, and every page's grid is then those cells alone (`restriction`).
A run's record and each state's analysis are keyed by the run and the analysis, not by the grid, so the
pages on the whole grid later find them cached; the weights they were computed from never travel.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, replace
from typing import Iterator

import numpy as np

from geofact.training.config import TrainConfig

REGIMES = {"learned": False, "frozen": True}  # name -> TrainConfig.frozen_embeddings
CELLS_ENV = "GEOFACT_GRID_CELLS"  # {"R": [...], "d": [...]}: the pages' capacity grid on these cells alone


_RESTRICTED_RUNS: set[str] = set()  # keys of the runs of the grids built on restricted cells in this process


def restricted_run(config: TrainConfig) -> bool:
    """Whether `config` is a run of a grid this process built on the cells $GEOFACT_GRID_CELLS names, or of
    the second grid (`ladder_grids`) built while they are named: the runs whose weights a lease computing
    those cells must have (geofact.training.sweep), and no others (a control, an earlier lease's cells)."""
    return restriction() is not None and config.key() in _RESTRICTED_RUNS


def restriction() -> dict[str, list[int]] | None:
    """The cells $GEOFACT_GRID_CELLS names (`geofact compute --grid-R/--grid-d`; "R", "d" or both), or None."""
    value = os.environ.get(CELLS_ENV, "")
    if not value:
        return None
    try:
        cells = json.loads(value)
    except json.JSONDecodeError:
        cells = None
    if not isinstance(cells, dict) or not cells or set(cells) - {"R", "d"} \
            or not all(isinstance(v, list) and v and all(isinstance(x, int) for x in v) for v in cells.values()):
        raise ValueError(f'{CELLS_ENV} must be JSON {{"R": [ints], "d": [ints]}} (either may be left out), got {value!r}')
    return cells


def _increasing_ints(values, name: str, low: int) -> tuple[int, ...]:
    values = tuple(values)
    if not values or not all(isinstance(v, int) and v >= low for v in values) or list(values) != sorted(set(values)):
        raise ValueError(f"{name} must be a non-empty increasing list of integers >= {low}, got {list(values)}")
    return values


@dataclass(frozen=True)
class CapacityGrid:
    """The runs behind the single-hop verdicts: every (regime, R, d, seed), one recipe."""

    N: int  # entities
    R_values: tuple[int, ...]  # relations
    d_values: tuple[int, ...]  # embedding dimensions
    seeds: tuple[int, ...]  # each seed draws its own bijections and initialisation
    lr: float  # AdamW learning rate (exp-capacity's sweep checks it)
    batch_size: int  # facts per step (clamped to N R when the task has fewer)
    max_steps: int  # step budget; runs stop earlier when the training loss falls below loss_threshold
    checkpoints: tuple[int, ...] = ()  # steps at which the weights are kept (training trajectories)
    loss_threshold: float = 1e-4  # the paper's stop rule (Appendix B)
    attention: str = "uniform"  # "learned" for the footnote's variant (Section 5.1)
    perfect: float = field(default=0.99)  # "perfect memorization": accuracy at least this
    precision: str = "fp32"  # how every run's matmuls are computed (geofact.precision)
    # train the grid's runs on to max_steps after the stop rule, keeping their best state before any loss
    # spike and their last state beside the stop's, to read them at three points (issue 46, item 4;
    # TrainConfig.read_past_stop); a variant of a run (`config(..., **over)`) is another experiment and stops
    read_past_stop: bool = False
    # (every, count): each run keeps its states at the last `count` multiples of `every` steps before its stop
    # too (TrainConfig.keep_tail, issue 46 item 1: the mechanism read where training ends); not its variants
    keep_tail: tuple[int, int] | None = None

    def __post_init__(self) -> None:
        for name in ("R_values", "d_values", "seeds", "checkpoints"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        if not (isinstance(self.N, int) and self.N >= 2):
            raise ValueError(f"N must be an integer >= 2, got {self.N!r}")
        _increasing_ints(self.R_values, "R_values", 1)
        _increasing_ints(self.d_values, "d_values", 1)
        _increasing_ints(self.seeds, "seeds", 0)
        if self.checkpoints:
            _increasing_ints(self.checkpoints, "checkpoints", 0)
            if self.checkpoints[-1] >= self.max_steps:
                raise ValueError(f"checkpoints must be below max_steps={self.max_steps}, got {list(self.checkpoints)}")
        if not 0 < self.perfect <= 1:
            raise ValueError(f"perfect must be in (0, 1], got {self.perfect}")
        config = self.config(self.R_values[-1], self.d_values[0], False, self.seeds[0])  # TrainConfig validates the rest
        object.__setattr__(self, "keep_tail", config.keep_tail)  # a profile's list, as TrainConfig holds it

    @classmethod
    def from_parameter(cls, value: dict | None, precision: str | None = None) -> "CapacityGrid":
        """The grid a page's `capacity_grid` parameter names: a dict of fields, or None for the paper's;
        `precision` (a page's `precision` parameter, set by `geofact run --precision`) overrides its policy;
        on a lease computing part of it, the cells $GEOFACT_GRID_CELLS names alone (`restriction`)."""
        if value is None:
            grid = PAPER_GRID
        elif not isinstance(value, dict):
            raise ValueError(f"capacity_grid must be a dict of CapacityGrid fields or None, got {value!r}")
        else:
            grid = cls(**value)
        grid = grid if precision is None else replace(grid, precision=precision)
        cells = restriction()
        if cells is None:
            return grid
        grid = grid.on_cells(cells.get("R"), cells.get("d"))
        _RESTRICTED_RUNS.update(c.key() for c in grid.configs().values())
        return grid

    def scale(self) -> str:
        """The grid's scale against the paper's (Section 5.1), for a page's `Report.scale`."""
        paper = "" if self.N == PAPER_GRID.N else f" (the paper's {PAPER_GRID.N})"
        return (f"N = {self.N}{paper}, R {self.R_values[0]}-{self.R_values[-1]}, d {self.d_values[0]}-{self.d_values[-1]}, "
                f"{len(self.seeds)} seeds, up to {self.max_steps:,} steps")

    def on_cells(self, R_values=None, d_values=None) -> "CapacityGrid":
        """The grid on some of its R and d values (None: all); its runs are the whole grid's runs."""
        for name, wanted, have in (("R", R_values, self.R_values), ("d", d_values, self.d_values)):
            if wanted is not None and not set(wanted) <= set(have):
                raise ValueError(f"grid cells: {name} must be among the grid's {list(have)}, got {sorted(wanted)}")
        return replace(self, R_values=tuple(sorted(set(R_values))) if R_values is not None else self.R_values,
                       d_values=tuple(sorted(set(d_values))) if d_values is not None else self.d_values)

    def as_dict(self) -> dict:
        return asdict(self)

    def config(self, R: int, d: int, frozen: bool, seed: int, **over) -> TrainConfig:
        """One run of the grid (or, with `over`, of a variant: another lr, max_steps, ...)."""
        fields = dict(N=self.N, R=R, d=d, frozen_embeddings=frozen, seed=seed, lr=self.lr, max_steps=self.max_steps,
                      batch_size=self.batch_size, loss_threshold=self.loss_threshold, attention=self.attention,
                      precision=self.precision, read_past_stop=self.read_past_stop and not over,
                      keep_tail=None if over else self.keep_tail)
        fields.update(over)
        fields["batch_size"] = min(fields["batch_size"], fields["N"] * R)  # the run's own N R facts, N overridden or not
        return TrainConfig(**fields)

    def configs(self) -> dict[tuple[str, int, int, int], TrainConfig]:
        """{(regime, R, d, seed): config} over both regimes."""
        return {key: self.config(R, d, REGIMES[key[0]], s) for key in self.keys() for R, d, s in [key[1:]]}

    def keys(self) -> Iterator[tuple[str, int, int, int]]:
        return ((name, R, d, s) for name in REGIMES for R in self.R_values for d in self.d_values for s in self.seeds)

    def by_cell(self, values: dict) -> dict[str, np.ndarray]:
        """{regime: array (R, d, seed)} from per-run values keyed as `configs()` keys them."""
        return by_cell(values, self.R_values, self.d_values, self.seeds)

    def thresholds(self, accuracy: np.ndarray) -> list[int | None]:
        """Per R, the smallest grid d from which the mean accuracy stays >= perfect; accuracy (R, d, seed)."""
        return [capacity_threshold(accuracy[i].mean(-1), self.d_values, self.perfect) for i in range(len(self.R_values))]

    def headroom(self, d_min: list[int | None]) -> np.ndarray:
        """(R, d): d / d_min(R), NaN where the threshold is not reached on the grid."""
        return np.array([[d / t if t else np.nan for d in self.d_values] for t in d_min])


# The paper's grid and recipe (Section 5.1, Appendix B) except the rate: its lr 1.0 does not train this model
# (exp-capacity, claim exp-lr-paper); 1e-3 is the rate the sweep there checks.
PAPER_GRID = CapacityGrid(N=4096, R_values=(2, 4, 8, 10, 12, 14, 16), d_values=(32, 64, 128, 256, 512, 768),
                          seeds=(0, 1, 2), lr=1e-3, batch_size=1024, max_steps=15000,
                          checkpoints=(0, 100, 300, 1000, 3000, 10000))


def capacity_threshold(mean_accuracy: np.ndarray, d_values, level: float) -> int | None:
    """Smallest d of the grid from which the mean accuracy (one entry per d) stays >= level (None: never)."""
    ok = np.asarray(mean_accuracy) >= level
    for j in range(len(d_values)):
        if ok[j:].all():
            return d_values[j]
    return None


def by_cell(values: dict[tuple[str, int, int, int], float], R_values, d_values, seeds) -> dict[str, np.ndarray]:
    """{regime: array (R, d, seed)} from per-run values keyed as capacity grids key them."""
    return {name: np.array([[[values[name, R, d, s] for s in seeds] for d in d_values] for R in R_values], dtype=float)
            for name in REGIMES}


def ladder_grids(value: dict | None, precision: str | None = None) -> list[CapacityGrid]:
    """The second grid of the mechanism pages (issue 34: the mechanism along training at a second N), one
    CapacityGrid per R with a d ladder of its own, so that each R spans the same headroom without paying
    for the cells far below or far above its threshold. `value` (a page's `trajectory_grid` parameter):
    the CapacityGrid fields but R_values and d_values, and `d_ladders`, a list of {"R": R, "d_values":
    [...]}; each ladder must reach below its learned threshold for d_min (and so the headroom) to be
    measured. None: no second grid."""
    if value is None:
        return []
    if not isinstance(value, dict) or not isinstance(value.get("d_ladders"), list) or not value["d_ladders"]:
        raise ValueError(f"trajectory_grid must be None or a dict of CapacityGrid fields with a non-empty list "
                         f"'d_ladders' of {{'R': R, 'd_values': [...]}}, got {value!r}")
    common = {k: v for k, v in value.items() if k != "d_ladders"}
    if {"R_values", "d_values"} & set(common):
        raise ValueError("trajectory_grid sets R and d through d_ladders, not R_values or d_values")
    grids = []
    for ladder in value["d_ladders"]:
        if not isinstance(ladder, dict) or set(ladder) != {"R", "d_values"}:
            raise ValueError(f"each of trajectory_grid's d_ladders must be {{'R': R, 'd_values': [...]}}, got {ladder!r}")
        grid = CapacityGrid(R_values=(ladder["R"],), d_values=tuple(ladder["d_values"]), **common)
        grids.append(grid if precision is None else replace(grid, precision=precision))
    if restriction() is not None:  # a lease analyses the second grid beside its cells: its runs need weights too
        _RESTRICTED_RUNS.update(c.key() for grid in grids for c in grid.configs().values())
    Rs = [g.R_values[0] for g in grids]
    if Rs != sorted(set(Rs)):
        raise ValueError(f"trajectory_grid's d_ladders must have increasing, distinct R, got {Rs}")
    return grids
