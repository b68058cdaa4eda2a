import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from geofact import fast_paths
from geofact.analysis.interventions import (by_argmax, checked_others_per_edit, intervene, other_relations, random_swaps,
                                           rank_grid,
                                           selectivity_sweep, truncated_pinv)
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


def test_other_relations_are_distinct_and_never_the_edited_one():
    drawn = other_relations(5, 30, 3, seed=0)
    assert drawn.shape == (5, 30, 3) and drawn.dtype == torch.int64
    assert not (drawn == torch.arange(5)[:, None, None]).any()
    assert (drawn.sort(-1).values.diff(dim=-1) > 0).all()  # distinct
    assert torch.equal(drawn, other_relations(5, 30, 3, seed=0)) and not torch.equal(drawn, other_relations(5, 30, 3, seed=1))
    every = other_relations(5, 400, 1, seed=0)  # uniform over the other four: each about 100 times an edited relation
    counts = torch.stack([torch.bincount(every[r].flatten(), minlength=5) for r in range(5)])
    assert (counts.diagonal() == 0).all() and counts.sum() - counts.diagonal().sum() == 2000 and counts.max() < 150
    for bad in (0, 5):
        with pytest.raises(ValueError, match=r"others_per_edit must be in \[1, R - 1 = 4\]"):
            other_relations(5, 30, bad, seed=0)


def test_each_other_relation_is_drawn_with_the_same_probability():
    # p = 2 of R - 1 = 4: each (edit, other relation) pair scored with probability 1/2, so C's estimate has no bias
    drawn = other_relations(5, 4000, 2, seed=7)
    hits = torch.stack([torch.bincount(drawn[e].flatten(), minlength=5) for e in range(5)]).double()  # (edited, drawn)
    off = ~torch.eye(5, dtype=torch.bool)
    assert (hits[~off] == 0).all() and (hits[off] - 2000).abs().max() < 5 * (4000 * 0.25) ** 0.5  # within 5 sd


def test_a_draw_that_scores_the_edited_relation_or_one_twice_is_refused():
    hidden, answers, vectors, predict, m = block_model(R=4)
    subjects = torch.arange(6)
    maps = [torch.eye(hidden.shape[-1], dtype=torch.float64)[:, r * m : (r + 1) * m] for r in range(4)]
    swaps = random_swaps(answers, subjects, seed=1)
    good = other_relations(4, 6, 2, seed=0)
    own, twice, outside = good.clone(), good.clone(), good.clone()
    own[1, 3, 0] = 1
    twice[2, 0, 1] = twice[2, 0, 0]
    outside[0, 0, 0] = 4
    for bad in (own, twice, outside):
        with pytest.raises(ValueError, match="distinct relations in \\[0, R\\) other than the edited one"):
            intervene(hidden, answers, by_argmax(predict), maps, vectors, subjects, swaps, [m], others=bad)
        with FakeTensorMode(allow_non_fake_inputs=True):  # host data under fake tensors: checked, never read as fake
            with pytest.raises(ValueError, match="distinct relations"):
                intervene(hidden, answers, by_argmax(predict), maps, vectors, subjects, swaps, [m], others=bad)
    for bad in (good[..., 0], good[None], good.double(), good > 0):
        with pytest.raises(ValueError, match="integer relation ids"):
            intervene(hidden, answers, by_argmax(predict), maps, vectors, subjects, swaps, [m], others=bad)
    for value in (0, True, 1.5, "2"):
        with pytest.raises(ValueError, match="others_per_edit must be None"):
            checked_others_per_edit(value)
    assert checked_others_per_edit(None) is None and checked_others_per_edit(3) == 3


