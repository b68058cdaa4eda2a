"""Grids of mean ± std (the capacity, readout and multi-hop heatmaps), in the book's style (geofact.pages.plotting).

Each cell is annotated with its mean over seeds, and its spread where the seeds disagree, in as few
characters as a value in [0, 1] needs (".84", "1"), so that a grid of eleven d by five R stays legible;
the text is white or black by the luminance of the cell's colour.
"""

from __future__ import annotations

import textwrap

import matplotlib as mpl
import numpy as np

COLORBAR_LABEL_WIDTH = 28  # characters a line of a colour bar's label may hold before it wraps (it runs along the bar)


def _short(value: float) -> str:
    """0.84 -> ".84", 1.0 -> "1", 0.0 -> "0"; a value outside (-1, 1) in two significant digits."""
    if round(value, 2) in (0.0, 1.0, -1.0):
        return f"{round(value, 2):.0f}"
    if abs(value) < 1:
        return f"{value:.2f}".replace("0.", ".", 1)
    return f"{value:.2g}"


def cell_text(mean: float, std: float) -> str:
    """A cell's annotation: its mean, and "±spread" on a second line where the spread shows at two decimals."""
    return _short(mean) + (f"\n±{_short(std)}" if round(float(std), 2) > 0 else "")


def text_colour(rgba) -> str:
    """White on a dark cell, black on a light one (relative luminance of the cell's colour, sRGB weights)."""
    r, g, b = rgba[:3]
    return "white" if 0.2126 * r + 0.7152 * g + 0.0722 * b < 0.5 else "black"


def heatmap(ax, mean, std, x_labels, y_labels, vmin: float = 0.0, vmax: float = 1.0, cmap: str = "viridis"):
    """Cells coloured by `mean` (rows = y_labels, cols = x_labels), annotated with cell_text; NaN cells blank.

    Returns the image (for a colour bar)."""
    mean, std = np.asarray(mean, dtype=float), np.asarray(std, dtype=float)
    image = ax.imshow(mean, origin="lower", aspect="auto", vmin=vmin, vmax=vmax, cmap=cmap)
    colormap = mpl.colormaps[cmap]
    for i in range(mean.shape[0]):
        for j in range(mean.shape[1]):
            if np.isnan(mean[i, j]):
                continue
            shade = colormap(float(np.clip((mean[i, j] - vmin) / (vmax - vmin), 0.0, 1.0)))
            ax.text(j, i, cell_text(mean[i, j], std[i, j]), ha="center", va="center", fontsize="small",
                    color=text_colour(shade))
    ax.set_xticks(range(len(x_labels)), [str(x) for x in x_labels])
    ax.set_yticks(range(len(y_labels)), [str(y) for y in y_labels])
    ax.grid(False)
    return image


def heatmap_panels(axes, fig, grids: dict[str, np.ndarray], x_values, y_values, what: str, vmin: float = 0.0,
                   vmax: float = 1.0, xlabel: str = "embedding dimension d", ylabel: str = "relations R") -> None:
    """One heatmap per entry of `grids` ({title: (y, x, seed) array}, mean ± std over seeds), one per axis
    of `axes` (a sequence), with one shared colour bar labelled `what` (wrapped, so it is never cut at the
    bar's ends). By default x is d and y is R."""
    for ax, (title, values) in zip(axes, grids.items()):
        image = heatmap(ax, values.mean(-1), values.std(-1), x_values, y_values, vmin=vmin, vmax=vmax)
        ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
    fig.colorbar(image, ax=list(axes), label=textwrap.fill(what, COLORBAR_LABEL_WIDTH))
