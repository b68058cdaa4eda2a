import numpy as np
import pytest

from geofact.task import DisjointAttributeTask, KHopTask, random_bijections, single_hop_tokens


def test_random_bijections_are_permutations_and_seeded():
    g = random_bijections(50, 4, seed=1)
    assert g.shape == (4, 50)
    assert all(sorted(row) == list(range(50)) for row in g)
    assert (g == random_bijections(50, 4, seed=1)).all() and not (g == random_bijections(50, 4, seed=2)).all()


@pytest.mark.parametrize("N,R,match", [(1, 2, "N"), (10, 0, "R"), (2.5, 1, "N")])
def test_bad_sizes_name_the_parameter(N, R, match):
    with pytest.raises(ValueError, match=match):
        random_bijections(N, R, 0)


def test_single_hop_tokens_cover_all_pairs():
    t = single_hop_tokens(5, 3)
    assert t.shape == (15, 2)
    assert {(int(s), int(r)) for s, r in t} == {(s, 5 + r) for s in range(5) for r in range(3)}


def test_disjoint_task_queries_and_validation():
    task = DisjointAttributeTask.random(20, 3, seed=0)
    q = task.queries()
    assert len(q) == 60 and task.is_injective
    s, r = q.tokens[:, 0].numpy(), q.tokens[:, 1].numpy() - 20
    assert (q.targets.numpy() // 20 == r).all()  # attribute sets are disjoint per relation
    assert (q.targets.numpy() % 20 == task.maps[r, s]).all()
    assert not DisjointAttributeTask(3, 1, np.array([[0, 0, 1]])).is_injective
    with pytest.raises(ValueError, match="shape"):
        DisjointAttributeTask(3, 2, np.zeros((3, 2), dtype=int))
    with pytest.raises(ValueError, match="entries"):
        DisjointAttributeTask(3, 1, np.array([[0, 1, 3]]))


def test_khop_queries_compose_left_to_right():
    task = KHopTask.random(6, 3, 2, seed=4)
    q = task.queries()
    assert len(q) == task.n_queries == 6 * 9
    s, r1, r2 = q.tokens[:, 0].numpy(), q.tokens[:, 1].numpy() - 6, q.tokens[:, 2].numpy() - 6
    g = task.bijections
    assert (q.targets.numpy() == g[r2, g[r1, s]]).all()
    assert (q.chain[:, 0].numpy() == s).all() and (q.chain[:, 1].numpy() == g[r1, s]).all()
    assert (q.tokens[:9, 0] == 0).all() and q.tokens[:3, 1].tolist() == [6, 6, 6]  # subject-major, lexicographic


def test_khop_sample_is_a_subset_without_repeats():
    task = KHopTask.random(50, 4, 3, seed=0)
    full, sample = task.queries(), task.queries(sample=500, seed=2)
    rows = {tuple(t) for t in full.tokens.tolist()}
    assert len({tuple(t) for t in sample.tokens.tolist()}) == 500 and all(tuple(t) in rows for t in sample.tokens.tolist())
    with pytest.raises(ValueError, match="sample"):
        task.queries(sample=0)
    with pytest.raises(ValueError, match="k"):
        KHopTask.random(5, 2, 0)
