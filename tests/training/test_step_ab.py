"""geofact.training.step_ab: both output layers train the same runs, timed side by side."""

import pytest

from geofact.training import step as step_module
from geofact.training.step_ab import WAYS, compare, output_layer


def test_both_output_layers_train_the_same_runs_and_the_setting_is_put_back():
    before = step_module.WRITTEN_OUT_SOFTMAX
    (row,) = compare("cpu", ds=(8,), runs=3, N=64, steps=4, precisions=("fp32",))
    assert step_module.WRITTEN_OUT_SOFTMAX == before
    assert row["ms_kernel"] > 0 and row["ms_written"] > 0 and row["ratio"] > 0
    assert row["loss_difference"] < 1e-4  # the same arithmetic to rounding
    with pytest.raises(ValueError, match="way must be one of"):
        with output_layer("fused", __import__("torch").device("cpu")):
            pass
    assert WAYS[0] == "log-softmax kernel"
