"""geofact.training.fused_norm and fused_gelu: each run's RMSNorm and gain, forward and backward, and the MLP's GELU
backward with its bias's gradient, as autograd computes them (in float64, in Triton's interpreter, a child process:
tests/training/test_fused_ce.py), through the single-hop and multi-hop steps too; and the count takes the kernels'
own traffic."""

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from geofact.training import fused_ce, fused_gelu, fused_norm
from geofact.training.dispatch_count import TrafficCounter
from tests.training.test_fused_ce import _interpreted

pytestmark = pytest.mark.skipif(not fused_ce.TRITON, reason="Triton is a test dependency (pip install -e '.[test]')")


def test_the_kernels_are_autograds_rms_norm_in_float64():
    """(M, B, d) and (M, B, L, d) inputs, d not a power of two and d above a tile's 64 rows, rows shared among
    several programs (their partial sums added), an expanded dy (the uniform attention's), a strided x, the
    gain's gradient written into a strided view (an optimiser's buffer), and an empty batch."""
    errors = _interpreted("""
        from geofact.training import fused_norm
        from geofact.training.model import RMS_EPS
        torch.manual_seed(0)
        result = {}
        for name, shape, fill in (("3d", (2, 37, 12), 1024), ("4d", (3, 9, 2, 20), 1024), ("shared rows", (2, 300, 24), 4),
                                  ("wide", (2, 5, 130), 1024), ("expanded dy", (2, 40, 3, 8), 8), ("strided x", (2, 10, 16), 3)):
            fused_norm.FILL_PROGRAMS = fill
            x = torch.randn(*shape, dtype=torch.float64) * 3
            if name == "strided x":
                x = torch.randn(shape[0], shape[1], 2 * shape[2], dtype=torch.float64)[..., ::2]
            x.requires_grad_()
            gain = torch.randn(shape[0], shape[-1], dtype=torch.float64, requires_grad=True)
            view = gain.reshape(shape[0], *[1] * (len(shape) - 2), shape[-1])
            expected = torch.nn.functional.rms_norm(x, (shape[-1],), eps=RMS_EPS) * view
            dy = torch.randn(*shape, dtype=torch.float64)
            if name == "expanded dy":
                dy = torch.randn(shape[0], shape[1], 1, shape[3], dtype=torch.float64).expand(*shape)
            d_x, d_gain = torch.autograd.grad(expected, (x, gain), dy)
            y, r = fused_norm.rms_norm(x.detach(), gain.detach())
            buffer = torch.full((shape[0], 2 * shape[-1] + 1), float("nan"), dtype=torch.float64)
            out = buffer[:, 1::2]
            mine_x, mine_gain = fused_norm.backward(dy, x.detach(), r, gain.detach(), out=out)
            result[name] = {"y": (y - expected).abs().max().item(), "dx": (mine_x - d_x).abs().max().item(),
                            "dgain": (mine_gain - d_gain).abs().max().item(), "out": mine_gain.data_ptr() == out.data_ptr(),
                            "r": (r - torch.rsqrt(x.detach().pow(2).mean(-1, keepdim=True) + RMS_EPS)).abs().max().item(),
                            "programs": fused_norm._tiling(shape[0], x[0, ..., 0].numel(), shape[-1])[2]}
        from geofact.training import fused_gelu
        x, gain = torch.zeros(2, 0, 8, dtype=torch.float64), torch.ones(2, 8, dtype=torch.float64)
        y, r = fused_norm.rms_norm(x, gain)
        dx, d_gain = fused_norm.backward(x, x, r, gain)
        d_z1, d_b = fused_gelu.gelu_backward(torch.zeros(2, 0, 16, dtype=torch.float64), torch.zeros(2, 0, 16, dtype=torch.float64))
        result["empty"] = {"y": list(y.shape), "r": list(r.shape), "dx": list(dx.shape), "dgain": d_gain.abs().sum().item(),
                           "d_z1": list(d_z1.shape), "d_b": d_b.abs().sum().item()}
    """)
    empty = errors.pop("empty")
    assert empty == {"y": [2, 0, 8], "r": [2, 0, 1], "dx": [2, 0, 8], "dgain": 0.0, "d_z1": [2, 0, 16], "d_b": 0.0}, empty
    assert len(errors) == 6, errors
    for name, e in errors.items():
        assert e["out"] and max(e["y"], e["dx"], e["dgain"], e["r"]) < 1e-12, (name, e)
    assert errors["shared rows"]["programs"] > 1 and errors["expanded dy"]["programs"] > 1, errors


def test_the_gelu_kernel_is_autograds_gelu_and_bias_in_float64():
    """Widths below and above a tile's (4096 entries: one row a tile at 3072), rows shared among programs, strided
    inputs, and the bias's gradient written into a strided view."""
    errors = _interpreted("""
        from geofact.training import fused_gelu, fused_norm
        torch.manual_seed(3)
        result = {}
        for name, (M, B, W), fill in (("narrow", (2, 50, 48), 1024), ("shared rows", (3, 200, 20), 6), ("wide", (1, 40, 3072), 4)):
            fused_norm.FILL_PROGRAMS = fill
            z1 = (torch.randn(M, B, 2 * W, dtype=torch.float64) * 3)[..., ::2].requires_grad_()
            b = torch.zeros(M, 1, W, dtype=torch.float64, requires_grad=True)
            d_z = torch.randn(M, B, W, dtype=torch.float64)
            expected_z1, expected_b = torch.autograd.grad(F.gelu(z1 + b), (z1, b), d_z)
            out = torch.full((M, 2 * W), float("nan"), dtype=torch.float64)[:, ::2]
            d_z1, d_b = fused_gelu.gelu_backward(d_z, z1.detach(), out=out)
            result[name] = {"d_z1": (d_z1 - expected_z1).abs().max().item(), "d_b": (d_b - expected_b[:, 0]).abs().max().item(),
                            "out": d_b.data_ptr() == out.data_ptr(), "programs": fused_norm._tiling(M, B, W)[2]}
    """)
    assert len(errors) == 3, errors
    for name, e in errors.items():
        assert e["out"] and max(e["d_z1"], e["d_b"]) < 1e-12, (name, e)
    assert errors["shared rows"]["programs"] > 1 and errors["wide"]["programs"] > 1, errors


