"""A training page's loss-spike tables and figure (geofact.spikes on the runs the page read): how the
counts move with the rule, the spiking runs by cell, and the curves of the highest spikes."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from geofact.pages.legends import legend
from geofact.pages.plotting import COLORS, PAPER_STYLE
from geofact.spikes import RunSpikes, SpikeRule, sensitivity

FLOORS = (2e-4, 3e-4, 1e-3)
FACTORS = (3.0, 10.0, 100.0, 1000.0)

Key = tuple  # (N, regime, R, d, seed)


def sensitivity_markdown(records: list[dict], rule: SpikeRule) -> str:
    """Runs that spiked, by the rule's floor (rows) and factor (columns), the page's rule among them."""
    floors, factors = sorted({*FLOORS, rule.floor}), sorted({*FACTORS, rule.factor})
    counts = sensitivity(records, floors, factors)
    lines = ["| memorised below | " + " | ".join(f"spike > {k:g}x" for k in factors) + " |", "|---|" + "---|" * len(factors)]
    for floor in floors:
        row = [c for c in counts if c.floor == floor]
        lines.append(f"| {floor:g} ({row[0].memorised} of {row[0].runs} runs) | "
                     + " | ".join(f"{c.spiked}" + (f" ({c.unrecovered} not back)" if c.unrecovered else "") for c in row) + " |")
    return "\n".join(lines)


CAPACITY_COLUMNS = ("N", "regime", "R", "d")


def _order(cell: tuple) -> tuple:
    """Cells in their columns' order, learned before frozen, numbers before names (a width 64 before "4d")."""
    regimes = {"learned": 0, "frozen": 1}
    return tuple((0, regimes[x]) if x in regimes else (1, str(x)) if isinstance(x, str) else (0, x) for x in cell)


def cells_markdown(runs: Mapping[Key, RunSpikes], headroom: Mapping[tuple, float] | None,
                   columns: tuple[str, ...] = CAPACITY_COLUMNS) -> str:
    """One row per cell (the key of `runs` but its last entry, the seed; `columns` name its entries) with a
    spiking run: its headroom (a column only where `headroom` is given), how many of its memorised seeds
    spiked, each spiking seed's first spike, highest spike (x the minimum before it), whether every spike
    came back and whether the run met the stop rule."""
    cells: dict[tuple, dict] = {}
    for (*cell, seed), run in runs.items():
        cells.setdefault(tuple(cell), {})[seed] = run
    head = [*columns, *(["headroom"] if headroom is not None else []),
            "spiking / memorised seeds", "first spike at", "highest (x minimum)", "back", "met stop rule"]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for cell, seeds in sorted(cells.items(), key=lambda kv: _order(kv[0])):
        hit = [run for run in seeds.values() if run.spiked]
        if not hit:
            continue
        h = headroom.get(cell) if headroom is not None else None
        room = "" if headroom is None else (f"{'–' if h is None or not np.isfinite(h) else f'{h:.1f}'} | ")
        rows.append(f"| {' | '.join(str(x) for x in cell)} | {room}"
                    f"{len(hit)} / {sum(r.memorised for r in seeds.values())} | "
                    + ", ".join(str(r.spikes[0].start) for r in hit) + " | " + ", ".join(f"{r.highest.height:.3g}" for r in hit) + " | "
                    + ", ".join("yes" if r.recovered else "no" for r in hit) + " | "
                    + ", ".join("yes" if r.stopped_early else "no" for r in hit) + " |")
    return "\n".join(rows) if len(rows) > 2 else "No run spiked by this rule."


def numbers(runs: Mapping[Key, RunSpikes]) -> dict[str, int]:
    """The counts a page's prose quotes."""
    spiking = [r for r in runs.values() if r.spiked]
    return {"memorised": sum(r.memorised for r in runs.values()), "spiking": len(spiking),
            "above_1000": sum(r.highest.height > 1000 for r in spiking), "not_back": sum(not r.recovered for r in spiking),
            "met_stop_rule": sum(r.stopped_early for r in spiking)}


def run_label(key: Key, columns: tuple[str, ...] = CAPACITY_COLUMNS) -> str:
    """A run's key as a legend reads it: "N=128, R=2, d=96, seed 0" (a regime or condition by its name)."""
    *cell, seed = key
    return ", ".join(str(v) if isinstance(v, str) else f"{c}={v}" for c, v in zip(columns, cell)) + f", seed {seed}"


def curves_panel(ax, records: Mapping[Key, dict], runs: Mapping[Key, RunSpikes], rule: SpikeRule, loss_threshold: float | None,
                 title: str, shown: int = 3, columns: tuple[str, ...] = CAPACITY_COLUMNS) -> None:
    """The loss curves (log scale) of the `shown` runs with the highest spikes, and one memorised run without
    a spike (grey); dotted: the rule's floor, dashed: the stop rule (where the runs have a loss threshold)."""
    import matplotlib.pyplot as plt

    ranked = sorted((k for k, r in runs.items() if r.spiked), key=lambda k: -runs[k].highest.height)[:shown]
    quiet = next((k for k, r in runs.items() if r.memorised and not r.spiked), None)
    for i, key in enumerate(ranked):
        steps, loss = np.array(records[key]["loss_curve"]).T
        ax.plot(steps, loss, color=plt.get_cmap("viridis")(i / max(1, shown)), linewidth=1.2,
                label=f"{run_label(key, columns)}: x{runs[key].highest.height:.2g}")
    if quiet is not None:
        steps, loss = np.array(records[quiet]["loss_curve"]).T
        ax.plot(steps, loss, color=COLORS["baseline"], linewidth=1.0, label=f"{run_label(quiet, columns)}: none")
    ax.axhline(rule.floor, color="grey", linestyle=":", linewidth=1)
    if loss_threshold is not None:
        ax.axhline(loss_threshold, **PAPER_STYLE)
    ax.set(yscale="log", xlabel="step", ylabel="batch loss", title=title)
    if ranked or quiet is not None:
        legend(ax)


def grid_runs(grids, records_by_grid: list[Mapping[tuple, dict]], thresholds: list[Mapping[tuple, float]],
              rule: SpikeRule) -> tuple[dict[Key, dict], dict[Key, RunSpikes], dict[tuple, float]]:
    """Records, their spike readings and each cell's headroom, keyed by (N, regime, R, d[, seed]), over
    capacity grids (geofact.training.grid.CapacityGrid) and their run records ({(regime, R, d, seed):
    record}); `thresholds`: per grid, {(regime, R): d_min} the headroom is taken against (None: unknown)."""
    records: dict[Key, dict] = {}
    headroom: dict[tuple, float] = {}
    for grid, grid_records, d_min in zip(grids, records_by_grid, thresholds):
        for (regime, R, d, seed), record in grid_records.items():
            records[grid.N, regime, R, d, seed] = record
            t = d_min.get((regime, R))
            headroom[grid.N, regime, R, d] = d / t if t else float("nan")
    return records, {k: RunSpikes.of(r, rule) for k, r in records.items()}, headroom
