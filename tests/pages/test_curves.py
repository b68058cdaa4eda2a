"""geofact.pages.curves: a figure of trajectory rows carries one legend, below the panels, naming every
cell's line once and the stop rule."""

from types import SimpleNamespace

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

from geofact.pages.curves import trajectory_legend, trajectory_panels  # noqa: E402
from geofact.pages.plotting import subplots, use_style  # noqa: E402


class Point(dict):
    def __init__(self, step: int, final: bool = False, **values):
        super().__init__(values)
        self.step, self.final = step, final


def test_trajectory_rows_share_one_legend_below_them():
    use_style()
    grid = SimpleNamespace(R_values=[2, 4], seeds=[0, 1], loss_threshold=1e-4)
    points = {(name, R, 96, s): [Point(0, loss=5.0, acc=0.0), Point(300, loss=1e-2, acc=0.5), Point(900, final=True, loss=1e-4, acc=1.0)]
              for name in ("learned", "frozen") for R in grid.R_values for s in grid.seeds}
    fig, axes = subplots(2, 2, width=5.0, height=3.6, sharey=True)
    for row in axes:
        trajectory_panels(row, grid, points, "acc", [(2, 96), (4, 96)], "accuracy")
    trajectory_legend(fig, axes[0])
    assert all(ax.get_legend() is None for ax in axes.flat)  # no legend repeated on every row
    (legend,) = fig.legends
    labels = [t.get_text() for t in legend.get_texts()]
    assert labels == [f"R={R}, d=96, {name}" for R in (2, 4) for name in ("learned", "frozen")] + ["stop rule 1e-4"]
    fig.canvas.draw()
    assert legend.get_window_extent().y1 <= min(ax.get_window_extent().y0 for ax in axes[-1]) + 1  # below the panels
    plt.close(fig)


def test_the_trajectory_figure_draws_the_largest_d_of_each_r(monkeypatch):
    from geofact.pages.curves import trajectory_figure

    use_style()
    grid = SimpleNamespace(R_values=[2, 4], d_values=[48, 96], seeds=[0], loss_threshold=1e-4)
    points = {(name, R, 96, 0): [Point(0, loss=5.0, acc=0.0), Point(900, final=True, loss=1e-4, acc=1.0)]
              for name in ("learned", "frozen") for R in grid.R_values}
    monkeypatch.setattr(plt, "show", lambda: None)
    trajectory_figure(grid, points, "acc", "accuracy")  # would raise KeyError at any other d
    fig = plt.gcf()
    (legend,) = fig.legends
    assert len(fig.axes) == 2 and "R=4, d=96, frozen" in [t.get_text() for t in legend.get_texts()]
    plt.close(fig)
