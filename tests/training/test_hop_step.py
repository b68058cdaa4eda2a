import pytest
import torch
from torch.nn import functional as F

from geofact.training import hop_trainer
from geofact.training.config import MultiHopConfig
from geofact.training.hop_queries import sequences, walk
from geofact.training.hop_step import hop_loss_and_grads
from geofact.training.hop_trainer import QueryGroup, train_multihop
from geofact.training.model import causal_hidden, head
from geofact.training.step import WAYS


def tiny(**kw) -> MultiHopConfig:
    return MultiHopConfig(**{"N": 24, "R": 3, "k": 3, "d": 16, "batch_size": 32, "max_steps": 200,
                             "check_every": 50, "eval_queries": 256} | kw)


def group_and_batch(configs: list[MultiHopConfig]) -> tuple[QueryGroup, torch.Tensor, torch.Tensor]:
    """A float64 stack of `configs`, one batch of its tokens (M, B, L) and targets (M, B, T)."""
    group = QueryGroup(configs, torch.device("cpu"), torch.float64)
    queries = group.sample(range(0, 1))[:, 0]  # (M, B, k + 1)
    first = configs[0]
    M, B, T = len(configs), first.batch_size, first.n_targets
    tokens, targets = sequences(walk(group.tables, queries).flatten(0, 1), queries[..., 1:].flatten(0, 1), first.N, first.cot)
    return group, tokens.view(M, B, -1), targets.view(M, B, -1)[:, :, -T:]


def autograds(group: QueryGroup, tokens: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, dict]:
    """The definition: autograd through causal_hidden and the logits of every target position."""
    params, (M, B, T) = group.update.params, targets.shape
    states = causal_hidden(params, tokens)[:, :, -T:].flatten(1, 2)  # (M, B T, d)
    losses = F.cross_entropy(head(params, states).flatten(0, 1), targets.flatten(), reduction="none").view(M, -1).mean(1)
    names = group.update.names
    return losses.detach(), dict(zip(names, torch.autograd.grad(losses.sum(), [params[k] for k in names])))


@pytest.mark.parametrize("attention", ["learned", "uniform"])
@pytest.mark.parametrize("cot", [True, False])
@pytest.mark.parametrize("way", [w for w in WAYS if w != "fused kernels"])
def test_losses_and_gradients_are_autograds_in_float64(attention, cot, way):
    # a frozen entity table in one run, learned positions, every output-layer way on whole logits
    configs = [tiny(cot=cot, attention=attention, seed=1), tiny(cot=cot, attention=attention, R=2, frozen_embeddings=True, seed=2)]
    group, tokens, targets = group_and_batch(configs)
    reference, expected = autograds(group, tokens, targets)
    losses, grads = hop_loss_and_grads(group.update.params, tokens, targets, configs[0].k, way=way,
                                       wanted=group.update.names)
    torch.testing.assert_close(losses, reference, rtol=1e-12, atol=1e-12)
    assert set(grads) == set(expected)
    for name, value in expected.items():  # a frozen run's table too: the trainer masks both afterwards
        torch.testing.assert_close(grads[name], value, rtol=1e-10, atol=1e-12, msg=name)


def test_gradients_written_into_the_optimisers_buffer_are_the_returned_ones_masked():
    configs = [tiny(seed=1), tiny(frozen_embeddings=True, seed=2), tiny(seed=3)]
    group, tokens, targets = group_and_batch(configs)
    params, names = group.update.params, group.update.names
    losses, grads = hop_loss_and_grads(params, tokens, targets, configs[0].k, wanted=names)
    out, row_masks = group.update.grad_targets()
    out["E_ent"].fill_(float("nan"))  # every entry must be written, the frozen run's with zeros
    again, written = hop_loss_and_grads(params, tokens, targets, configs[0].k, wanted=names, out=out, row_masks=row_masks)
    assert torch.equal(losses, again) and all(written[k] is out[k] for k in written)
    for name, value in grads.items():
        expected = value * row_masks[name][:, None, None] if name in row_masks else value
        assert torch.equal(out[name], expected), name
    assert not out["E_ent"][1].any()


def test_a_step_without_some_gradients_skips_them_and_leaves_the_others_alone():
    configs = [tiny(seed=1)]
    group, tokens, targets = group_and_batch(configs)
    params = group.update.params
    _, every = hop_loss_and_grads(params, tokens, targets, configs[0].k)
    _, some = hop_loss_and_grads(params, tokens, targets, configs[0].k, wanted={"E_ent", "W_Q", "P"})
    assert set(some) == {"E_ent", "W_Q", "P"}
    for name, value in some.items():
        torch.testing.assert_close(value, every[name], rtol=1e-12, atol=1e-14, msg=name)


def test_bad_shapes_are_refused_with_the_parameter_named():
    configs = [tiny(seed=1)]
    group, tokens, targets = group_and_batch(configs)
    params, k, L = group.update.params, configs[0].k, tokens.shape[2]
    with pytest.raises(ValueError, match="k "):
        hop_loss_and_grads(params, tokens, targets, L)
    with pytest.raises(ValueError, match="targets"):
        hop_loss_and_grads(params, tokens, targets[:, :1].expand(-1, 2, -1), k)
    with pytest.raises(ValueError, match="learned positions"):
        hop_loss_and_grads(params, tokens[:, :, 1:], targets, k - 1)
    with pytest.raises(ValueError, match="row_masks"):
        hop_loss_and_grads(params, tokens, targets, k, row_masks={"W_1": torch.ones(1)})


def test_the_trainer_takes_it_on_its_devices_and_trains_as_autograd_does(monkeypatch):
    # 60 float64 steps of a CoT stack by hand and by autograd: the same weights to rounding (the step is the
    # same function; float64 keeps early training's growth of one-ulp differences far below the tolerance)
    configs = [tiny(seed=1, max_steps=60, check_every=30), tiny(seed=2, max_steps=60, check_every=30, frozen_embeddings=True)]
    assert QueryGroup(configs, torch.device("cpu"), torch.float64).by_hand is False  # the CPU keeps autograd
    by_autograd = train_multihop(configs, dtype=torch.float64)
    monkeypatch.setattr("geofact.training.hop_step.DEVICES", ("cpu",))
    assert QueryGroup(configs, torch.device("cpu"), torch.float64).by_hand is True
    assert QueryGroup([tiny(precision="bf16")], torch.device("cpu"), torch.float32).by_hand is False
    by_hand = train_multihop(configs, dtype=torch.float64)
    for a, b in zip(by_autograd, by_hand):
        assert a.steps == b.steps and a.accuracy_curve == b.accuracy_curve
        for name, value in a.params.items():
            torch.testing.assert_close(b.params[name], value, rtol=1e-8, atol=1e-10, msg=name)
