import pytest
import torch

from geofact import fast_paths
from geofact.analysis.interventions import by_argmax, intervene, random_swaps, rank_grid, selectivity_sweep, truncated_pinv
from geofact.analysis.readout import linear_readout, nearest, split_subjects
from geofact.analysis.rechecked import emulated_fast_logits
from geofact.analysis.trained import TrainedModel
from geofact.task import SharedAttributeTask
from geofact.training.config import TrainConfig
from geofact.training.sweep import run_sweep


def block_model(N=128, R=3, m=6, seed=0):
    """Hidden states h(x, r) = [a_{g_1(x)}, ..., a_{g_R(x)}]: a model whose 'MLP' selects block r exactly."""
    g = torch.Generator().manual_seed(seed)
    answers = torch.as_tensor(SharedAttributeTask.random(N, R, seed).bijections)
    vectors = torch.randn(N, m, generator=g, dtype=torch.float64)
    stack = torch.cat([vectors[answers[r]] for r in range(R)], dim=1)  # (N, R m)
    hidden = stack.expand(R, N, -1).clone()

    def predict(h):  # (..., R, n, R m) -> (..., R, n)
        return torch.stack([nearest(h[..., r, :, r * m : (r + 1) * m], vectors) for r in range(R)], -2)

    return hidden, answers, vectors, predict, m


def test_truncated_pinv():
    W = torch.randn(7, 4, dtype=torch.float64)
    torch.testing.assert_close(truncated_pinv(W, 4), torch.linalg.pinv(W))
    assert torch.linalg.matrix_rank(truncated_pinv(W, 2)) == 2
    with pytest.raises(ValueError, match="k must be"):
        truncated_pinv(W, 5)


def test_a_block_selector_is_perfectly_selective_with_fitted_readouts():
    hidden, answers, vectors, predict, m = block_model()
    R, N, _ = hidden.shape
    train = split_subjects(N, 0.2, seed=0)
    maps = [W for W, _ in linear_readout(hidden, answers, vectors, train, alpha=1e-8).maps]
    subjects = torch.nonzero(~train).flatten()
    s = intervene(hidden, answers, by_argmax(predict), maps, vectors, subjects, random_swaps(answers, subjects, seed=1), ks=[m])[0]
    assert s.follows == 1.0 and s.stays == 1.0 and s.score == 1.0


def test_an_entangled_predictor_is_not_selective():
    hidden, answers, vectors, _, m = block_model()
    R, N, d = hidden.shape
    mix = torch.randn(R, d, d, generator=torch.Generator().manual_seed(5), dtype=torch.float64)

    def entangled(h):  # every relation reads a random mixture of all blocks: no selection
        return torch.stack([nearest((h[..., r, :, :] @ mix[r])[..., :m], vectors) for r in range(R)], -2)

    maps = [torch.eye(d, dtype=torch.float64)[:, r * m : (r + 1) * m] for r in range(R)]
    subjects = torch.arange(40)
    s = intervene(hidden, answers, by_argmax(entangled), maps, vectors, subjects, random_swaps(answers, subjects, seed=1), ks=[m])[0]
    assert s.follows < 0.2


def test_random_swaps_never_keep_the_answer():
    answers = torch.as_tensor(SharedAttributeTask.random(50, 4, 0).bijections)
    subjects = torch.arange(50)
    new = random_swaps(answers, subjects, seed=0)
    assert new.shape == (50, 4) and not (new == answers.T).any() and new.max() < 50


def test_selectivity_sweep_on_a_trained_model(tmp_path):
    config = TrainConfig(N=128, R=2, d=16, batch_size=128, max_steps=200, lr=3e-2)
    run_sweep([config], tmp_path, progress=False)
    model = TrainedModel.load(tmp_path, config)
    sweep = selectivity_sweep(model, [1, 4, 16], seed=2)
    assert [s.k for s in sweep] == [1, 4, 16]
    assert all(0 <= s.follows <= 1 and 0 <= s.stays <= 1 for s in sweep)
    assert sweep[0].stays > 0.9  # a rank-1 edit is tiny: the other relation's answers stay
    with pytest.raises(ValueError, match=r"ks must be a non-empty list of ranks in \[1, d=16\]"):
        selectivity_sweep(model, [0, 17])