def float64_sweep_inputs(tmp_path, R=4):
    """A trained run in float64 (no ties within rounding) and what `intervene` takes for it."""
    config = TrainConfig(N=128, R=R, d=16, batch_size=128, max_steps=300, lr=3e-2)
    run_sweep([config], tmp_path, progress=False)
    trained = TrainedModel.load(tmp_path, config)
    model = TrainedModel(config, {k: v.double() for k, v in trained.weights.items()})
    train = split_subjects(config.N, 0.2, 1)
    subjects = torch.nonzero(~train).flatten()
    hidden, vectors = model.hidden_states(), model.attribute_vectors("unembedding")
    maps = [W for W, _ in linear_readout(hidden, model.answers, vectors, train, 1e-3).maps]
    return model, (hidden, model.answers, by_argmax(model.predict), maps, vectors, subjects,
                   random_swaps(model.answers, subjects, 1), rank_grid(16, 4))


def test_the_drawn_others_split_c_into_unbiased_parts(tmp_path):
    # every other relation drawn, in a random order per edit, scores the same pairs as the full sweep; taking one
    # position of that order at a time gives R - 1 estimates of C from disjoint pairs, whose mean is the full C
    model, args = float64_sweep_inputs(tmp_path)
    R, n = model.config.R, len(args[5])
    full = intervene(*args)
    order = other_relations(R, n, R - 1, seed=3)
    assert intervene(*args, others=order) == full
    parts = [intervene(*args, others=order[..., j : j + 1]) for j in range(R - 1)]
    for i, s in enumerate(full):
        assert all(part[i].follows == s.follows for part in parts)  # the edited relation is always scored
        assert sum(part[i].stays for part in parts) / (R - 1) == pytest.approx(s.stays, abs=1e-12)
    assert len({tuple(part[i].stays for i in range(len(full))) for part in parts}) > 1  # the parts do differ
    sampled = selectivity_sweep(model, rank_grid(16, 4), seed=1, others_per_edit=1)
    assert [s.k for s in sampled] == [s.k for s in full]
    with pytest.raises(ValueError, match="others must be"):
        intervene(*args, others=order[:, :5])
    with pytest.raises(ValueError, match="others_per_edit must be None"):
        selectivity_sweep(model, [1], others_per_edit=0)


def test_others_per_edit_at_or_above_r_minus_1_is_every_other_relation(tmp_path):
    model, args = float64_sweep_inputs(tmp_path, R=2)
    ks = args[-1]
    assert selectivity_sweep(model, ks, seed=1, others_per_edit=1) == selectivity_sweep(model, ks, seed=1) \
        == selectivity_sweep(model, ks, seed=1, others_per_edit=5)


def test_a_runs_states_draw_their_edits_once_and_sweep_as_from_a_fresh_draw(tmp_path, monkeypatch):
    """The subjects, swaps and other relations of a sweep depend on (N, R, task seed, held_out, seed) alone: drawn
    once for a run's states (51 ms a sweep at N = 4096, R = 16 on a CPU), the sweeps are those of each state's own
    draw."""
    from geofact.analysis import interventions

    config = TrainConfig(N=64, R=4, d=16, batch_size=64, max_steps=60, lr=3e-2)
    run_sweep([config], tmp_path, progress=False, checkpoints=[0])
    states = [TrainedModel.load(tmp_path, config, step) for step in (0, None)]
    interventions.edits.cache_clear()
    draws = []
    monkeypatch.setattr(interventions, "random_swaps", lambda *a: draws.append(a) or random_swaps(*a))
    cached = [selectivity_sweep(m, [1, 8, 16], seed=1, others_per_edit=1, target=t)
              for m in states for t in ("unembedding", "embedding")]
    assert len(draws) == 1  # four sweeps, one draw
    interventions.edits.cache_clear()
    fresh = []
    for m in states:
        for t in ("unembedding", "embedding"):
            interventions.edits.cache_clear()
            fresh.append(selectivity_sweep(m, [1, 8, 16], seed=1, others_per_edit=1, target=t))
    assert cached == fresh and len(draws) == 5
    subjects, new, others = interventions.edits(64, 4, config.bijection_seed, 0.2, 1, 1)
    assert others.shape == (4, len(subjects), 1) and new.shape == (len(subjects), 4)
    assert interventions.edits(64, 4, config.bijection_seed, 0.2, 1, 3)[2] is None  # R - 1: every other relation
