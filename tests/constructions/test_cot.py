import pytest
import torch

from geofact.constructions.cot import chain_of_thought
from geofact.codes import n_bits
from geofact.task import KHopTask

SIZES = [(2, 1, 1), (3, 2, 2), (5, 3, 3), (7, 2, 4), (16, 4, 2), (100, 5, 3), (1024, 8, 4)]


@pytest.mark.parametrize("N,R,k", SIZES)
def test_chain_of_thought_writes_the_whole_path(N, R, k):
    task = KHopTask.random(N, R, k, seed=N * k)
    c = chain_of_thought(task)
    q = task.queries(sample=3000, seed=0)
    ev = c.evaluate(q, batch_size=512)
    assert ev.accuracy == 1.0 and ev.min_margin > 0.99  # every emitted token s_0..s_k right
    emitted, _ = c.model.generate(q.tokens[:50], k + 1)
    assert torch.equal(emitted, q.chain[:50])
    assert torch.equal(c.predict(q.tokens[:50]), q.targets[:50])
    d_S, d_R = n_bits(N), n_bits(R)
    assert c.d_model == 1 + d_S + d_R + R * d_S + 2 * k + 1 == c.formulas["d_model"]
    assert (c.n_layers, c.n_heads, c.mlp_width) == (1, 1, (R + 2) * d_S)


def test_chain_of_thought_with_unit_scale_fails():
    task = KHopTask.random(16, 4, 2, seed=0)
    assert chain_of_thought(task, tau=1.0).accuracy(task) < 0.5


def test_evaluation_needs_the_chain():
    task = KHopTask.random(4, 2, 2)
    q = task.queries()
    with pytest.raises(ValueError, match="chain"):
        chain_of_thought(task).evaluate(type(q)(q.tokens, q.targets))
