import math

import numpy as np
import pytest
import torch

from geofact.codes import n_bits
from geofact.constructions.cot import chain_of_thought
from geofact.constructions.cot_rotation import (
    max_rotation_k,
    rotation_angle,
    rotation_chain_of_thought,
    rotation_positions,
    shift_head,
)
from geofact.task import KHopTask, Queries

SIZES = [(2, 1, 1), (3, 2, 2), (5, 3, 3), (7, 2, 4), (16, 4, 2), (100, 5, 3), (1024, 8, 4)]


def drawn(task: KHopTask, n: int, seed: int) -> Queries:
    """Random queries with replacement (N R^k overflows the index sampler at large k)."""
    rng = np.random.default_rng(seed)
    s0, relations = rng.integers(0, task.N, n), rng.integers(0, task.R, (n, task.k))
    chain = torch.as_tensor(task.path(s0, relations))
    return Queries(torch.as_tensor(np.concatenate([s0[:, None], task.N + relations], axis=1)), chain[:, -1].clone(), chain)


@pytest.mark.parametrize("N,R,k", SIZES)
def test_rotation_model_emits_what_the_proofs_does(N, R, k):
    task = KHopTask.random(N, R, k, seed=N * k)
    c = rotation_chain_of_thought(task)
    q = task.queries(sample=2000, seed=0)
    ev = c.evaluate(q, batch_size=512)
    assert ev.accuracy == 1.0 and ev.min_margin > 0.99  # every emitted token s_0..s_k right, by the proof's margin
    emitted, _ = c.model.generate(q.tokens[:50], k + 1)
    proofs, _ = chain_of_thought(task).model.generate(q.tokens[:50], k + 1)
    assert torch.equal(emitted, q.chain[:50]) and torch.equal(emitted, proofs)
    d_S, d_R = n_bits(N), n_bits(R)
    assert c.d_model == 1 + d_S + d_R + R * d_S + 2  # two position coordinates, whatever k
    assert (c.n_layers, c.n_heads, c.mlp_width) == (1, 1, (R + 2) * d_S)


@pytest.mark.parametrize("k", [32, 96])
def test_rotation_model_keeps_its_dimension_at_long_chains(k):
    base = KHopTask.random(64, 3, 1, seed=1)
    task = KHopTask(64, 3, k, base.bijections)
    c = rotation_chain_of_thought(task)
    ev = c.evaluate(drawn(task, 48, seed=k), batch_size=48)
    assert ev.accuracy == 1.0 and ev.min_margin > 0.99
    assert c.d_model == rotation_chain_of_thought(KHopTask(64, 3, 2, base.bijections)).d_model
    assert chain_of_thought(task).d_model - c.d_model == 2 * k + 1 - 2  # the proof's one-hot against two coordinates


@pytest.mark.parametrize("k", [1, 5, 40])
def test_shift_head_reads_k_back_by_the_margin_tau(k):
    """Position p >= k scores p - k highest, by exactly tau over the nearest other position."""
    task = KHopTask.random(8, 2, k, seed=0)
    c = rotation_chain_of_thought(task, tau=7.0)
    blocks = c.blocks
    pos = rotation_positions(blocks, k, torch.float64)  # (2k + 1, d)
    head = shift_head(blocks, k, 7.0, torch.float64)
    scores = (pos @ head.W_Q) @ (pos @ head.W_K).T  # (query position, key position)
    for p in range(k, 2 * k + 1):
        visible = scores[p, : p + 1]
        best = int(visible.argmax())
        runner_up = visible.clone()
        runner_up[best] = -math.inf
        assert best == p - k
        assert float(visible[best] - runner_up.max()) == pytest.approx(7.0, rel=1e-9)
    assert rotation_angle(k) * (2 * k) < math.pi  # every angle of the scores within (-pi/2, pi/2) of the shift


def test_rotation_model_needs_a_large_scale():
    task = KHopTask.random(16, 4, 3, seed=0)
    assert rotation_chain_of_thought(task, tau=0.01).accuracy(task) < 0.5
    with pytest.raises(ValueError, match="tau"):
        rotation_chain_of_thought(task, tau=0.0)


def test_a_dtype_refuses_chains_its_scores_cannot_resolve():
    """float32 keeps the right position ahead by most of tau up to max_rotation_k and refuses a longer chain."""
    k = max_rotation_k(torch.float32)
    assert 500 < k < 5000 and max_rotation_k(torch.float64) > 10**6
    task = KHopTask(8, 2, k, KHopTask.random(8, 2, 1, seed=0).bijections)
    blocks = rotation_chain_of_thought(task, dtype=torch.float32).blocks
    pos = rotation_positions(blocks, k, torch.float32)
    head = shift_head(blocks, k, 50.0, torch.float32)
    scores = (pos[k:] @ head.W_Q) @ (pos @ head.W_K).T  # the positions whose outputs are read
    scores = scores.masked_fill(torch.ones_like(scores, dtype=torch.bool).tril(k).logical_not(), -math.inf)
    top2 = scores.topk(2, dim=1)
    assert torch.equal(top2.indices[:, 0], torch.arange(k + 1))  # position p reads p - k
    # scores near scale ~ 5e7 are float32 multiples of 4: 44 of the 50 here; another CPU's FMA order moves each score
    # by an ulp or two, so the test asks for half of tau, not the 37.5 that the design bound MARGIN_ROUNDING gives
    assert float((top2.values[:, 0] - top2.values[:, 1]).min()) > 50.0 / 2
    with pytest.raises(ValueError, match="float64"):
        rotation_chain_of_thought(KHopTask(8, 2, k + 1, task.bijections), dtype=torch.float32)
