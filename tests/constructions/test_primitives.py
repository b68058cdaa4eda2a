import pytest
import torch

from geofact.constructions.primitives import (
    averaging_head,
    binary,
    check_tau,
    gate,
    hamming_unembedding,
    lay_out,
    relay_head,
)


def test_lay_out_puts_blocks_end_to_end_in_order():
    blocks = lay_out([("flag", 1), ("bin(s)", 3), ("empty", 0), ("position", 4)])
    assert list(blocks) == ["flag", "bin(s)", "empty", "position"]
    assert blocks["bin(s)"] == slice(1, 4) and blocks["empty"] == slice(4, 4) and blocks["position"] == slice(4, 8)


def test_hamming_unembedding_peaks_at_the_index_with_margin_one():
    n, bits, bias = 13, slice(1, 5), 0
    unembed = hamming_unembedding(n, 6, bits, bias, torch.float64)
    states = torch.zeros(n, 6, dtype=torch.float64)
    states[:, bits] = binary(n)
    states[:, bias] = 1
    scores = states @ unembed  # (n, n)
    assert (scores.argmax(dim=1) == torch.arange(n)).all()
    top2 = scores.topk(2, dim=1).values
    assert torch.equal(top2[:, 0] - top2[:, 1], torch.ones(n, dtype=torch.float64))


def test_gate_adds_zero_at_the_active_positions_and_minus_two_elsewhere():
    positions = slice(2, 7)
    w, b = gate(7, positions, [1, 3], torch.float64)
    one_hots = torch.zeros(5, 7, dtype=torch.float64)
    one_hots[torch.arange(5), positions.start + torch.arange(5)] = 1
    assert (one_hots @ w + b).tolist() == [-2, 0, -2, 0, -2]


def test_relay_head_moves_a_block_from_its_target_position():
    positions, value = slice(3, 6), slice(0, 2)
    head = relay_head(6, positions, [(1, 0), (2, 1)], tau=50.0, value=value, dtype=torch.float64)
    x = torch.zeros(1, 3, 6, dtype=torch.float64)
    x[0, :, positions] = torch.eye(3, dtype=torch.float64)
    x[0, 0, value] = torch.tensor([1.0, -1.0], dtype=torch.float64)  # what position 1 should receive
    out = head(x)  # (1, 3, 6)
    assert torch.allclose(out[0, 1, value], x[0, 0, value], atol=1e-15)
    assert torch.allclose(out[0, 2, value], torch.zeros(2, dtype=torch.float64), atol=1e-15)


def test_averaging_head_sums_the_kept_block_over_the_prompt():
    head = averaging_head(4, slice(0, 2), 2, torch.float64)
    x = torch.tensor([[[1.0, 2.0, 5.0, 0.0], [3.0, -1.0, 0.0, 7.0]]], dtype=torch.float64)  # (1, 2, 4)
    assert head(x)[0, 1].tolist() == [4.0, 1.0, 0.0, 0.0]


def test_check_tau_names_the_parameter():
    with pytest.raises(ValueError, match="tau"):
        check_tau(0.0)


def _every_construction():
    from geofact import constructions as C
    from geofact.task import DisjointAttributeTask, KHopTask, SharedAttributeTask

    shared = SharedAttributeTask.random(5, 3, seed=0)
    khop = KHopTask.random(5, 3, 2, seed=0)
    return [
        C.disjoint_attribute_transformer(DisjointAttributeTask.random(5, 3, seed=0)),
        C.shared_attribute_mlp(shared), C.shared_attribute_attention(shared), C.shared_attribute_hierarchical(shared),
        C.key_value_memory(khop), C.key_value_memory_first_token(khop), C.embedding_precomputation(khop),
        C.chain_of_thought(khop),
    ]


@pytest.mark.parametrize("construction", _every_construction(), ids=lambda c: c.name)
def test_named_blocks_tile_the_residual_stream(construction):
    """The pages label weights by `blocks`: they must cover every coordinate once, in order."""
    starts = [block.start for block in construction.blocks.values()]
    stops = [block.stop for block in construction.blocks.values()]
    assert starts[0] == 0 and stops[-1] == construction.d_model and starts[1:] == stops[:-1]

