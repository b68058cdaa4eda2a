"""geofact.ops.step_ab: every way of the output layer trains the same runs, timed side by side."""

import pytest

from geofact.training import step as step_module
from geofact.ops.step_ab import OPTIMISERS, WAYS, compare, output_layer, stepping, ways


def test_every_output_layer_trains_the_same_runs_and_the_setting_is_put_back():
    before = dict(step_module.WHOLE_WAY)
    (row,) = compare("cpu", ds=(8,), runs=3, N=64, steps=4, precisions=("fp32",))
    assert step_module.WHOLE_WAY == before
    # every way but the fused kernels, which run on CUDA (or in Triton's interpreter, tests/training/test_fused_ce.py)
    assert set(row["ms"]) == set(row["relative"]) == set(ways(__import__("torch").device("cpu"))) == set(WAYS) - {"fused kernels"}
    assert row["fastest"] in WAYS and row["errors"] == {} and row["kernel_errors"] == {}
    assert all(isinstance(v, float) for v in (*row["ms"].values(), *row["relative"].values()))
    assert row["loss_difference"] < 1e-4  # the same arithmetic to rounding
    assert set(row["optimiser_ms"]) == set(OPTIMISERS) - {"fused kernel"} and row["optimiser_fastest"] in OPTIMISERS
    with pytest.raises(ValueError, match="way must be one of"):
        with output_layer("fused", __import__("torch").device("cpu")):
            pass
    with output_layer("written-out softmax", __import__("torch").device("cpu")):
        assert step_module.WHOLE_WAY["cpu"] == "written-out softmax"
    assert step_module.WHOLE_WAY == before


def test_a_step_is_timed_without_the_calls_fixed_cost(monkeypatch):
    # a stack that takes 2 s to build (as 42 runs' weights drawn on the host do at d = 768): a step of a few
    # milliseconds must not read 2 s / steps more, as the difference of two calls' wall times did on a lease
    import time

    import torch

    from geofact.ops import step_ab
    from geofact.training.traffic import paper_shape

    built = []

    class SlowGroup(step_ab.FactGroup):
        def __init__(self, *args, **kwargs):
            time.sleep(2.0)
            built.append(1)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(step_ab, "FactGroup", SlowGroup)
    configs = paper_shape(64, 8, 3, "fp32")
    configs = [type(c)(**{**c.as_dict(), "batch_size": 16, "loss_threshold": 0.0}) for c in configs]
    seconds, losses = step_ab.time_step(configs, torch.device("cpu"), WAYS[0], steps=4)
    assert built == [1] and 0 < seconds < 0.5, seconds
    assert len(losses) == 3 and all(0 < loss < 10 for loss in losses)
    with pytest.raises(ValueError, match="steps must be >= 1"):
        next(step_ab.rows("cpu", steps=0))


def test_the_optimiser_is_stepped_each_way_asked_and_the_settings_put_back():
    import torch

    from geofact.training import optim
    from geofact.training.optim import FlatStack, StackedAdamW

    before = optim.PER_RUN_DEVICES, optim.PER_RUN_MIN_PARAMS, optim.FUSED_KERNEL_DEVICES
    stack = FlatStack({"a": torch.zeros(3, 4)})
    for how, per_run, fused in (("per run", True, False), ("together", False, False), ("fused kernel", False, True)):
        with stepping(how, torch.device("cpu")):
            opt = StackedAdamW(stack, [1e-3] * 3, 0.0, [[(0, 4)]] * 3)
            assert (opt.per_run, opt.fused) == (per_run, fused and optim.fused_ce.wanted())
    assert (optim.PER_RUN_DEVICES, optim.PER_RUN_MIN_PARAMS, optim.FUSED_KERNEL_DEVICES) == before
    with pytest.raises(ValueError, match="how must be one of"):
        with stepping("fused", torch.device("cpu")):
            pass


def test_a_kernel_that_fails_is_reported_and_the_benchmark_goes_on_without_the_kernels(monkeypatch):
    import os

    import torch

    from geofact.ops import step_ab
    from geofact.training import fused_ce

    monkeypatch.setattr(fused_ce, "runs_on", lambda device: True)
    monkeypatch.setattr(fused_ce, "wanted", lambda: os.environ.get(fused_ce.ENV, "1") == "1")
    monkeypatch.setenv(fused_ce.ENV, "1")  # put back after the test, which the benchmark sets to "0"
    errors = step_ab.probe(torch.device("cpu"))  # outside Triton's interpreter every kernel raises, as a failed compile would
    assert set(errors) == {"output layer", "output layer, d > 128", "sampler keys", "adamw", "rms norm", "gelu backward"}
    assert all("TRITON_INTERPRET" in e for e in errors.values())
    monkeypatch.setattr(step_ab, "time_step", lambda configs, device, way, steps, how=None: (1e-3, [0.5] * len(configs)))
    (row,) = step_ab.rows("cpu", ds=(8,), runs=2, N=64, steps=2, precisions=("fp32",))
    assert row["kernel_errors"] == errors and os.environ[fused_ce.ENV] == "0"
    assert "fused kernels" not in row["ms"] and "fused kernel" not in row["optimiser_ms"]


