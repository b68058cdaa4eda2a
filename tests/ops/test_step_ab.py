"""geofact.ops.step_ab: every way of the output layer trains the same runs, timed side by side."""

import pytest

from geofact.training import step as step_module
from geofact.ops.step_ab import OPTIMISERS, WAYS, compare, output_layer, stepping, ways


def test_every_output_layer_trains_the_same_runs_and_the_setting_is_put_back():
    before = dict(step_module.WHOLE_WAY)
    (row,) = compare("cpu", ds=(8,), runs=3, N=64, steps=4, precisions=("fp32",))
    assert step_module.WHOLE_WAY == before
    # a difference of two short calls on a busy CPU can come out at or below 0: timed, not judged, here
    # every way but the fused kernels, which run on CUDA (or in Triton's interpreter, tests/training/test_fused_ce.py)
    assert set(row["ms"]) == set(row["relative"]) == set(ways(__import__("torch").device("cpu"))) == set(WAYS) - {"fused kernels"}
    assert row["fastest"] in WAYS and row["errors"] == {}
    assert all(isinstance(v, float) for v in (*row["ms"].values(), *row["relative"].values()))
    assert row["loss_difference"] < 1e-4  # the same arithmetic to rounding
    assert set(row["optimiser_ms"]) == set(OPTIMISERS) and row["optimiser_fastest"] in OPTIMISERS
    with pytest.raises(ValueError, match="way must be one of"):
        with output_layer("fused", __import__("torch").device("cpu")):
            pass
    with output_layer("written-out softmax", __import__("torch").device("cpu")):
        assert step_module.WHOLE_WAY["cpu"] == "written-out softmax"
    assert step_module.WHOLE_WAY == before


def test_a_step_is_timed_without_the_calls_fixed_cost(monkeypatch):
    # a call costing 7 s whatever its steps, plus 0.1 s a step: the step must read 0.1 s, not 7/steps more
    from geofact.ops import step_ab

    calls = []

    def fake_seconds(configs, steps, device):
        calls.append(steps)
        return 7.0 + 0.1 * steps + (5.0 if len(calls) == 1 else 0.0), [0.0] * len(configs)  # a first call's extra cost

    monkeypatch.setattr(step_ab, "_seconds", fake_seconds)
    seconds, _ = step_ab.time_step([], __import__("torch").device("cpu"), WAYS[0], steps=20)
    assert seconds == pytest.approx(0.1) and calls == [5, 5, 25]  # the first call discarded
    with pytest.raises(ValueError, match="steps must be >= 1"):
        next(step_ab.rows("cpu", steps=0))


def test_the_optimiser_is_stepped_each_way_asked_and_the_settings_put_back():
    import torch

    from geofact.training import optim
    from geofact.training.optim import FlatStack, StackedAdamW

    before = optim.PER_RUN_DEVICES, optim.PER_RUN_MIN_PARAMS
    stack = FlatStack({"a": torch.zeros(3, 4)})
    for how, per_run in (("per run", True), ("together", False)):
        with stepping(how, torch.device("cpu")):
            assert StackedAdamW(stack, [1e-3] * 3, 0.0, [[(0, 4)]] * 3).per_run == per_run
    assert (optim.PER_RUN_DEVICES, optim.PER_RUN_MIN_PARAMS) == before
    with pytest.raises(ValueError, match="how must be one of"):
        with stepping("fused", torch.device("cpu")):
            pass
