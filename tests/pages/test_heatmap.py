import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from geofact.pages.heatmap import heatmap, heatmap_panels  # noqa: E402


def test_heatmap_annotates_every_finite_cell_with_mean_and_std():
    mean = np.array([[0.1, np.nan], [0.5, 1.0]])
    std = np.array([[0.01, 0.0], [0.2, 0.0]])
    fig, ax = plt.subplots()
    image = heatmap(ax, mean, std, x_labels=[16, 32], y_labels=[2, 4])
    texts = sorted(t.get_text() for t in ax.texts)
    assert texts == ["0.10\n±0.01", "0.50\n±0.20", "1.00\n±0.00"]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["16", "32"]
    assert image.get_clim() == (0.0, 1.0)
    plt.close(fig)


def test_heatmap_panels_draw_one_map_per_grid_over_seeds_with_one_colour_bar():
    grids = {"a": np.zeros((2, 3, 2)), "b": np.stack([np.ones((2, 3)), np.zeros((2, 3))], -1)}
    fig, axes = plt.subplots(1, 2)
    heatmap_panels(axes, fig, grids, x_values=[8, 16, 32], y_values=[2, 4], what="accuracy", ylabel="hops k")
    assert [ax.get_title() for ax in axes] == ["a", "b"]
    assert axes[0].get_xlabel() == "embedding dimension d" and axes[0].get_ylabel() == "hops k"
    assert "0.50\n±0.50" in [t.get_text() for t in axes[1].texts]  # mean ± std over the seed axis
    assert len(fig.axes) == 3 and fig.axes[-1].get_ylabel() == "accuracy"
    plt.close(fig)
