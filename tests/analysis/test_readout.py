import pytest
import torch

from geofact.analysis.readout import READOUTS, cv_alpha, linear_readout, model_readouts, nearest, ridge, split_subjects
from geofact.analysis.trained import TrainedModel
from geofact.task import SharedAttributeTask
from geofact.training.config import TrainConfig
from geofact.training.sweep import run_sweep


def planted(N=256, R=3, k=8, d=32, seed=0):
    """Subject embeddings that are exact superpositions of their R attribute vectors (Theorem 4.1's form)."""
    g = torch.Generator().manual_seed(seed)
    task = SharedAttributeTask.random(N, R, seed)
    answers = torch.as_tensor(task.bijections)  # (R, N)
    vectors = torch.randn(N, k, generator=g, dtype=torch.float64)
    projections = torch.randn(R, k, d, generator=g, dtype=torch.float64)
    s = sum(vectors[answers[r]] @ projections[r] for r in range(R))  # (N, d)
    return s, answers, vectors


def test_ridge_recovers_an_affine_map():
    X = torch.randn(200, 5, dtype=torch.float64)
    W0, b0 = torch.randn(5, 3, dtype=torch.float64), torch.randn(3, dtype=torch.float64)
    W, b = ridge(X, X @ W0 + b0, alpha=0.0)
    torch.testing.assert_close(W, W0)
    torch.testing.assert_close(b, b0)
    with pytest.raises(ValueError, match="alpha"):
        ridge(X, X, alpha=-1)


def test_exact_superposition_reads_out_perfectly_on_held_out_subjects():
    s, answers, vectors = planted()
    R, N = answers.shape
    train = split_subjects(N, 0.2, seed=1)
    out = linear_readout(s.expand(R, N, -1), answers, vectors, train, alpha=1e-8)
    assert out.accuracy.tolist() == [1.0] * R


def test_random_embeddings_read_out_at_chance():
    _, answers, vectors = planted(N=512)
    R, N = answers.shape
    s = torch.randn(N, 32, dtype=torch.float64)
    out = linear_readout(s.expand(R, N, -1), answers, vectors, split_subjects(N, 0.2, seed=1))
    assert out.mean < 10 / N  # chance is 1/N; a fitted map cannot generalise to held-out random rows


def test_shuffled_attributes_break_a_planted_readout():
    s, answers, vectors = planted()
    R, N = answers.shape
    shuffled = answers[:, torch.randperm(N, generator=torch.Generator().manual_seed(3))]
    out = linear_readout(s.expand(R, N, -1), shuffled, vectors, split_subjects(N, 0.2, seed=1), alpha=1e-8)
    assert out.mean < 10 / N


def test_split_and_shapes_are_checked():
    train = split_subjects(100, 0.2, seed=0)
    assert int((~train).sum()) == 20 and torch.equal(train, split_subjects(100, 0.2, seed=0))
    with pytest.raises(ValueError, match="held_out"):
        split_subjects(100, 1.0, seed=0)
    with pytest.raises(ValueError, match="answers must be"):
        linear_readout(torch.zeros(2, 10, 4), torch.zeros(3, 10, dtype=torch.long), torch.zeros(10, 4), train[:10])
    assert nearest(torch.tensor([[0.0, 2.0]]), torch.tensor([[1.0, 0.0], [0.0, 1.0]])).tolist() == [1]


def test_model_readout_baselines_sit_at_chance_on_a_trained_model(tmp_path):
    # every fact learned; s and h read out at 0.91-0.98 over seeds 0-7 and in float64 (d 16, lr 3e-2 gave
    # 0.27-0.64: too near a threshold), so 0.5 sits 50 of the 128 held-out facts below the worst seen
    config = TrainConfig(N=256, R=2, d=32, batch_size=256, max_steps=300, lr=1e-2)
    run_sweep([config], tmp_path, progress=False)
    readouts = model_readouts(TrainedModel.load(tmp_path, config), held_out=0.25, seed=3)
    assert set(readouts) == set(READOUTS)
    assert all(r.accuracy.shape == (2,) for r in readouts.values())
    # 64 held-out subjects x 2 relations, chance 1/256: a handful of lucky hits at most
    assert readouts["random"].mean < 0.05 and readouts["shuffled"].mean < 0.05
    assert readouts["s"].mean > 0.5 and readouts["h"].mean > 0.5  # and the model's own readouts are far above


