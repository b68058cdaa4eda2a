import math

import numpy as np
import pytest
import torch

from geofact.constructions.base import Construction
from geofact.constructions.disjoint import disjoint_attribute_transformer, disjoint_dimensions
from geofact.task import DisjointAttributeTask, Queries
from geofact.transformer import AttentionHead, Layer, Transformer


@pytest.mark.parametrize("N,R", [(2, 1), (3, 3), (7, 2), (16, 4), (100, 5), (257, 32), (1000, 1)])
def test_construction_is_exact_at_the_theorem_dimension(N, R):
    task = DisjointAttributeTask.random(N, R, seed=N + R)
    c = disjoint_attribute_transformer(task, seed=1)
    ev = c.evaluate(task.queries(), batch_size=97)
    assert ev.accuracy == 1.0 and ev.min_margin >= 2  # distinct ±1 codes differ in >= 1 coordinate
    assert c.d_model == math.ceil(4 * math.log2(N * R)) == sum(disjoint_dimensions(N, R)[1:])
    assert (c.n_layers, c.n_heads, c.mlp_width) == (1, 1, 0)


def test_final_state_is_exactly_the_attribute_embedding():
    task = DisjointAttributeTask.random(30, 4, seed=0)
    c = disjoint_attribute_transformer(task)
    q = task.queries()
    final = c.model.residual(q.tokens)[:, -1]
    assert torch.equal(final, c.model.unembed.T[q.targets])


def test_literal_value_matrix_decodes_but_is_not_the_attribute_embedding():
    task = DisjointAttributeTask.random(30, 4, seed=0)
    c = disjoint_attribute_transformer(task, literal_value_matrix=True)
    q = task.queries()
    assert c.accuracy(task) == 1.0
    final = c.model.residual(q.tokens)[:, -1]
    _, m_N, _ = disjoint_dimensions(30, 4)
    expected = c.model.unembed.T[q.targets].clone()
    expected[:, m_N:] *= 2  # (v_i; 2 u_j): the residual adds r_j once more
    assert torch.equal(final, expected)


def test_non_injective_maps_are_refused_and_break_the_construction():
    maps = np.random.default_rng(0).integers(0, 64, size=(4, 64))
    task = DisjointAttributeTask(64, 4, maps)
    with pytest.raises(ValueError, match="injective"):
        disjoint_attribute_transformer(task)
    assert disjoint_attribute_transformer(task, allow_non_injective=True).accuracy(task) < 0.9


def test_evaluation_is_strict_about_ties():
    # two output columns identical: argmax would pick the first, a strict score counts it wrong
    d = 2
    embed = torch.eye(d, dtype=torch.float64)
    head = AttentionHead(torch.zeros(d, 1, dtype=torch.float64), torch.zeros(d, 1, dtype=torch.float64),
                         torch.zeros(d, d, dtype=torch.float64), torch.eye(d, dtype=torch.float64), "uniform")
    unembed = torch.tensor([[1.0, 1.0], [0.0, 0.0]], dtype=torch.float64)
    c = Construction("tie", Transformer(embed, [Layer([head])], unembed))
    ev = c.evaluate(Queries(torch.tensor([[0]]), torch.tensor([0])))
    assert ev.n_correct == 0 and ev.min_margin == 0.0
