"""Grids of mean ± std (the capacity, readout and multi-hop heatmaps), in the book's style (geofact.pages.plotting)."""

from __future__ import annotations

import matplotlib as mpl
import numpy as np


def heatmap(ax, mean, std, x_labels, y_labels, vmin: float = 0.0, vmax: float = 1.0, cmap: str = "viridis"):
    """Cells coloured by `mean` (rows = y_labels, cols = x_labels), annotated "mean ± std"; NaN cells blank.

    Returns the image (for a colour bar)."""
    mean, std = np.asarray(mean, dtype=float), np.asarray(std, dtype=float)
    image = ax.imshow(mean, origin="lower", aspect="auto", vmin=vmin, vmax=vmax, cmap=cmap)
    colormap = mpl.colormaps[cmap]
    for i in range(mean.shape[0]):
        for j in range(mean.shape[1]):
            if np.isnan(mean[i, j]):
                continue
            dark = sum(colormap((mean[i, j] - vmin) / (vmax - vmin))[:3]) < 1.5
            ax.text(j, i, f"{mean[i, j]:.2f}\n±{std[i, j]:.2f}", ha="center", va="center", fontsize="small",
                    color="white" if dark else "black")
    ax.set_xticks(range(len(x_labels)), [str(x) for x in x_labels])
    ax.set_yticks(range(len(y_labels)), [str(y) for y in y_labels])
    ax.grid(False)
    return image


def heatmap_panels(axes, fig, grids: dict[str, np.ndarray], x_values, y_values, what: str, vmin: float = 0.0,
                   vmax: float = 1.0, xlabel: str = "embedding dimension d", ylabel: str = "relations R") -> None:
    """One heatmap per entry of `grids` ({title: (y, x, seed) array}, mean ± std over seeds), one per axis
    of `axes` (a sequence), with one shared colour bar labelled `what`. By default x is d and y is R."""
    for ax, (title, values) in zip(axes, grids.items()):
        image = heatmap(ax, values.mean(-1), values.std(-1), x_values, y_values, vmin=vmin, vmax=vmax)
        ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
    fig.colorbar(image, ax=list(axes), label=what, shrink=0.8)
