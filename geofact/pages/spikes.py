"""A training page's loss-spike tables and figure (geofact.spikes on the runs the page read): how the
counts move with the rule, the spiking runs by cell, and the curves of the highest spikes."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

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


def cells_markdown(runs: Mapping[Key, RunSpikes], headroom: Mapping[tuple, float]) -> str:
    """One row per cell (N, regime, R, d) with a spiking run: its headroom, how many of its memorised seeds
    spiked, each spiking seed's first spike, highest spike (x the minimum before it), whether every spike
    came back and whether the run met the stop rule."""
    cells: dict[tuple, dict] = {}
    for (N, regime, R, d, seed), run in runs.items():
        cells.setdefault((N, regime, R, d), {})[seed] = run
    rows = ["| N | regime | R | d | headroom | spiking / memorised seeds | first spike at | highest (x minimum) | back | met stop rule |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for cell, seeds in sorted(cells.items(), key=lambda kv: (kv[0][0], kv[0][1] != "learned", *kv[0][2:])):
        hit = [run for run in seeds.values() if run.spiked]
        if not hit:
            continue
        h = headroom.get(cell)
        rows.append(f"| {' | '.join(str(x) for x in cell)} | {'–' if h is None or not np.isfinite(h) else f'{h:.1f}'} | "
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


def curves_panel(ax, records: Mapping[Key, dict], runs: Mapping[Key, RunSpikes], rule: SpikeRule, loss_threshold: float,
                 title: str, shown: int = 3) -> None:
    """The loss curves (log scale) of the `shown` runs with the highest spikes, and one memorised run without
    a spike (grey); dotted: the rule's floor, dashed: the stop rule."""
    import matplotlib.pyplot as plt

    ranked = sorted((k for k, r in runs.items() if r.spiked), key=lambda k: -runs[k].highest.height)[:shown]
    quiet = next((k for k, r in runs.items() if r.memorised and not r.spiked), None)
    for i, key in enumerate(ranked):
        steps, loss = np.array(records[key]["loss_curve"]).T
        N, _, R, d, seed = key
        ax.plot(steps, loss, color=plt.get_cmap("viridis")(i / max(1, shown)), linewidth=1.2,
                label=f"N={N}, R={R}, d={d}, seed {seed}: x{runs[key].highest.height:.2g}")
    if quiet is not None:
        steps, loss = np.array(records[quiet]["loss_curve"]).T
        ax.plot(steps, loss, color=COLORS["baseline"], linewidth=1.0, label=f"N={quiet[0]}, R={quiet[2]}, d={quiet[3]}, seed {quiet[4]}: none")
    ax.axhline(rule.floor, color="grey", linestyle=":", linewidth=1)
    ax.axhline(loss_threshold, **PAPER_STYLE)
    ax.set(yscale="log", xlabel="step", ylabel="batch loss", title=title)
    if ranked or quiet is not None:
        ax.legend(fontsize="small", loc="upper right")


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
