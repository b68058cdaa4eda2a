import pytest
import torch

from geofact.codes import n_bits
from geofact.constructions.khop import (
    embedding_precomputation,
    key_value_memory,
    key_value_memory_first_token,
)
from geofact.constructions.primitives import binary
from geofact.task import KHopTask

# odd sizes, every k the issue asks for, R = 1 (no relation bits) and a power of two
SIZES = [(2, 1, 1), (3, 2, 2), (5, 3, 3), (7, 2, 4), (16, 4, 2), (33, 3, 3), (100, 5, 2), (64, 8, 1)]


@pytest.mark.parametrize("N,R,k", SIZES)
def test_key_value_memory_is_exact_with_width_NR(N, R, k):
    task = KHopTask.random(N, R, k, seed=N + R + k)
    c = key_value_memory(task)
    ev = c.evaluate(task.queries(), batch_size=256)
    assert ev.accuracy == 1.0 and ev.min_margin > 0.99
    d_S, d_R = n_bits(N), n_bits(R)
    assert (c.n_layers, c.n_heads, c.mlp_width) == (k, 1, N * R)
    assert c.d_model == d_S + d_R + k + 2
    assert c.formulas["d_model"] == 1 + d_S + 2 * d_R + k  # the proof's count, printed beside ours


@pytest.mark.parametrize("N,R,k", SIZES)
def test_embedding_precomputation_is_exact_with_the_papers_dimension(N, R, k):
    task = KHopTask.random(N, R, k, seed=2 * N + k)
    c = embedding_precomputation(task)
    ev = c.evaluate(task.queries(), batch_size=256)
    assert ev.accuracy == 1.0 and ev.min_margin > 0.99
    d_S, d_R = n_bits(N), n_bits(R)
    assert c.d_model == R**k * d_S + d_R + k + 1 == c.formulas["d_model"]
    assert (c.n_layers, c.n_heads, c.mlp_width) == (k, 1, 2 * R**k * d_S)


def test_embedding_tree_is_the_k_hop_answer_table():
    task = KHopTask.random(5, 3, 2, seed=0)
    c = embedding_precomputation(task)
    d_S = n_bits(5)
    tree = c.model.embed[:5, : 9 * d_S].reshape(5, 9, d_S)
    q = task.queries()
    assert torch.equal(tree, binary(5)[q.targets].reshape(5, 9, d_S))


@pytest.mark.parametrize("build", [key_value_memory, embedding_precomputation])
def test_literal_unit_attention_scale_is_not_exact(build):
    task = KHopTask.random(16, 4, 2, seed=0)
    assert build(task, tau=1.0).accuracy(task) < 0.5


def test_sampled_evaluation_matches_the_task():
    task = KHopTask.random(1024, 8, 4, seed=0)
    q = task.queries(sample=2000, seed=1)
    assert key_value_memory(task).evaluate(q).accuracy == 1.0


def test_bad_tau_is_rejected():
    with pytest.raises(ValueError, match="tau"):
        key_value_memory(KHopTask.random(4, 2, 2), tau=0)


@pytest.mark.parametrize("N,R,k", SIZES)
def test_first_token_layout_is_exact_without_a_mask_and_fails_with_one(N, R, k):
    """Theorem 4.3 (1) as the proof lays it out: Section 2.2's unmasked attention is needed."""
    task = KHopTask.random(N, R, k, seed=3 * N + R)
    unmasked = key_value_memory_first_token(task)
    ev = unmasked.evaluate(task.queries(), batch_size=256)
    assert ev.accuracy == 1.0 and ev.min_margin > 0.99
    d_S, d_R = n_bits(N), n_bits(R)
    assert unmasked.d_model == 1 + d_S + 2 * d_R + k + 1 and unmasked.mlp_width == N * R + d_R
    # with a causal mask the first token never sees a relation: it reads relation 0 and applies g_0 at every layer
    q = task.queries()
    g0_k = q.tokens[:, 0].clone()
    for _ in range(k):
        g0_k = torch.as_tensor(task.bijections[0])[g0_k]
    assert torch.equal(key_value_memory_first_token(task, causal=True).predict(q.tokens).cpu(), g0_k)
