import math

import numpy as np
import pytest

from geofact.lower_bound import (
    conflict_size_bound,
    exclusion_set,
    greedy_disjoint_roots,
    is_full_tree,
    k_hop_table,
    repaired_tree_count,
    translation_check,
    trees_disjoint,
)
from geofact.task import KHopTask, random_bijections


def test_k_hop_table_matches_the_task():
    task = KHopTask.random(7, 3, 3, seed=1)
    assert (k_hop_table(task.bijections, 3).ravel() == task.queries().targets.numpy()).all()


@pytest.mark.parametrize("N,R,k", [(3, 2, 2), (4, 2, 2), (3, 3, 2), (3, 2, 3)])
def test_equal_tables_are_right_translates(N, R, k):
    c = translation_check(N, R, k)
    assert c.all_right_translates and c.max_preimage <= math.factorial(N)
    assert c.n_tables >= c.claimed_min_tables and c.n_graphs == math.factorial(N) ** R


def test_translation_check_refuses_huge_enumerations():
    with pytest.raises(ValueError, match="N!"):
        translation_check(7, 3, 2)


def test_proofs_exclusion_can_exceed_R_2k_and_leave_trees_overlapping():
    g = random_bijections(4096, 2, seed=0)
    assert max(len(exclusion_set(g, v, 2, "proof")) for v in range(100)) > 2**4
    assert not trees_disjoint(g, greedy_disjoint_roots(g, 2, "proof"), 2)


@pytest.mark.parametrize("N,R,k", [(2048, 2, 2), (4096, 3, 2), (4096, 2, 3)])
def test_conflict_rule_gives_disjoint_trees_and_the_repaired_count(N, R, k):
    g = random_bijections(N, R, seed=N + k)
    roots = greedy_disjoint_roots(g, k, "conflict")
    assert trees_disjoint(g, roots, k) and len(roots) >= repaired_tree_count(N, R, k)
    assert max(len(exclusion_set(g, v, k, "conflict")) for v in range(50)) <= conflict_size_bound(R, k)


def test_full_tree_detects_collisions():
    g = np.array([[1, 2, 0], [1, 2, 0]])  # both relations equal: the tree collapses
    assert not is_full_tree(g, 0, 1)
    assert is_full_tree(random_bijections(10_000, 2, seed=0), 0, 1)
