"""One figure style for the whole book: call `use_style()` at the top of a notebook."""

from __future__ import annotations

import matplotlib as mpl
import matplotlib.pyplot as plt

# Colour-blind-safe (Okabe-Ito); semantic roles stay fixed across pages.
COLORS = {
    "measured": "#0072B2",
    "paper": "#D55E00",
    "theory": "#009E73",
    "bound": "#CC79A7",
    "baseline": "#7F7F7F",
    "alt": "#E69F00",
}
PAPER_STYLE = {"color": COLORS["paper"], "linestyle": "--", "linewidth": 2}


DPI = 110
# The book shows a figure about 670 px wide (a 1280-px window): a figure at most this wide (inches, at
# DPI; 1100 px, a few more where labels stick out) is shown at >= 0.58 of its size, so "small" text
# (legends, ticks: 10.4 pt) reads at >= 9 px. tests/pipeline/test_book_browser.py measures it.
MAX_FIGURE_WIDTH = 10.0


def use_style() -> None:
    mpl.rcParams.update(
        {
            "figure.dpi": DPI,
            "figure.figsize": (6.4, 4.0),
            "figure.constrained_layout.use": True,
            "axes.grid": True,
            "grid.alpha": 0.3,
            "axes.spines.top": False,
            "axes.spines.right": False,
            # Sizes relative to font.size: a two-panel figure is about 10 in wide and the page shows it
            # about 670 px wide, so 12.5 pt text reads at about 11 px and "small" (legends, ticks,
            # heatmap numbers) at about 9.5 px.
            "font.size": 12.5,
            "axes.titlesize": "medium",
            "axes.labelsize": "medium",
            "xtick.labelsize": "small",
            "ytick.labelsize": "small",
            "legend.fontsize": "small",
            "legend.title_fontsize": "small",
            "figure.titlesize": "large",
            "legend.frameon": False,
            "lines.linewidth": 1.8,
            "lines.markersize": 5,
        }
    )


def subplots(ncols: int = 1, nrows: int = 1, width: float = 5.0, height: float = 3.6, **kwargs):
    """plt.subplots sized per panel, so multi-panel figures keep readable panels; a row of panels wider
    than MAX_FIGURE_WIDTH is narrowed to fit it (the page would shrink it, and its text, anyway)."""
    figure_width = min(width * ncols, MAX_FIGURE_WIDTH)
    return plt.subplots(nrows, ncols, figsize=(figure_width, height * nrows), squeeze=False, **kwargs)
