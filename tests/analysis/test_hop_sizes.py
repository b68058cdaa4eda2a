import pytest

from geofact.analysis.hop_sizes import cot_dimension, cot_mlp_width, no_cot_tree_dimension, predicted_cells
from geofact.constructions.cot import chain_of_thought
from geofact.constructions.khop import embedding_precomputation
from geofact.task import KHopTask


@pytest.mark.parametrize("N, R, k", [(8, 2, 1), (16, 3, 2), (20, 4, 2), (9, 2, 3)])
def test_formulas_match_the_built_constructions(N, R, k):
    task = KHopTask.random(N, R, k, seed=0)
    cot = chain_of_thought(task)
    assert cot.d_model == cot_dimension(N, R, k) and cot.mlp_width == cot_mlp_width(N, R)
    assert embedding_precomputation(task).d_model == no_cot_tree_dimension(N, R, k)


def test_the_paper_grid_fits_every_cot_cell_in_d_256_but_not_the_deep_no_cot_trees():
    cells = predicted_cells(2048, 256, [1, 2, 4], [2, 4, 8, 12, 16])
    assert all(all(row) for row in cells["cot"])  # k = 4, R = 16: d = 201
    assert cells["no_cot_tree"] == [[True] * 5, [True, True, False, False, False], [True, False, False, False, False]]