def test_the_norms_and_the_sampler_are_timed_both_ways_where_the_kernels_run_and_the_settings_put_back(monkeypatch):
    import torch

    from geofact.ops import step_ab
    from geofact.training import data, fused_ce, fused_norm

    before = fused_norm.DEVICES
    with step_ab.norms(False):
        assert fused_norm.DEVICES == () and not fused_norm.used(torch.zeros(2, 3, 4, device="meta"))
    assert fused_norm.DEVICES == before
    with step_ab.norms(True):
        assert fused_norm.DEVICES == before
    sampler_before = data.FUSED_DEVICES
    with step_ab.sampling(False):
        assert data.FUSED_DEVICES == () and not data.FactSampler([0], [4], 2, 4, "meta").fused
    assert data.FUSED_DEVICES == sampler_before
    seen = []

    def fake_time_step(configs, device, way, steps, how=None):
        seen.append((fused_norm.DEVICES, data.FUSED_DEVICES))
        return 1e-3 * (1 + (fused_norm.DEVICES == ()) + 2 * (data.FUSED_DEVICES == ())), [0.5] * len(configs)

    monkeypatch.setattr(fused_ce, "runs_on", lambda device: True)
    monkeypatch.setattr(fused_ce, "wanted", lambda: True)
    monkeypatch.setattr(step_ab, "probe", lambda device: {})
    monkeypatch.setattr(step_ab, "block_seconds", lambda configs, steps, device: (0.0, [0.5] * len(configs)))
    monkeypatch.setattr(step_ab, "time_step", fake_time_step)
    tf32, bf16 = step_ab.rows("cpu", ds=(8,), runs=2, N=64, steps=2, precisions=("tf32", "bf16"), optimisers=False)
    assert tf32["norm_ms"] == {"kernels": pytest.approx(1.0), "torch ops": pytest.approx(2.0)}
    assert tf32["sampler_ms"] == {"kernel": pytest.approx(1.0), "torch ops": pytest.approx(3.0)}
    assert "norm_ms" not in bf16 and ((), sampler_before) in seen and (before, ()) in seen
    assert fused_norm.DEVICES == before and data.FUSED_DEVICES == sampler_before


def test_a_bf16_row_times_the_written_out_step_against_autograd_and_puts_the_setting_back():
    from geofact.ops.step_ab import BF16_WAYS, bf16_step
    from geofact.training import trainer

    before = trainer.covers_bf16
    (row,) = compare("cpu", ds=(8,), runs=3, N=64, steps=4, precisions=("bf16",), optimisers=False)
    assert trainer.covers_bf16 is before
    assert set(row["ms"]) == set(BF16_WAYS) and row["fastest"] in BF16_WAYS and row["precision"] == "bf16"
    assert row["loss_difference"] < 1e-2  # the same bfloat16 arithmetic to rounding
    with pytest.raises(ValueError, match="how must be one of"):
        with bf16_step("fused"):
            pass


def test_a_leases_rows_decide_each_default_by_the_stated_rule():
    from geofact.ops.step_ab import decide

    def row(d, precision="tf32", N=4096, **extra):
        return {"N": N, "d": d, "runs": 42, "precision": precision, "errors": {}, **extra}

    one_max = "softmax kernel, one max"
    rows = [row(32, ms={one_max: 2.0, "fused kernels": 1.5}, norm_ms={"kernels": 2.0, "torch ops": 2.5},
                sampler_ms={"kernel": 2.0, "torch ops": 2.02}, optimiser_ms={"together": 3.0, "per run": 3.5, "fused kernel": 2.9}),
            row(128, ms={one_max: 4.0, "fused kernels": 3.95}, norm_ms={"kernels": 4.0, "torch ops": 3.0}),
            row(768, ms={one_max: 20.0, "fused kernels": 40.0}),  # d > 128: not the fused way's to win
            row(32, precision="bf16", ms={"written out": 1.0, "autograd": 2.0})]
    verdicts = decide(rows)
    assert verdicts["fused output layer"]["on"] is False  # a 1% win at d = 128 is a tie, not a reason to switch it on
    assert len(verdicts["fused output layer"]["rows"]) == 2
    assert verdicts["norm kernels"]["on"] is False and verdicts["sampler kernel"]["on"] is True  # 1% slower: a tie
    assert verdicts["AdamW kernel"]["on"] is True and verdicts["written-out bf16 step"]["on"] is True
    rows[1]["ms"]["fused kernels"] = 3.0
    assert decide(rows)["fused output layer"]["on"] is True
    assert decide([])["norm kernels"]["on"] is None  # no row timed it: left as it is
