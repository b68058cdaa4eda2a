import pytest
import torch

from geofact.task import SharedAttributeTask
from geofact.training.data import FactSampler, batch_indices, facts


def test_a_block_of_batches_is_the_batches_of_its_steps():
    seeds, n_facts = [0, 5, 7], [96, 40, 96]
    block = batch_indices(seeds, range(10, 30), n_facts, 16, 96)  # (runs, steps, batch)
    assert block.shape == (3, 20, 16)
    for i, step in enumerate(range(10, 30)):
        assert torch.equal(block[:, i], batch_indices(seeds, step, n_facts, 16, 96))
    assert int(block[1].max()) < 40  # a run never draws another run's padding


def test_a_run_with_fewer_facts_than_the_batch_is_refused():
    with pytest.raises(ValueError, match="batch_size <= n_facts"):
        batch_indices([0, 1], 3, [96, 8], 16, 96)


def test_a_run_draws_the_same_batches_in_a_stack_of_other_sizes_as_alone():
    seeds, n_facts = [5, 6, 7, 8], [96, 32, 64, 32]
    stacked = batch_indices(seeds, range(3, 9), n_facts, 16, 96)
    for m in range(4):
        alone = batch_indices(seeds[m : m + 1], range(3, 9), n_facts[m : m + 1], 16, n_facts[m])
        assert torch.equal(stacked[m], alone[0])
        assert int(stacked[m].max()) < n_facts[m]
        assert all(len(set(batch.tolist())) == 16 for batch in stacked[m])  # distinct facts within a batch


def test_a_sampler_kept_to_some_runs_draws_their_batches():
    sampler = FactSampler([5, 6, 7], [96, 32, 96], 16, 96)
    assert torch.equal(sampler.keep([0, 2])(range(4, 7)), sampler(range(4, 7))[[0, 2]])
    assert torch.equal(sampler.keep([1])(range(4, 7)), sampler(range(4, 7))[[1]])


def test_facts_are_the_tasks_queries_with_their_answers():
    table, q = facts(7, 3, 5), SharedAttributeTask.random(7, 3, 5).queries()
    assert table.dtype == torch.int64 and table.shape == (21, 3)
    assert torch.equal(table, torch.stack([q.tokens[:, 0], q.tokens[:, 1] - 7, q.targets], dim=1))


def test_runs_hashed_together_over_the_largest_count_draw_the_batches_of_their_groups():
    seeds, n_facts = [5, 6, 7, 8], [96, 32, 64, 32]
    grouped = FactSampler(seeds, n_facts, 16, 96, padded=False)
    together = FactSampler(seeds, n_facts, 16, 96, padded=True)
    assert len(grouped.groups) == 3 and len(together.groups) == 1  # one hash over every run (a GPU's way)
    assert torch.equal(together(range(3, 40)), grouped(range(3, 40)))
    assert torch.equal(together.keep([1, 2])(range(5, 9)), grouped(range(5, 9))[[1, 2]])
    assert FactSampler(seeds, n_facts, 16, 96, device="cpu").padded is False