def test_ridge_is_scikit_learns_ridge():
    from sklearn.linear_model import Ridge

    g = torch.Generator().manual_seed(1)
    X, Y = torch.randn(60, 12, generator=g, dtype=torch.float64), torch.randn(60, 4, generator=g, dtype=torch.float64)
    W, b = ridge(X, Y, alpha=3.0)
    reference = Ridge(alpha=3.0, fit_intercept=True).fit(X.numpy(), Y.numpy())
    torch.testing.assert_close(W, torch.from_numpy(reference.coef_.T))
    torch.testing.assert_close(b, torch.from_numpy(reference.intercept_))


def test_cross_validated_penalty_uses_training_subjects_only():
    s, answers, vectors = planted(N=128, R=2, k=8, d=24)
    train = split_subjects(128, 0.2, seed=0)
    features = s.expand(2, -1, -1)
    # an enormous penalty shrinks the map to the mean answer: cross-validation must not choose it
    alpha, scores = cv_alpha(features, answers, vectors, train, alphas=(1e-3, 1e6), folds=4)
    assert alpha == 1e-3 and scores[0] > scores[1] and len(scores) == 2
    # the held-out subjects never enter: scrambling their features leaves the choice and scores unchanged
    scrambled = features.clone()
    scrambled[:, ~train] = torch.randn_like(scrambled[:, ~train])
    assert cv_alpha(scrambled, answers, vectors, train, alphas=(1e-3, 1e6), folds=4) == (alpha, scores)
    with pytest.raises(ValueError, match="folds must be in"):
        cv_alpha(features, answers, vectors, train, alphas=(1.0,), folds=1)
    with pytest.raises(ValueError, match="alphas must be"):
        cv_alpha(features, answers, vectors, train, alphas=(), folds=4)


def test_a_readout_fitted_on_every_subject_gives_its_maps_and_scores_nothing():
    s, answers, vectors = planted(N=64, R=2, k=8, d=24)
    every = torch.ones(64, dtype=torch.bool)
    out = linear_readout(s.expand(2, -1, -1), answers, vectors, every)
    assert len(out.maps) == 2 and torch.isnan(out.accuracy).all()
    with pytest.raises(ValueError, match="test must name no training subject"):
        linear_readout(s.expand(2, -1, -1), answers, vectors, every, test=every)


def test_the_baselines_are_drawn_once_per_shape_and_seed_and_are_those_of_a_fresh_draw():
    from geofact.analysis.readout import baseline_draws

    baseline_draws.cache_clear()
    noise, permutation = baseline_draws(3, 2, 10, 4)
    g = torch.Generator().manual_seed(3)
    assert torch.equal(noise, torch.randn((2, 10, 4), generator=g)) and torch.equal(permutation, torch.randperm(10, generator=g))
    assert baseline_draws(3, 2, 10, 4)[0] is noise and baseline_draws(4, 2, 10, 4)[0] is not noise
    assert baseline_draws.cache_info().hits == 1


def test_ridge_is_the_same_bit_for_bit_from_call_to_call():
    # LAPACK's lstsq, which ridge used on a CPU until 2026-11-29, gave 23 distinct results in 50 calls on one system
    g = torch.Generator().manual_seed(0)
    X, Y = torch.randn(200, 16, generator=g), torch.randn(200, 256, generator=g)
    fits = [ridge(X, Y, 1e-3) for _ in range(30)]
    assert all(torch.equal(W, fits[0][0]) and torch.equal(b, fits[0][1]) for W, b in fits)
