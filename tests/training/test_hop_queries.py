import pytest
import torch

from geofact.task import KHopTask
from geofact.training.config import MultiHopConfig
from geofact.training.hop_queries import IGNORE, BatchSampler, query_ids, query_sets, sequences, walk


def compose(task: KHopTask, s0: int, relations: list[int]) -> int:
    s = s0
    for r in relations:
        s = int(task.bijections[r, s])
    return s


def test_no_cot_sequences_ask_for_the_composition_at_the_last_position():
    task = KHopTask.random(N=20, R=3, k=3, seed=1)
    q = task.queries()
    relations = q.tokens[:, 1:] - task.N
    tokens, targets = sequences(q.chain, relations, task.N, cot=False)
    assert torch.equal(tokens, q.tokens)
    assert (targets[:, :-1] == IGNORE).all()
    for i in range(0, len(tokens), 37):
        assert int(targets[i, -1]) == compose(task, int(tokens[i, 0]), relations[i].tolist())


def test_cot_sequences_teach_every_hop_with_the_previous_hop_read_back():
    task = KHopTask.random(N=20, R=3, k=3, seed=2)
    q = task.queries(sample=50, seed=0)
    relations = q.tokens[:, 1:] - task.N
    tokens, targets = sequences(q.chain, relations, task.N, cot=True)
    assert tokens.shape == targets.shape == (50, 6)
    assert torch.equal(tokens[:, :4], q.tokens)  # the prompt s_0 r_1 r_2 r_3
    assert (targets[:, :3] == IGNORE).all()
    for i in range(50):
        path = [int(tokens[i, 0])]
        for hop in range(3):
            path.append(compose(task, path[-1], [int(relations[i, hop])]))
        assert targets[i, 3:].tolist() == path[1:]  # positions 3, 4, 5 predict s_1, s_2, s_3
        assert tokens[i, 4:].tolist() == path[1:3]  # s_1, s_2 are read back as inputs


def test_one_hop_is_the_same_with_and_without_cot():
    task = KHopTask.random(N=8, R=2, k=1, seed=0)
    q = task.queries()
    a, b = sequences(q.chain, q.tokens[:, 1:] - 8, 8, cot=False), sequences(q.chain, q.tokens[:, 1:] - 8, 8, cot=True)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


def ids(queries: torch.Tensor, R: int) -> set[int]:
    return set(query_ids(queries, R).tolist())


def small(**kw) -> MultiHopConfig:
    return MultiHopConfig(**{"N": 16, "R": 4, "k": 2, "d": 8, "batch_size": 64, "eval_queries": 50} | kw)


def test_query_ids_are_the_tasks_enumeration_order():
    task = KHopTask.random(N=5, R=3, k=3, seed=0)
    q = task.queries()
    queries = torch.cat([q.tokens[:, :1], q.tokens[:, 1:] - 5], dim=1)
    assert torch.equal(query_ids(queries, 3), torch.arange(5 * 27))


def test_walk_follows_the_bijections_of_each_stacked_run():
    tasks = [KHopTask.random(N=10, R=R, k=3, seed=R) for R in (2, 3)]
    tables = torch.stack([torch.nn.functional.pad(torch.as_tensor(t.bijections), (0, 0, 0, 3 - t.R)) for t in tasks])
    queries = [t.queries(sample=20, seed=1) for t in tasks]
    stacked = torch.stack([torch.cat([q.tokens[:, :1], q.tokens[:, 1:] - 10], 1) for q in queries])
    path = walk(tables, stacked)
    for m, q in enumerate(queries):
        assert torch.equal(path[m], q.chain)


def test_a_pool_holds_its_eval_set_or_keeps_clear_of_it():
    seen, held = query_sets(small(train_queries=100)), query_sets(small(train_queries=100, eval_seen=False))
    assert len(ids(seen.pool, 4)) == 100 and ids(seen.eval, 4) <= ids(seen.pool, 4) and len(seen.eval) == 50
    assert len(ids(held.eval, 4)) == 50 and not ids(held.eval, 4) & ids(held.pool, 4)
    tight = query_sets(small(train_queries=250, eval_seen=False))  # 256 queries: only 6 left to hold out
    assert len(tight.eval) == 6 and not ids(tight.eval, 4) & ids(tight.pool, 4)
    with pytest.raises(ValueError, match=r"train_queries must be below N R\^k = 256"):
        small(train_queries=256, eval_seen=False)


def test_pool_batches_come_from_the_pool():
    c = small(train_queries=30)
    sample = BatchSampler([c], [query_sets(c)], torch.device("cpu"))
    drawn = sample(range(10))[0].flatten(0, 1)
    assert ids(drawn, 4) <= ids(query_sets(c).pool, 4) and len(ids(drawn, 4)) == 30


def test_fresh_held_out_batches_never_hold_an_eval_query():
    c = small(eval_queries=1000, eval_seen=False)  # capped at half of the 256 queries
    sets = query_sets(c)
    assert len(sets.eval) == 128
    sample = BatchSampler([c], [sets], torch.device("cpu"))
    drawn = sample(range(50))[0].flatten(0, 1)
    assert not ids(drawn, 4) & ids(sets.eval, 4)
    assert len(ids(drawn, 4)) == 128  # every other query turns up
    seen = BatchSampler([small()], [query_sets(small())], torch.device("cpu"))
    assert len(ids(seen(range(50))[0].flatten(0, 1), 4)) == 256


def test_a_run_draws_the_same_batches_alone_or_stacked_with_other_relations_counts():
    configs = [small(R=2, seed=3, eval_seen=False), small(R=4, seed=5, eval_seen=False)]
    sets = [query_sets(c) for c in configs]
    stacked = BatchSampler(configs, sets, torch.device("cpu"))
    for m in range(2):
        alone = BatchSampler(configs[m : m + 1], sets[m : m + 1], torch.device("cpu"))
        assert torch.equal(stacked(range(0, 8))[m], alone(range(0, 8))[0])
        assert torch.equal(stacked(range(7, 8))[m], alone(range(0, 8))[0, 7:])  # a step's batch, drawn in any block
    assert stacked(range(1))[0, :, :, 1:].max() == 1  # relations stay below each run's own R


@pytest.mark.parametrize("field, value, message", [
    ("k", 0, "k must be an integer >= 1"),
    ("train_queries", 0, "train_queries must be None"),
    ("check_every", 0, "check_every must be an integer >= 1"),
    ("target_accuracy", 1.5, "target_accuracy must be in \\(0, 1\\]"),
    ("R", 20, "R must be an integer in \\[1, N=16\\]"),
])
def test_config_names_the_bad_field(field, value, message):
    with pytest.raises(ValueError, match=message):
        small(**{field: value})
