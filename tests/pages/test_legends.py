"""geofact.pages.legends: a legend stays inside the axes where it covers nothing, and moves beside the
axes, still inside the figure, where every place inside would cover data."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from geofact.pages.legends import covers_data, legend  # noqa: E402
from geofact.pages.plotting import use_style  # noqa: E402


def test_a_legend_on_an_empty_corner_stays_inside():
    use_style()
    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 0.2], label="low line")
    placed = legend(ax)
    assert not covers_data(ax, placed)
    assert placed.get_window_extent().x1 <= ax.get_window_extent().x1 + 1  # inside the axes, not moved beside
    plt.close(fig)


def test_a_narrow_legend_that_would_cover_data_moves_beside_the_axes_and_stays_in_the_figure():
    use_style()
    fig, ax = plt.subplots(figsize=(5, 3.6))
    x = np.linspace(0, 1, 200)
    for k in range(12):  # curves filling the whole panel: every place inside covers some
        ax.plot(x, (x * (k + 1) * 7) % 1.0, label=f"{k}")
    placed = legend(ax)
    assert not covers_data(ax, placed)
    fig.canvas.draw()
    box, figure = placed.get_window_extent(), fig.bbox
    assert box.x0 >= ax.get_window_extent().x1 - 1  # beside the axes
    assert figure.x0 - 1 <= box.x0 and box.x1 <= figure.x1 + 1  # and not cut off by the figure's edge
    plt.close(fig)


def test_a_vertical_reference_line_through_the_legend_counts_as_covered():
    use_style()
    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1], label="diagonal")
    placed = ax.legend(loc="center")
    ax.axvline(0.5)  # drawn through the centre, where the legend sits; only its two ends are vertices
    assert covers_data(ax, placed)
    plt.close(fig)


def test_a_wide_legend_that_would_cover_data_goes_below_the_axes_labels_keeping_the_panel_wide():
    use_style()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    x = np.linspace(0, 1, 200)
    for ax in axes:
        for k in range(6):
            ax.plot(x, (x * (k + 1) * 7) % 1.0, label=f"a long description of run {k}")
        ax.set_xlabel("step")
    placed = legend(axes[0], ncol=2)
    assert not covers_data(axes[0], placed)
    fig.canvas.draw()
    box, panel, label = placed.get_window_extent(), axes[0].get_window_extent(), axes[0].xaxis.label.get_window_extent()
    assert box.y1 <= label.y0 + 1  # under the x label, not on it
    assert panel.width >= 0.8 * axes[1].get_window_extent().width  # the panel keeps its width
    plt.close(fig)