def test_the_steps_through_the_kernels_are_autograds():
    """geofact.training.step.loss_and_grads (uniform and learned attention) and hop_step's (CoT, learned positions)
    with their norms through the kernels, float64, against autograd's model."""
    errors = _interpreted("""
        from geofact.training import fused_norm
        from tests.training.test_fused_ce import step_error
        from tests.training.test_hop_step import autograds, group_and_batch, tiny
        from geofact.training.hop_step import hop_loss_and_grads
        fused_norm.DEVICES = ("cpu",)
        torch.manual_seed(1)
        result = {attention: step_error(attention, "softmax kernel") for attention in ("uniform", "learned")}
        for attention in ("uniform", "learned"):
            configs = [tiny(cot=True, attention=attention, seed=1), tiny(cot=True, attention=attention, R=2, seed=2)]
            group, tokens, targets = group_and_batch(configs)
            reference, expected = autograds(group, tokens, targets)
            losses, grads = hop_loss_and_grads(group.update.params, tokens, targets, configs[0].k, way="softmax kernel",
                                               wanted=group.update.names)
            result["hop " + attention] = max([(losses - reference).abs().max().item()]
                                             + [(grads[k] - expected[k]).abs().max().item() for k in expected])
        result["used"] = fused_norm.used(torch.zeros(1, 1, 4, dtype=torch.float64))
    """)
    assert errors.pop("used") is True
    assert len(errors) == 4 and all(e < 1e-10 for e in errors.values()), errors


def test_a_cpu_step_keeps_torchs_ops_and_a_gpu_takes_the_kernels_unless_told_not_to(monkeypatch):
    """The CPU trained every laptop record through torch's ops, and keeps them; the GPU (and the count of its step, on
    meta) takes the kernels, unless GEOFACT_FUSED_CE=0."""
    monkeypatch.setenv(fused_ce.ENV, "1")
    assert not fused_norm.used(torch.zeros(2, 3, 4))
    assert fused_norm.used(torch.zeros(2, 3, 4, device="meta"))
    assert not fused_norm.used(torch.zeros(2, 3, 4, device="meta", dtype=torch.bfloat16))
    monkeypatch.setenv(fused_ce.ENV, "0")
    assert not fused_norm.used(torch.zeros(2, 3, 4, device="meta"))


@pytest.mark.parametrize("shape", [(42, 1024, 128), (42, 1024, 2, 32), (1, 1024, 640)])
def test_the_count_takes_each_kernels_own_traffic(shape):
    """Forward: x read, y and r written (and the gains); backward: dy and x read, dx written (and r, the gains, the
    partial sums): two and three passes over x's size where torch's ops make four and nine."""
    M, d = shape[0], shape[-1]
    size = torch.Size(shape).numel() * 4
    with FakeTensorMode(allow_non_fake_inputs=True):
        x = torch.empty(shape, device="meta")
        gain, dy = torch.empty(M, d, device="meta"), torch.empty(shape, device="meta")
        with TrafficCounter() as forward:
            y, r = fused_norm.rms_norm(x, gain)
        with TrafficCounter() as backward:
            dx, d_gain = fused_norm.backward(dy, x, r, gain)
    assert y.shape == x.shape and r.shape == (*shape[:-1], 1) and dx.shape == x.shape and d_gain.shape == (M, d)
    small = r.numel() * 4 + gain.numel() * 4
    assert forward.ops == 1 and forward.bytes == 2 * size + small
    programs = fused_norm._tiling(M, torch.Size(shape[1:-1]).numel(), d)[2]
    partial = M * programs * d * 4
    assert backward.ops == 2 and backward.bytes == 3 * size + small + 2 * partial + M * d * 4  # and the partials' sum
    assert partial <= size / fused_norm.LEAST_ROWS  # the partial sums stay small beside the rows


def test_the_gelu_count_is_three_passes_and_its_partial_sums():
    M, B, W = 42, 1024, 512
    size = M * B * W * 4
    with FakeTensorMode(allow_non_fake_inputs=True):
        d_z, z1 = torch.empty(M, B, W, device="meta"), torch.empty(M, B, W, device="meta")
        with TrafficCounter() as counter:
            d_z1, d_b = fused_gelu.gelu_backward(d_z, z1)
    partial = M * fused_norm._tiling(M, B, W)[2] * W * 4
    assert d_z1.shape == (M, B, W) and d_b.shape == (M, W)
    assert counter.ops == 2 and counter.bytes == 3 * size + 2 * partial + M * W * 4 and partial <= size / 16


def test_bad_shapes_are_refused():
    with pytest.raises(ValueError, match="x must be"):
        fused_norm._shape(torch.zeros(3, 4))
    with pytest.raises(ValueError, match="d_z and z1 must be"):
        fused_gelu.gelu_backward_rows(torch.zeros(2, 3, 4), torch.zeros(2, 3, 5))
