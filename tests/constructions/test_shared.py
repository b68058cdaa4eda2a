import math

import pytest
import torch

from geofact.codes import lemma_code_length
from geofact.constructions.shared import (
    relation_bits,
    shared_attribute_attention,
    shared_attribute_hierarchical,
    shared_attribute_mlp,
)
from geofact.task import SharedAttributeTask

SIZES = [(2, 1), (3, 2), (5, 3), (16, 4), (100, 7), (129, 8)]


@pytest.mark.parametrize("N,R", SIZES)
def test_mlp_version_is_exact_with_the_papers_dimension(N, R):
    task = SharedAttributeTask.random(N, R, seed=N * R)
    c = shared_attribute_mlp(task, seed=2)
    ev = c.evaluate(task.queries(), batch_size=64)
    assert ev.accuracy == 1.0 and ev.min_margin >= 2
    m = lemma_code_length(N, "2")
    assert c.d_model == R * m + 1 and c.n_layers == 1 and c.n_heads == 1
    assert c.mlp_width == 2 * R * m + 2 * max(R, m)  # the proof's O(R log N) neurons, not the statement's "width R"


@pytest.mark.parametrize("N,R", SIZES)
def test_attention_version_is_exact_with_repaired_query(N, R):
    task = SharedAttributeTask.random(N, R, seed=N + R)
    c = shared_attribute_attention(task, seed=3)
    ev = c.evaluate(task.queries(), batch_size=64)
    assert ev.accuracy == 1.0 and ev.min_margin > 1
    assert c.d_model == R * lemma_code_length(N, "2") + math.ceil(4 * math.log2(R)) + 1
    assert (c.n_heads, c.mlp_width, c.n_layers) == (R, 0, 1)


def test_attention_version_with_the_papers_query_offset_can_fail():
    # Lemma G.1 allows <u_h, u_j> up to 3 d_u / 4, but the paper's offset d_u needs < d_u / 2
    task = SharedAttributeTask.random(100, 7, seed=0)
    assert shared_attribute_attention(task, seed=0, query_offset="paper").accuracy(task) < 1.0
    assert shared_attribute_attention(task, seed=0).accuracy(task) == 1.0


@pytest.mark.parametrize("N,R", SIZES)
def test_hierarchical_version_is_exact(N, R):
    task = SharedAttributeTask.random(N, R, seed=7 * N + R)
    c = shared_attribute_hierarchical(task, seed=4)
    ev = c.evaluate(task.queries(), batch_size=64)
    n_bits = math.ceil(math.log2(R)) if R > 1 else 0
    assert ev.accuracy == 1.0 and ev.min_margin > 1
    assert c.n_layers == 1 + n_bits and c.d_model == R * lemma_code_length(N, "2") + n_bits + 2
    assert c.prefix == (N + R,)  # BOS


def test_relation_bits_are_distinct_sign_codes():
    b = relation_bits(11)
    assert b.shape == (11, 4) and set(b.unique().tolist()) == {-1.0, 1.0}
    assert len({tuple(row) for row in b.tolist()}) == 11


def test_bad_arguments_are_rejected():
    task = SharedAttributeTask.random(8, 2, seed=0)
    with pytest.raises(ValueError, match="query_offset"):
        shared_attribute_attention(task, query_offset="half")
    with pytest.raises(ValueError, match="beta"):
        shared_attribute_hierarchical(task, beta=0)
    with pytest.raises(ValueError, match="permutation"):
        SharedAttributeTask(3, 1, torch.tensor([[0, 0, 1]]).numpy())


@pytest.mark.parametrize("N,R", [(16, 4), (100, 7)])
def test_mlp_version_with_the_literal_value_matrix_answers_relation_2j(N, R):
    """The proof's W_V = 2I with Section 2.2's residual leaves 2j at the relation coordinate."""
    task = SharedAttributeTask.random(N, R, seed=N + R)
    q = task.queries()
    pred = shared_attribute_mlp(task, literal_value_matrix=True).predict(q.tokens)
    j = q.tokens[:, 1] - N + 1  # the proof's 1-based relation index
    opened = 2 * j <= R
    wrong = torch.as_tensor(task.bijections)[(2 * j - 1).clamp(max=R - 1), q.tokens[:, 0]]
    assert torch.equal(pred[opened], wrong[opened])
    assert shared_attribute_mlp(task, literal_value_matrix=True).accuracy(task) < 0.1
