import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from geofact.pages.heatmap import cell_text, heatmap, heatmap_panels, text_colour  # noqa: E402


def test_heatmap_annotates_every_finite_cell_with_its_mean_and_a_spread_only_where_there_is_one():
    mean = np.array([[0.1, np.nan], [0.5, 1.0]])
    std = np.array([[0.01, 0.0], [0.2, 0.001]])
    fig, ax = plt.subplots()
    image = heatmap(ax, mean, std, x_labels=[16, 32], y_labels=[2, 4])
    texts = sorted(t.get_text() for t in ax.texts)
    assert texts == [".10\n±.01", ".50\n±.20", "1"]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["16", "32"]
    assert image.get_clim() == (0.0, 1.0)
    plt.close(fig)


def test_heatmap_panels_draw_one_map_per_grid_over_seeds_with_one_colour_bar():
    grids = {"a": np.zeros((2, 3, 2)), "b": np.stack([np.ones((2, 3)), np.zeros((2, 3))], -1)}
    fig, axes = plt.subplots(1, 2)
    heatmap_panels(axes, fig, grids, x_values=[8, 16, 32], y_values=[2, 4], what="accuracy", ylabel="hops k")
    assert [ax.get_title() for ax in axes] == ["a", "b"]
    assert axes[0].get_xlabel() == "embedding dimension d" and axes[0].get_ylabel() == "hops k"
    assert ".50\n±.50" in [t.get_text() for t in axes[1].texts]  # mean ± std over the seed axis
    assert len(fig.axes) == 3 and fig.axes[-1].get_ylabel() == "accuracy"


def test_cell_text_is_short_and_its_colour_follows_the_cell():
    assert [cell_text(m, s) for m, s in [(0.837, 0.0), (0.996, 0.004), (0.0, 0.0), (2.5, 0.25), (0.5, 0.049)]] == \
        [".84", "1", "0", "2.5\n±.25", ".50\n±.05"]
    viridis = matplotlib.colormaps["viridis"]
    assert text_colour(viridis(1.0)) == "black" and text_colour(viridis(0.0)) == "white"  # black on yellow


def test_a_long_colour_bar_label_wraps_instead_of_running_off_the_bar():
    what = "accuracy, mean over seeds at the stop rule"
    fig, axes = plt.subplots(1, 1, squeeze=False)
    heatmap_panels(axes[0], fig, {"a": np.zeros((2, 3, 2))}, x_values=[8, 16, 32], y_values=[2, 4], what=what)
    label = fig.axes[-1].get_ylabel()
    assert label.replace("\n", " ") == what and max(len(line) for line in label.splitlines()) <= 28
    plt.close(fig)
