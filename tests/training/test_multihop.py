import pytest
import torch

from geofact.task import KHopTask
from geofact.training.multihop import IGNORE, sequences, split_queries


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


def key(prompts: torch.Tensor) -> set[tuple[int, ...]]:
    return {tuple(row) for row in prompts.tolist()}


def test_split_queries_keeps_eval_disjoint_or_inside_the_pool():
    task = KHopTask.random(N=16, R=4, k=2, seed=0)  # 256 queries
    held = split_queries(task, train_size=100, eval_size=50, eval_seen=False, seed=3)
    assert len(key(held.train_prompts)) == 100 and len(key(held.eval_prompts)) == 50
    assert not key(held.train_prompts) & key(held.eval_prompts)
    seen = split_queries(task, train_size=100, eval_size=50, eval_seen=True, seed=3)
    assert key(seen.eval_prompts) <= key(seen.train_prompts)
    assert torch.equal(seen.train_chain[:, 0], seen.train_prompts[:, 0])  # paths start at the prompt's subject
    assert len(split_queries(task, None, 10, True, 0).train_prompts) == 256
    with pytest.raises(ValueError, match="eval_size must be in \\[1, 6\\]"):
        split_queries(task, train_size=250, eval_size=10, eval_seen=False, seed=0)
    with pytest.raises(ValueError, match="train_size must be in"):
        split_queries(task, train_size=0, eval_size=1, eval_seen=True, seed=0)
