import pytest

import geofact.constructions as constructions
from geofact.task import KHopTask, SharedAttributeTask

SINGLE_HOP = ["shared_attribute_mlp", "shared_attribute_attention", "shared_attribute_hierarchical"]
K_HOP = ["key_value_memory", "embedding_precomputation", "chain_of_thought"]


@pytest.mark.parametrize("name", SINGLE_HOP + K_HOP)
def test_every_construction_has_the_public_interface(name):
    task = SharedAttributeTask.random(11, 3, seed=0) if name in SINGLE_HOP else KHopTask.random(11, 3, 2, seed=0)
    c = getattr(constructions, name)(task)
    assert c.accuracy(task) == 1.0
    q = task.queries()
    assert (c.predict(q.tokens) == q.targets).all()
    summary = c.summary()
    assert {"d_model", "mlp_width", "n_layers", "n_heads", "n_params"} <= set(summary)
    assert summary["n_params"] == sum(t.numel() for t in c.model.tensors()) and summary["paper_d_model"] > 0


def test_cuda_request_without_cuda_is_a_clear_error():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(RuntimeError, match="cuda"):
        constructions.chain_of_thought(KHopTask.random(4, 2, 2), device="cuda")
