import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from geofact.heatmap import heatmap  # noqa: E402


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
