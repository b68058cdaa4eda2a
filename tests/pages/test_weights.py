import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import pytest
import torch

from geofact.constructions import key_value_memory
from geofact.constructions.khop import lookup_mlp
from geofact.pages.weights import draw_matrix, residual_stream, source_markdown
from geofact.task import KHopTask


def test_draw_matrix_labels_blocks_and_writes_entries_but_not_leaks():
    fig, ax = plt.subplots()
    matrix = torch.tensor([[1.0, -2.0, 0.0], [1e-22, 0.5, 3.0]])
    draw_matrix(ax, matrix, "w", rows=["a", "b"], cols={"x": slice(0, 1), "yz": slice(1, 3)})
    assert [t.get_text() for t in ax.get_xticklabels()] == ["x", "yz"]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["a", "b"]
    assert sorted(t.get_text() for t in ax.texts) == sorted(["1", "-2", "0.5", "3"])
    plt.close(fig)


def test_draw_matrix_rejects_labels_of_the_wrong_length():
    fig, ax = plt.subplots()
    with pytest.raises(ValueError, match="3 given for 2"):
        draw_matrix(ax, torch.zeros(2, 2), "w", rows=["a", "b", "c"])
    plt.close(fig)


def test_source_markdown_names_the_function_its_file_and_lines():
    text = source_markdown(lookup_mlp)
    assert text.startswith("`geofact.constructions.khop.lookup_mlp` (geofact/constructions/khop.py, lines ")
    assert "def lookup_mlp(" in text and text.rstrip().endswith("```")


def test_residual_stream_lists_every_layer_in_order():
    c = key_value_memory(KHopTask.random(5, 2, 3, seed=0))
    _, cache = c.model.run_with_cache(torch.tensor([[0, 5, 6, 5]]))
    names = [name for name, _ in residual_stream(cache)]
    assert names == ["embeddings", "after layer 1", "after layer 2", "after layer 3"]
    assert torch.equal(residual_stream(cache)[-1][1], c.model.residual(torch.tensor([[0, 5, 6, 5]]))[0])
