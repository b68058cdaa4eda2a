import pytest
import torch
from torch.nn import functional as F

from geofact.training import hop_trainer
from geofact.training.config import MultiHopConfig
from geofact.training.hop_queries import sequences, walk
from geofact.training.model import causal_hidden, head, hidden, init_params
from geofact.training.hop_trainer import evaluate, generate, train_multihop
from geofact.training.sweep import load_result, run_sweep


def test_causal_states_end_in_the_last_position_state_and_never_look_ahead():
    c = MultiHopConfig(N=12, R=3, k=3, d=16, cot=True)
    p = {n: v[None] for n, v in init_params(c, dtype=torch.float64).items()}
    tokens = torch.randint(0, 12, (1, 5, c.seq_len))
    states = causal_hidden(p, tokens)  # (1, 5, 6, 16)
    assert torch.allclose(states[:, :, -1], hidden(p, tokens))
    for l in range(1, c.seq_len):
        assert torch.allclose(states[:, :, l - 1], hidden(p, tokens[:, :, :l]))
    changed = tokens.clone()
    changed[:, :, -1] = (changed[:, :, -1] + 1) % 12
    assert torch.allclose(causal_hidden(p, changed)[:, :, :-1], states[:, :, :-1])


@pytest.mark.parametrize("attention", ["learned", "uniform"])
def test_states_at_the_last_positions_equal_those_of_every_position(attention):
    c = MultiHopConfig(N=12, R=3, k=3, d=16, cot=True, attention=attention)
    p = {n: v[None] for n, v in init_params(c, dtype=torch.float64).items()}
    tokens = torch.randint(0, 12, (1, 5, c.seq_len))
    every = causal_hidden(p, tokens)
    for n in range(1, c.seq_len + 1):
        assert torch.allclose(causal_hidden(p, tokens, n), every[:, :, -n:], rtol=0, atol=1e-12)
    for bad in (0, c.seq_len + 1):
        with pytest.raises(ValueError, match="last must be"):
            causal_hidden(p, tokens, bad)


class SumModel:
    """A stand-in model whose next token is (sum of the input tokens) mod N, so that every emitted
    token depends on the ones emitted before it."""

    def __init__(self, N: int) -> None:
        self.N = N

    def hidden(self, p, seq):
        return seq.sum(-1)  # (M, Q)

    def head(self, p, h):
        return torch.nn.functional.one_hot(h % self.N, self.N).float()


def test_generation_feeds_back_its_own_tokens(monkeypatch):
    N = 11
    fake = SumModel(N)
    monkeypatch.setattr(hop_trainer, "hidden", fake.hidden)
    monkeypatch.setattr(hop_trainer, "head", fake.head)
    queries = torch.tensor([[[3, 1, 0, 1], [7, 0, 0, 0]]])  # (M=1, Q=2, k+1=4): s_0, r_1..r_3
    out = generate({}, queries, N, cot=True)
    for q, emitted in zip(queries[0].tolist(), out[0].tolist()):
        seq = [q[0]] + [N + r for r in q[1:]]  # relations enter as tokens N + r
        for token in emitted:
            assert token == sum(seq) % N
            seq.append(token)
    assert out.shape == (1, 2, 3)
    assert generate({}, queries, N, cot=False).shape == (1, 2, 1)


def test_evaluate_scores_each_hop_on_the_generated_path_and_ignores_padding(monkeypatch):
    tables = torch.stack([torch.roll(torch.arange(6), 1), torch.roll(torch.arange(6), 2)])[None]  # g_r(s) = s + r + 1
    queries = torch.tensor([[[0, 0, 1], [1, 1, 1], [2, 0, 0], [5, 1, 0]]])  # last row is padding

    def path_with_a_wrong_second_hop(p, q, N, cot):
        path = hop_trainer.walk(tables, q)[..., 1:].clone()
        path[:, ::2, 1] = (path[:, ::2, 1] + 1) % N  # queries 0 and 2 end wrong
        return path

    monkeypatch.setattr(hop_trainer, "generate", path_with_a_wrong_second_hop)
    acc = evaluate({}, tables, queries, torch.tensor([3]), cot=True, chunk=2)
    assert torch.allclose(acc, torch.tensor([[1.0, 1 / 3]], dtype=torch.float64))


def tiny(**kw) -> MultiHopConfig:
    return MultiHopConfig(**{"N": 24, "R": 2, "k": 2, "d": 32, "batch_size": 128, "max_steps": 800,
                             "check_every": 50, "eval_queries": 256} | kw)


def test_cot_learns_two_hops_and_stops_on_eval_accuracy():
    (result,) = train_multihop([tiny()])
    assert result.stop_reason == "accuracy" and result.accuracy >= 0.999 and result.steps < 800
    assert result.hop_accuracy[-1] == result.accuracy and min(result.hop_accuracy) >= 0.999
    assert result.accuracy_curve[0][0] == 0 and result.accuracy_curve[0][1] < 0.2  # chance is 1/24 at the start
    assert result.accuracy_curve[-1] == (result.steps, result.accuracy)


