"""The two kinds of line figure the single-hop pages share, in the book's style (geofact.pages.plotting):

* `headroom_curves`: a metric at the stop rule against d / d_min(R), one line per R, learned (solid)
  against frozen (dashed), mean ± std over seeds;
* `trajectory_panels`: a metric against training step and against training loss, learned against
  frozen, for chosen cells, mean over seeds (geofact.analysis.trajectory).
"""

from __future__ import annotations

import numpy as np
from matplotlib import pyplot as plt

from geofact.pages.legends import legend
from geofact.pages.plotting import subplots
from geofact.training.grid import CapacityGrid

STYLES = {"learned": "-", "frozen": "--"}


def value_at_steps(points: list, metric: str, steps: list[int]) -> np.ndarray:
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


def r_colors(grid: CapacityGrid) -> dict[int, tuple]:
    cmap = plt.get_cmap("viridis")
    n = len(grid.R_values)
    return {R: cmap(i / max(1, n - 1)) for i, R in enumerate(grid.R_values)}


def headroom_curves(ax, grid: CapacityGrid, headroom: np.ndarray, values: dict[str, np.ndarray], ylabel: str,
                    cutoff: float | None = None, min_headroom: float | None = None) -> None:
    """values: {regime: (R, d, seed)}; headroom (R, d) from the learned thresholds (NaN: none on the grid)."""
    colors = r_colors(grid)
    for i, R in enumerate(grid.R_values):
        x = headroom[i]
        if not np.isfinite(x).any():
            continue
        for name, v in values.items():
            ok = np.isfinite(x)
            ax.errorbar(x[ok], v[i].mean(-1)[ok], yerr=v[i].std(-1)[ok], fmt="o" + STYLES[name], color=colors[R],
                        capsize=2, markersize=3, label=f"R={R}" if name == "learned" else None)
    if cutoff is not None:
        ax.axhline(cutoff, color="black", linestyle=":", linewidth=1, label=f"cutoff {cutoff:g}")
    if min_headroom is not None:
        ax.axvline(min_headroom, color="grey", linestyle=":", linewidth=1, label=f"d/d_min = {min_headroom:g}")
    ax.set(xscale="log", xlabel="headroom d / d_min(R) (learned threshold)", ylabel=ylabel)
    legend(ax, ncol=2, title="solid: learned, dashed: frozen")


def trajectory_panels(axes, grid: CapacityGrid, points: dict, metric: str, cells: list[tuple[int, int]], ylabel: str) -> None:
    """axes: two axes (against step, against loss); cells: (R, d) pairs; points from analyse_grid. The
    figure's one legend is trajectory_legend's (a figure of several rows would repeat it on every row)."""
    colors = r_colors(grid)
    for R, d in cells:
        for name in ("learned", "frozen"):
            runs = [points[name, R, d, s] for s in grid.seeds if (name, R, d, s) in points]
            if not runs:
                continue
            steps = sorted({p.step for pts in runs for p in pts})
            values = np.array([value_at_steps(pts, metric, steps) for pts in runs])  # (seed, step)
            losses = np.array([value_at_steps(pts, "loss", steps) for pts in runs])
            label = f"R={R}, d={d}, {name}"
            x = np.maximum(steps, 1)  # step 0 drawn at 1 on the log axis
            axes[0].plot(x, np.nanmean(values, 0), "o" + STYLES[name], color=colors[R], markersize=3, label=label)
            axes[1].plot(np.nanmean(losses, 0), np.nanmean(values, 0), "o" + STYLES[name], color=colors[R], markersize=3)
    axes[0].set(xscale="log", xlabel="training step (step 0 drawn at 1)", ylabel=ylabel)
    axes[1].set(xscale="log", xlabel="training loss (batch), decreasing to the right", ylabel=ylabel)
    axes[1].invert_xaxis()
    axes[1].axvline(grid.loss_threshold, color="grey", linestyle=":", linewidth=1, label="stop rule 1e-4")


def trajectory_legend(fig, row) -> None:
    """The one legend of a figure of trajectory_panels rows, below it: each cell's colour and line (R, d,
    learned solid or frozen dashed) and the stop rule, from `row` (one row's two axes)."""
    handles, labels = ([*a, *b] for a, b in zip(row[0].get_legend_handles_labels(), row[1].get_legend_handles_labels()))
    fig.legend(handles, labels, loc="outside lower center", ncols=3)


def trajectory_figure(grid: CapacityGrid, points: dict, metric: str, ylabel: str) -> None:
    """`metric` along training at the largest d of each R, against step and training loss (`trajectory_panels`,
    one colour per R, learned solid and frozen dashed), shown."""
    cells = [(R, grid.d_values[-1]) for R in grid.R_values]
    fig, axes = subplots(2, 1, width=5.0, height=3.6, sharey=True)
    trajectory_panels(axes[0], grid, points, metric, cells, ylabel)
    trajectory_legend(fig, axes[0])
    plt.show()
