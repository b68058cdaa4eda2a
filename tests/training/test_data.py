import pytest
import torch

from geofact.training.data import batch_indices


def test_a_block_of_batches_is_the_batches_of_its_steps():
    seeds, n_facts = torch.tensor([0, 5, 7]), torch.tensor([96, 40, 96])
    block = batch_indices(seeds, range(10, 30), n_facts, 16, 96)  # (runs, steps, batch)
    assert block.shape == (3, 20, 16)
    for i, step in enumerate(range(10, 30)):
        assert torch.equal(block[:, i], batch_indices(seeds, step, n_facts, 16, 96))
    assert int(block[1].max()) < 40  # a run never draws another run's padding


def test_a_run_with_fewer_facts_than_the_batch_is_refused():
    with pytest.raises(ValueError, match="batch_size <= n_facts"):
        batch_indices(torch.tensor([0, 1]), 3, torch.tensor([96, 8]), 16, 96)


def test_a_run_draws_the_same_batches_in_a_stack_of_other_sizes_as_alone():
    seeds, n_facts = torch.tensor([5, 6, 7, 8]), torch.tensor([96, 32, 64, 32])
    stacked = batch_indices(seeds, range(3, 9), n_facts, 16, 96)
    for m in range(4):
        alone = batch_indices(seeds[m : m + 1], range(3, 9), n_facts[m : m + 1], 16, int(n_facts[m]))
        assert torch.equal(stacked[m], alone[0])
        assert int(stacked[m].max()) < n_facts[m]
        assert all(len(set(batch.tolist())) == 16 for batch in stacked[m])  # distinct facts within a batch