def test_rank_grid_covers_one_to_d():
    assert rank_grid(5) == [1, 2, 3, 4, 5]
    grid = rank_grid(100, points=10)
    assert grid[0] == 1 and grid[-1] == 100 and len(grid) <= 12 and grid == sorted(set(grid))


def test_the_rank_sweep_through_tf32_with_its_recheck_gives_float32s_answer(tmp_path, monkeypatch):
    from geofact.analysis import interventions, rechecked

    config = TrainConfig(N=256, R=4, d=16, batch_size=256, max_steps=300, lr=3e-2)
    run_sweep([config], tmp_path, progress=False)
    model = TrainedModel.load(tmp_path, config)
    ks = rank_grid(16, 8)
    train = split_subjects(config.N, 0.2, 1)
    subjects = torch.nonzero(~train).flatten()
    hidden, vectors = model.hidden_states(), model.attribute_vectors("unembedding")
    maps = [W for W, _ in linear_readout(hidden, model.answers, vectors, train, 1e-3).maps]
    swaps = random_swaps(model.answers, subjects, 1)
    exact = intervene(hidden, model.answers, by_argmax(model.predict), maps, vectors, subjects, swaps, ks)
    monkeypatch.setattr(fast_paths, "FAST_DEVICES", ("cpu",))
    monkeypatch.setattr(rechecked, "fast_logits", emulated_fast_logits)
    monkeypatch.setattr(rechecked, "computing_in", lambda precision, device: __import__("contextlib").nullcontext())
    calls = []

    def answered(h, targets):  # the rechecked answers; how often TF32 alone would have answered otherwise; rows rechecked
        hit = rechecked.rechecked_answered(model, h, targets)
        exact_hit = model.predict(h) == targets
        logits = emulated_fast_logits(model, h.reshape(-1, 16))
        top = logits.topk(2, -1).values
        tie = (top[:, 0] - top[:, 1]) / logits.abs().amax(-1) <= rechecked.CERTAIN_MARGIN
        calls.append((int((logits.argmax(-1) != model.predict(h).flatten()).sum()),
                      int((hit != exact_hit).sum()), float(tie.double().mean())))
        return hit

    fast = interventions.intervene(hidden, model.answers, answered, maps, vectors, subjects, swaps, ks)
    assert sum(flips for flips, *_ in calls) > 0  # TF32 alone changes some argmaxes of these edited states
    assert sum(left for _, left, _ in calls) == 0  # the recheck puts every one back
    # this model (about 77% of its facts after 300 steps) has 6-11% of each rank's edited rows within 1% of a tie
    assert len(calls) == len(ks) and min(share for *_, share in calls) > 0.02
    assert fast == exact
    assert selectivity_sweep(model, ks, seed=1) == exact  # the whole sweep on the fast path
    # calls of a few rows each (PREDICT_LOGITS) give the same answer
    monkeypatch.setattr(interventions, "PREDICT_LOGITS", {"cpu": 7 * config.N})
    assert selectivity_sweep(model, ks, seed=1) == exact


def test_ranks_beyond_the_readouts_are_refused():
    hidden, answers, vectors, predict, m = block_model()
    subjects = torch.arange(10)
    maps = [torch.eye(hidden.shape[-1], dtype=torch.float64)[:, r * m : (r + 1) * m] for r in range(hidden.shape[0])]
    for bad in ([0], [m + 1]):
        with pytest.raises(ValueError, match="ks must be ranks"):
            intervene(hidden, answers, by_argmax(predict), maps, vectors, subjects, random_swaps(answers, subjects, seed=1), bad)
