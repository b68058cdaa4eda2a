import torch

from geofact.training.data import batch_indices


def test_a_block_of_batches_is_the_batches_of_its_steps():
    seeds, n_facts = torch.tensor([0, 5, 7]), torch.tensor([96, 40, 96])
    block = batch_indices(seeds, range(10, 30), n_facts, 16, 96)  # (runs, steps, batch)
    assert block.shape == (3, 20, 16)
    for i, step in enumerate(range(10, 30)):
        assert torch.equal(block[:, i], batch_indices(seeds, step, n_facts, 16, 96))
    assert int(block[1].max()) < 40  # a run never draws another run's padding
