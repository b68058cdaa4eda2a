"""Legends that cover no data (issue 48): matplotlib's best place inside the axes where that place covers
no plotted point or line, else outside the axes, where the figure's constrained layout makes room for it:
beside the axes when the legend is narrow, below the axes' labels when it is wide (beside, a wide legend
would squeeze the panel to a sliver).

matplotlib's `loc="best"` only minimises the overlap; on a busy panel (loss curves of ten runs, a
learning-rate sweep) its best place still sits on the data, which a reader then cannot see.
"""

from __future__ import annotations

import numpy as np
from matplotlib.axes import Axes
from matplotlib.collections import Collection
from matplotlib.legend import Legend
from matplotlib.lines import Line2D
from matplotlib.patches import Rectangle
from matplotlib.transforms import Bbox

SAMPLE_PX = 3.0  # a line is tested at points this far apart on the screen, so a line crossing the legend is seen
BESIDE = {"loc": "center left", "bbox_to_anchor": (1.02, 0.5)}
NARROW = 0.4  # a legend at most this fraction of the axes' width goes beside them; a wider one below


def _line_points(line: Line2D) -> np.ndarray:
    """Screen points along a drawn line (its vertices and points between them), (n, 2)."""
    xy = line.get_transform().transform(np.asarray(line.get_xydata(), dtype=float))
    xy = xy[np.isfinite(xy).all(axis=1)]
    if len(xy) < 2 or line.get_linestyle() in ("None", "", " ", "none"):
        return xy
    steps = np.maximum(1, np.ceil(np.linalg.norm(np.diff(xy, axis=0), axis=1) / SAMPLE_PX).astype(int))
    parts = [a + np.linspace(0.0, 1.0, n, endpoint=False)[:, None] * (b - a) for a, b, n in zip(xy[:-1], xy[1:], steps)]
    return np.vstack([*parts, xy[-1:]])


def _data_points(ax: Axes) -> np.ndarray:
    """Screen points of everything plotted on `ax`: lines, markers and scatters, bar corners and centres, (n, 2)."""
    points = [_line_points(line) for line in ax.lines if line.get_visible()]
    for collection in ax.collections:
        if isinstance(collection, Collection) and collection.get_visible() and len(collection.get_offsets()):
            points.append(collection.get_offset_transform().transform(np.asarray(collection.get_offsets(), dtype=float)))
    for patch in ax.patches:
        if isinstance(patch, Rectangle) and patch.get_visible():
            box = patch.get_window_extent()
            points.append(np.array([[box.x0, box.y0], [box.x1, box.y1], [box.x0, box.y1], [box.x1, box.y0],
                                    [(box.x0 + box.x1) / 2, (box.y0 + box.y1) / 2]]))
    points = [p for p in points if len(p)]
    return np.vstack(points) if points else np.empty((0, 2))


def covers_data(ax: Axes, legend: Legend) -> bool:
    """Whether `legend`, as drawn, covers any point of the data plotted on `ax`."""
    ax.figure.canvas.draw()  # the layout settled: the legend and the data where they will be shown
    box: Bbox = legend.get_window_extent()
    points = _data_points(ax)
    inside = ((points[:, 0] >= box.x0) & (points[:, 0] <= box.x1) & (points[:, 1] >= box.y0) & (points[:, 1] <= box.y1))
    return bool(inside.any())


def legend(ax: Axes, *args, **kwargs) -> Legend:
    """`ax.legend(*args, **kwargs)` at matplotlib's best place inside the axes where it covers no data, else
    outside: beside the axes (to the right, centred) when it is narrow (NARROW), else centred below the
    axes' tick labels and x label."""
    placed = ax.legend(*args, loc="best", **kwargs)
    if not covers_data(ax, placed):
        return placed
    narrow = placed.get_window_extent().width <= NARROW * ax.get_window_extent().width
    below = ax.get_tightbbox().transformed(ax.transAxes.inverted()).y0  # the labels' bottom, in axes units
    placed.remove()
    if narrow:
        return ax.legend(*args, **BESIDE, **kwargs)
    return ax.legend(*args, loc="upper center", bbox_to_anchor=(0.5, below - 0.02), **kwargs)
