"""geofact.ops.step_profile: a stack's step op by op, beside its counted bytes."""

from types import SimpleNamespace

import pytest

from geofact.ops.step_profile import UNATTRIBUTED, _op_name, _with_unattributed, profile_step
from geofact.training.config import TrainConfig
from geofact.training.traffic import step_traffic

RUNS = [TrainConfig(N=256, R=R, d=8, batch_size=64, max_steps=100, loss_threshold=0.0, seed=s) for s, R in enumerate((2, 3))]


def test_a_step_profiled_on_the_cpu_gives_each_op_its_time_and_counted_bytes():
    profiled = profile_step(RUNS, "cpu", steps=2, graphed_steps=2)
    assert (profiled["N"], profiled["d"], profiled["runs"], profiled["steps"]) == (256, 8, 2, 2)
    assert profiled["step_ms"] > 0 and profiled["ops_ms"] == pytest.approx(sum(op["us"] for op in profiled["ops"]) / 1e3)
    ops = {op["op"]: op for op in profiled["ops"]}
    assert "aten::bmm" in ops and ops["aten::bmm"]["calls"] >= 2  # the unembedding forward and its gradients, at least
    counted = step_traffic(RUNS)
    assert profiled["counted_bytes"] == counted.bytes and ops["aten::bmm"]["bytes"] == counted.bytes_by_op["bmm"]
    bmm = ops["aten::bmm"]
    assert bmm["GBps"] == pytest.approx(bmm["bytes"] / (bmm["us"] * 1e-6) / 1e9)
    assert [op["us"] for op in profiled["ops"]] == sorted((op["us"] for op in profiled["ops"]), reverse=True)
    assert all(op["us"] > 0 and (op["bytes"] is None) == (op["GBps"] is None) for op in profiled["ops"])
    assert profiled["kernels"] == [] and profiled["kernels_ms"] == 0  # a CPU launches none
    with pytest.raises(ValueError, match="steps and graphed_steps must be >= 1, got 0 and 2"):
        profile_step(RUNS, "cpu", steps=0, graphed_steps=2)


def test_a_kernel_launched_by_a_runtime_call_belongs_to_the_op_around_it():
    op = SimpleNamespace(name="geofact::adamw_", cpu_parent=None)
    launch = SimpleNamespace(name="cuLaunchKernel", cpu_parent=op)
    assert _op_name(launch) == "geofact::adamw_" and _op_name(op) == "geofact::adamw_"
    assert _op_name(SimpleNamespace(name="cudaMemsetAsync", cpu_parent=None)) == "(outside any op)"



def test_kernels_the_profiler_gave_no_op_are_a_row_of_their_own():
    """torch gives a kernel to the op it was launched under; one launched where torch sees no op (a launch API the
    profiler does not link) would drop out of the ops' rows: its time goes to UNATTRIBUTED, so the ops add up to the
    kernels."""
    kernels = {"gemm": (60.0, 2), "triton_adamw": (40.0, 1)}
    own = {"aten::bmm": (60.0, 2)}
    filled = _with_unattributed(own, kernels)
    assert filled == {"aten::bmm": (60.0, 2), UNATTRIBUTED: (40.0, 0)} and own == {"aten::bmm": (60.0, 2)}
    assert _with_unattributed({"aten::bmm": (60.0, 2), "geofact::adamw_": (40.0, 1)}, kernels) == {
        "aten::bmm": (60.0, 2), "geofact::adamw_": (40.0, 1)}
    assert _with_unattributed({"aten::mm": (5.0, 1)}, {}) == {"aten::mm": (5.0, 1)}  # a CPU: no kernels
