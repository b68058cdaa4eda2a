import pytest
import torch

from geofact.analysis.interventions import intervene, random_swaps, truncated_pinv
from geofact.analysis.readout import linear_readout, nearest, split_subjects
from geofact.task import SharedAttributeTask


def block_model(N=128, R=3, m=6, seed=0):
    """Hidden states h(x, r) = [a_{g_1(x)}, ..., a_{g_R(x)}]: a model whose 'MLP' selects block r exactly."""
    g = torch.Generator().manual_seed(seed)
    answers = torch.as_tensor(SharedAttributeTask.random(N, R, seed).bijections)
    vectors = torch.randn(N, m, generator=g, dtype=torch.float64)
    stack = torch.cat([vectors[answers[r]] for r in range(R)], dim=1)  # (N, R m)
    hidden = stack.expand(R, N, -1).clone()

    def predict(h):  # (R, n, R m) -> (R, n)
        return torch.stack([nearest(h[r, :, r * m : (r + 1) * m], vectors) for r in range(R)])

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
    s = intervene(hidden, answers, predict, maps, vectors, subjects, random_swaps(answers, subjects, seed=1), k=m)
    assert s.follows == 1.0 and s.stays == 1.0 and s.score == 1.0


def test_an_entangled_predictor_is_not_selective():
    hidden, answers, vectors, _, m = block_model()
    R, N, d = hidden.shape
    mix = torch.randn(R, d, d, generator=torch.Generator().manual_seed(5), dtype=torch.float64)

    def entangled(h):  # every relation reads a random mixture of all blocks: no selection
        return torch.stack([nearest((h[r] @ mix[r])[:, :m], vectors) for r in range(R)])

    maps = [torch.eye(d, dtype=torch.float64)[:, r * m : (r + 1) * m] for r in range(R)]
    subjects = torch.arange(40)
    s = intervene(hidden, answers, entangled, maps, vectors, subjects, random_swaps(answers, subjects, seed=1), k=m)
    assert s.follows < 0.2


def test_random_swaps_never_keep_the_answer():
    answers = torch.as_tensor(SharedAttributeTask.random(50, 4, 0).bijections)
    subjects = torch.arange(50)
    new = random_swaps(answers, subjects, seed=0)
    assert new.shape == (50, 4) and not (new == answers.T).any() and new.max() < 50
