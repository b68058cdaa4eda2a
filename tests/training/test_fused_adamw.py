"""geofact.training.fused_adamw: every run of a stack in one Triton kernel steps as torch's fused AdamW steps it, run
by run (checked in Triton's interpreter, a child process: tests/training/test_fused_ce.py), and the count takes
the kernel's seven passes over the trained entries."""

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from geofact.training import fused_ce
from geofact.training.dispatch_count import TrafficCounter
from geofact.training.optim import FlatStack, StackedAdamW
from tests.training.test_fused_ce import _interpreted

pytestmark = pytest.mark.skipif(not fused_ce.TRITON, reason="Triton is a test dependency (pip install -e '.[test]')")


@pytest.mark.parametrize("dtype, tolerance", [("float32", 1e-6), ("float64", 1e-12)])
def test_the_kernel_steps_every_run_as_torchs_fused_adamw_per_run(dtype, tolerance):
    """Runs with their own learning rates, a frozen block of columns in one, clipping that binds in some, a run
    skipped from the third step (as a stopped run is), eight steps, against torch's kernel on gradients clipped in
    place as a CPU's stack clips them; in float64 the hyperparameters, bias corrections and clipping divisors must
    be float64's too (a GPU would take run-time float arguments in float32; a float32 divisor moved a float64 run
    by 1e-8 in 20 steps, which the H200 lease of 2026-11-30 found)."""
    error = _interpreted("""
        from geofact.training.optim import FlatStack, StackedAdamW, clip_grad_norms_
        torch.manual_seed(0)
        torch.set_default_dtype(torch.DTYPE)
        M, P = 3, 2500
        weights = {"a": torch.randn(M, 1500), "b": torch.randn(M, 1000)}
        ranges = [[(0, 2500)], [(1500, 2500)], [(0, 2500)]]  # run 1 leaves "a" frozen
        opts = {}
        for fused in (False, True):
            stack = FlatStack({k: v.clone() for k, v in weights.items()})
            opts[fused] = StackedAdamW(stack, [1e-2, 3e-3, 1e-3], 0.1, ranges, per_run=True, fused=fused)
        worst = 0.0
        for step in range(8):
            grad = torch.randn(M, P) * torch.tensor([[0.01], [5.0], [0.3]])
            for fused, opt in opts.items():
                opt.grad.copy_(grad)
                if step == 2:
                    opt.skip[2] = 1
                if fused:
                    opt.clip_and_step(1.0)
                else:  # clipped in the buffer's dtype, as a CPU's stack clips (torch's grad_scale is float32)
                    clip_grad_norms_(opt.grad, 1.0)
                    opt.clip_and_step(float("inf"))
            a, b = opts[True].stack.flat, opts[False].stack.flat
            worst = max(worst, ((a - b).abs().max() / b.abs().max()).item())
        frozen = torch.equal(opts[True].stack.flat[1, :1500], weights["a"][1])
        result = {"worst": worst, "frozen": frozen, "moments": (opts[True].v - opts[False].v).abs().max().item(),
                  "dtype": str(opts[True].stack.flat.dtype)}
    """.replace("DTYPE", dtype))
    assert error["dtype"] == f"torch.{dtype}" and error["frozen"], error
    assert error["worst"] < tolerance and error["moments"] < tolerance, error


def test_the_count_is_seven_passes_over_the_trained_entries():
    M, P = 4, 3000
    ranges = [[(0, P)], [(1000, P)], [(0, P)], [(0, 500), (1000, P)]]
    with FakeTensorMode(allow_non_fake_inputs=True):
        stack = FlatStack({"a": torch.empty(M, 1000, device="meta"), "b": torch.empty(M, 2000, device="meta")})
        opt = StackedAdamW(stack, [1e-3] * M, 0.1, ranges, fused=True)
        assert opt.skips and not opt.per_run
        with TrafficCounter() as traffic:
            opt.step()
    trained = P + 2000 + P + 2500
    assert traffic.by_op["adamw_"] == 7 * 4 * trained
