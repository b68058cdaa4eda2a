import pytest
import torch
from torch.nn import functional as F

from geofact.training.config import TrainConfig
from geofact.training.model import forward
from geofact.training.step import WAYS, covers, loss_and_grads, output_loss_and_grads, unembed_cross_entropy
from geofact.training.stack import stack_params


def _stack(**overrides) -> list[TrainConfig]:
    return [TrainConfig(N=24, R=R, d=8, seed=s, batch_size=16, **overrides) for R in (2, 3) for s in (0, 1)]


@pytest.mark.parametrize("attention", ["uniform", "learned"])
def test_losses_and_gradients_are_autograds_in_float64(attention):
    configs = _stack(attention=attention)
    g = torch.Generator().manual_seed(0)
    params = {k: (v + 0.3 * torch.randn(v.shape, generator=g, dtype=v.dtype)).requires_grad_()  # off the init: gains != 1, biases != 0
              for k, v in stack_params(configs, torch.float64).items()}
    M, B = len(configs), 16
    tokens = torch.stack([torch.randint(0, 24, (M, B), generator=g), 24 + torch.randint(0, 2, (M, B), generator=g)], 2)
    targets = torch.randint(0, 24, (M, B), generator=g)
    reference = F.cross_entropy(forward(params, tokens).flatten(0, 1), targets.flatten(), reduction="none").view(M, B).mean(1)
    expected = dict(zip(params, torch.autograd.grad(reference.sum(), list(params.values()))))
    # the output whole, each way (torch's softmax kernel: a CPU's; its log-softmax kernel: a GPU's; the
    # written-out softmax); in chunks of 5 entities (a last one of 4) or of 1, keeping the exponentials (a
    # CPU's way) or recomputing them (a GPU's)
    # (the fused kernels run in Triton's interpreter on a CPU: tests/training/test_fused_ce.py)
    for width, keep, way in [(None, None, None), *((None, None, w) for w in WAYS if w != "fused kernels"), (5, True, None),
                             (1, True, None), (5, False, None), (1, False, None)]:
        losses, grads = loss_and_grads(params, tokens[..., 0], tokens[..., 1] - 24, targets, width, keep, way)
        torch.testing.assert_close(losses, reference.detach(), rtol=1e-12, atol=1e-12)
        assert set(grads) == set(params)
        for name, value in expected.items():
            assert value.abs().max() > 0, name  # every tensor has a gradient to compare
            torch.testing.assert_close(grads[name], value, rtol=1e-10, atol=1e-12, msg=f"{name}, width {width}, keep {keep}, way {way}")
    # a run that trains some tensors only (a transfer's entity table) gets those, the others' matmuls skipped
    for wanted in [("E_ent",), ("E_ent", "E_out"), ("W_1", "g_attn")]:
        for width in (None, 5):
            losses, grads = loss_and_grads(params, tokens[..., 0], tokens[..., 1] - 24, targets, width, wanted=wanted)
            assert set(grads) == set(wanted)
            for name in wanted:
                torch.testing.assert_close(grads[name], expected[name], rtol=1e-10, atol=1e-12, msg=f"{name} of {wanted}")


def test_the_unembedding_and_cross_entropy_as_one_function_is_autograds_in_float64():
    g = torch.Generator().manual_seed(1)
    M, B, d, N = 3, 10, 6, 17
    hf = torch.randn(M, B, d, generator=g, dtype=torch.float64, requires_grad=True)
    E_out = torch.randn(M, d, N, generator=g, dtype=torch.float64, requires_grad=True)
    targets = torch.randint(0, N, (M, B), generator=g)
    weights = torch.tensor([1.0, -0.5, 3.0], dtype=torch.float64)  # a backward that is not the plain sum's
    reference = F.cross_entropy(torch.bmm(hf, E_out).flatten(0, 1), targets.flatten(), reduction="none").view(M, B).mean(1)
    expected = torch.autograd.grad((reference * weights).sum(), [hf, E_out])
    losses = unembed_cross_entropy(hf, E_out, targets)
    torch.testing.assert_close(losses, reference, rtol=1e-12, atol=1e-12)
    for got, want in zip(torch.autograd.grad((losses * weights).sum(), [hf, E_out]), expected):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)


