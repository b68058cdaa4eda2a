import pytest
import torch
from torch.nn import functional as F

from geofact.precision import at_least_fp32
from geofact.training.config import TrainConfig
from geofact.training.model import forward
from geofact.training.stack import stack_params
from geofact.training.step import loss_and_grads
from geofact.training.step_bf16 import covers_bf16, loss_and_grads_bf16


def _problem(dtype: torch.dtype, attention: str = "uniform", seed: int = 0):
    """Stacked weights off their init (gains != 1, biases != 0), a batch of 16 queries a run, and the tokens."""
    configs = [TrainConfig(N=24, R=R, d=8, seed=s, batch_size=16, attention=attention) for R in (2, 3) for s in (0, 1)]
    g = torch.Generator().manual_seed(seed)
    params = {k: (v + 0.3 * torch.randn(v.shape, generator=g, dtype=v.dtype)).requires_grad_()
              for k, v in stack_params(configs, dtype).items()}
    M, B = len(configs), 16
    subjects, relations = torch.randint(0, 24, (M, B), generator=g), torch.randint(0, 2, (M, B), generator=g)
    targets = torch.randint(0, 24, (M, B), generator=g)
    return params, subjects, relations, targets, torch.stack([subjects, 24 + relations], 2)


def _autograd(params, tokens, targets):
    """Each run's mean cross-entropy of the model's logits cast up, and the gradients of their sum (the trainer's
    autograd path, geofact.training.trainer.FactGroup.losses_and_grads)."""
    M, B = targets.shape
    logits = at_least_fp32(forward(params, tokens))
    losses = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none").view(M, B).mean(1)
    return losses.detach(), dict(zip(params, torch.autograd.grad(losses.sum(), list(params.values()))))


def test_the_bf16_steps_algebra_is_autograds_in_float64():
    # with float64 as its matmul dtype every cast is an identity: what is left is the backward written out
    params, subjects, relations, targets, tokens = _problem(torch.float64)
    reference, expected = _autograd(params, tokens, targets)
    losses, grads = loss_and_grads_bf16(params, subjects, relations, targets, low=torch.float64)
    torch.testing.assert_close(losses, reference, rtol=1e-12, atol=1e-12)
    assert set(grads) == set(params)
    for name, value in expected.items():
        assert value.abs().max() > 0, name
        torch.testing.assert_close(grads[name], value, rtol=1e-10, atol=1e-12, msg=name)
    # some tensors only, into given buffers, a frozen entity table masked to zero for two of the runs
    out = {k: torch.full_like(v, float("nan")) for k, v in params.items() if k in ("E_ent", "W_1", "b_2")}
    mask = torch.tensor([1.0, 0.0, 1.0, 0.0], dtype=torch.float64)
    _, some = loss_and_grads_bf16(params, subjects, relations, targets, wanted=("E_ent", "W_1", "b_2"), out=out,
                                  row_masks={"E_ent": mask}, low=torch.float64)
    assert set(some) == {"E_ent", "W_1", "b_2"} and all(some[k] is out[k] for k in some)
    torch.testing.assert_close(some["E_ent"], expected["E_ent"] * mask[:, None, None], rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(some["W_1"], expected["W_1"], rtol=1e-10, atol=1e-12)


def test_the_bf16_step_is_autocasts_not_float32s():
    # against autograd under autocast (bfloat16 matmuls): as close as two orders of the same bfloat16 ops come, and
    # much closer to it than either is to the float32 step, from which its bfloat16 roundings move it
    params, subjects, relations, targets, tokens = _problem(torch.float32)
    with torch.autocast("cpu", dtype=torch.bfloat16, cache_enabled=False):
        reference, expected = _autograd(params, tokens, targets)
    losses, grads = loss_and_grads_bf16(params, subjects, relations, targets)
    fp32_losses, fp32 = loss_and_grads(params, subjects, relations, targets)
    assert losses.dtype == torch.float32 and all(grads[k].dtype == torch.float32 for k in grads)
    torch.testing.assert_close(losses, reference, rtol=1e-3, atol=1e-3)
    for name, value in expected.items():
        apart = (grads[name] - value).norm() / value.norm()
        from_fp32 = (fp32[name] - value).norm() / value.norm()
        # both paths make the same bfloat16 calls (apart is 0 for most tensors on the CPU that wrote this); a missing
        # cast puts a tensor a quarter of the way to the float32 step or more
        assert apart < 0.02 and apart < 0.1 * from_fp32, (name, float(apart), float(from_fp32))


def test_the_bf16_step_covers_uniform_attention_with_whole_logits_only():
    params = _problem(torch.float32)[0]
    cpu = torch.device("cpu")
    assert covers_bf16(params, 16, cpu) and not covers_bf16(params, 2**20, cpu)  # the logits in chunks
    assert not covers_bf16(_problem(torch.float64)[0], 16, cpu)  # autocast leaves float64 alone: so does the trainer
    learned = _problem(torch.float32, attention="learned")[0]
    assert not covers_bf16(learned, 16, cpu)
    with pytest.raises(ValueError, match="uniform attention"):
        loss_and_grads_bf16(learned, *(torch.zeros(4, 16, dtype=torch.long),) * 3)


def test_a_bf16_group_trains_through_the_written_out_step_as_through_autocast(monkeypatch):
    from geofact.training import trainer

    configs = [TrainConfig(N=16, R=2, d=8, batch_size=16, max_steps=40, seed=s, precision="bf16") for s in (0, 1)]
    group = trainer.FactGroup(configs, torch.device("cpu"), torch.float32, None, None)
    assert group.by_hand  # uniform attention, whole logits
    by_hand = trainer.train_group(configs, log_every=10)
    monkeypatch.setattr(trainer, "covers_bf16", lambda *args: False)
    autocast = trainer.train_group(configs, log_every=10)
    for a, b in zip(by_hand, autocast):
        assert [s for s, _ in a.loss_curve] == [s for s, _ in b.loss_curve]
        torch.testing.assert_close(torch.tensor([l for _, l in a.loss_curve]), torch.tensor([l for _, l in b.loss_curve]),
                                   rtol=1e-2, atol=1e-3)