def test_stacked_runs_train_as_they_would_alone():
    # In float32 a one-ulp difference between the stacked and solo kernels grows to ~8% of the loss and
    # 6 eval facts by step 150 (early training is chaotic: x10 every ~13 steps). In float64 over 100
    # steps, 1e-13 relative noise on every weight moves the loss by < 3e-7 and no eval fact: 1e-3 is safe.
    configs = [tiny(cot=False, max_steps=100, seed=1), tiny(cot=False, max_steps=100, R=3, frozen_embeddings=True, seed=2)]
    stacked = train_multihop(configs, dtype=torch.float64)
    for c, s in zip(configs, stacked):
        (alone,) = train_multihop([c], dtype=torch.float64)
        assert [step for step, _ in alone.accuracy_curve] == [step for step, _ in s.accuracy_curve]
        assert [a for _, a in alone.accuracy_curve] == pytest.approx([a for _, a in s.accuracy_curve], abs=2 / 256)
        assert alone.final_loss == pytest.approx(s.final_loss, rel=1e-3)
    frozen = init_params(configs[1], dtype=torch.float64)["E_ent"]
    assert torch.equal(stacked[1].params["E_ent"], frozen)  # frozen stays at its init
    assert stacked[0].hop_accuracy is None and stacked[0].stop_reason is None and stacked[0].steps == 100


@pytest.mark.parametrize("cot", [True, False])
def test_the_training_losses_and_gradients_are_autograds_through_every_logit(cot):
    # the step reads states only at the targets' positions and gets the output layer's gradients in one
    # function (geofact.training.step.unembed_cross_entropy): the same as autograd through the logits of
    # every position, in float64
    configs = [tiny(cot=cot, k=3, seed=1), tiny(cot=cot, k=3, R=3, frozen_embeddings=True, seed=2)]
    group = hop_trainer.QueryGroup(configs, torch.device("cpu"), torch.float64)
    queries = group.sample(range(0, 1))[:, 0]  # (M, B, k + 1)
    losses, grads = group.losses_and_grads(queries)
    M, B, T = len(configs), configs[0].batch_size, configs[0].n_targets
    tokens, targets = sequences(walk(group.tables, queries).flatten(0, 1), queries[..., 1:].flatten(0, 1), configs[0].N, cot)
    params = group.update.params
    states = causal_hidden(params, tokens.view(M, B, -1))[:, :, -T:].flatten(1, 2)  # (M, B T, d)
    logits = head(params, states)
    reference = F.cross_entropy(logits.flatten(0, 1), targets.view(M, B, -1)[:, :, -T:].flatten(), reduction="none").view(M, -1).mean(1)
    torch.testing.assert_close(losses, reference.detach(), rtol=1e-12, atol=1e-12)
    expected = dict(zip(group.update.names, torch.autograd.grad(reference.sum(), [params[k] for k in group.update.names])))
    assert set(grads) == set(expected)
    for name, value in expected.items():
        torch.testing.assert_close(grads[name], value, rtol=1e-10, atol=1e-12, msg=name)


def test_the_loss_rule_stops_after_patience_checks():
    (result,) = train_multihop([tiny(cot=False, loss_threshold=10.0, target_accuracy=1.0, patience=3)])
    assert result.stop_reason == "loss" and result.steps == 100  # below 10 at the checks of steps 0, 50, 100
    assert [s for s, _ in result.loss_curve] == [0, 50, 100]


def test_sweeps_cache_multihop_runs(tmp_path):
    configs = [tiny(max_steps=60, seed=s) for s in range(2)]
    first = run_sweep(configs, tmp_path, progress=False)
    assert [r["schema"] for r in first] == ["geofact.training.multihop/1"] * 2
    assert first[0]["eval_size"] == 96 and first[0]["pool_size"] is None and len(first[0]["hop_accuracy"]) == 2
    before = {p: p.stat().st_mtime_ns for p in tmp_path.iterdir()}
    assert run_sweep(configs, tmp_path, progress=False) == first
    assert {p: p.stat().st_mtime_ns for p in tmp_path.iterdir()} == before
    assert load_result(tmp_path, tiny(max_steps=60, seed=5)) is None


def test_a_run_that_stops_leaves_the_stack_and_the_others_train_as_they_would_alone():
    # float64 keeps stacked and solo within rounding (see the test above): the last run stops at step
    # 100, and every check sits >= 0.045 (11 of 256 eval queries) from the 0.3 stop level, so rounding
    # cannot move a stop; the runs stop at different checks, so the stack shrinks while the others go on
    configs = [tiny(max_steps=300, target_accuracy=0.3, seed=s, R=R) for s, R in [(1, 2), (2, 3), (3, 2)]]
    stacked = train_multihop(configs, dtype=torch.float64)
    assert len({r.steps for r in stacked}) > 1
    for c, s in zip(configs, stacked):
        (alone,) = train_multihop([c], dtype=torch.float64)
        assert (alone.steps, alone.stop_reason) == (s.steps, s.stop_reason)
        assert [a for _, a in alone.accuracy_curve] == pytest.approx([a for _, a in s.accuracy_curve], abs=2 / 256)
        for name, value in alone.params.items():
            torch.testing.assert_close(s.params[name], value, rtol=1e-6, atol=1e-9)