def test_learned_positions_are_left_to_autograd():
    params = stack_params(_stack(attention="learned", learned_positions=True), torch.float64)
    assert not covers(params)
    with pytest.raises(ValueError, match="without learned positions"):
        zeros = torch.zeros(4, 16, dtype=torch.long)
        loss_and_grads(params, zeros, zeros, zeros)


def test_every_way_keeps_a_collapsed_runs_loss_finite_and_a_memorised_runs_loss_exact():
    # a target 300 below the best logit (a spike's collapse: its probability underflows float32) and one
    # on top by 12 (a memorised run, loss about 7 e^-12 = 4.3e-5, where each way is off by 1e-7 to 9e-7): each
    # way's loss against float64's log-sum-exp
    N, d = 8, 4
    E_out = torch.eye(d, N)[None].repeat(2, 1, 1)  # (2, d, N): logit j is hf's coordinate j (0 beyond d)
    hf = torch.tensor([[[300.0, 0.0, 0.0, 0.0]], [[12.0, 0.0, 0.0, 0.0]]])  # (2, 1, d)
    targets = torch.tensor([[1], [0]])
    logits = torch.bmm(hf.double(), E_out.double())
    expected = (torch.logsumexp(logits, -1) - logits.gather(-1, targets[..., None])[..., 0]).mean(1)
    for way in (w for w in WAYS if w != "fused kernels"):  # (in Triton's interpreter: tests/training/test_fused_ce.py)
        losses, d_hf, d_E_out = output_loss_and_grads(hf, E_out, targets, N, way=way)
        assert torch.isfinite(d_hf).all() and torch.isfinite(d_E_out).all(), way
        # float32 near 1 is 6e-8 a ulp, and the errors measured here (AVX-512) reach 8.6e-7: 3e-6 leaves room for
        # another CPU's vector exp, and is 7% of the loss, which a wrong log-sum-exp misses by all of it
        torch.testing.assert_close(losses.double(), expected, rtol=1e-6, atol=3e-6, msg=way)
    with pytest.raises(ValueError, match="way must be one of"):
        output_loss_and_grads(hf, E_out, targets, N, way="fused")


def test_gradients_written_into_a_flat_buffer_with_row_masks_are_the_returned_ones_bit_for_bit():
    from geofact.training.optim import FlatStack

    M, B, N, R = 3, 16, 24, 3
    configs = [TrainConfig(N=N, R=R, d=8, batch_size=B, seed=s, attention="learned") for s in range(M)]
    stack = FlatStack(stack_params(configs, torch.float32))
    g = torch.Generator().manual_seed(0)
    subjects, relations = torch.randint(0, N, (M, B), generator=g), torch.randint(0, R, (M, B), generator=g)
    targets = torch.randint(0, N, (M, B), generator=g)
    losses, grads = loss_and_grads(stack.views, subjects, relations, targets)
    buffer = torch.full_like(stack.flat, float("nan"))  # every trained entry must be written
    out = stack.unflatten(buffer)
    mask = torch.tensor([1.0, 0.0, 1.0])  # run 1 does not train its entity table
    again, written = loss_and_grads(stack.views, subjects, relations, targets, out=out, row_masks={"E_ent": mask})
    assert torch.equal(losses, again) and all(written[k] is out[k] for k in written)
    assert not torch.isnan(buffer).any()
    for name, value in grads.items():
        expected = value * mask[:, None, None] if name == "E_ent" else value
        assert torch.equal(out[name], expected), name
    with pytest.raises(ValueError, match="row_masks"):
        loss_and_grads(stack.views, subjects, relations, targets, row_masks={"W_1": mask})
