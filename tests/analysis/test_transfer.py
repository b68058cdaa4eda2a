import pytest
import torch

from geofact.analysis.readout import linear_readout, nearest, split_subjects
from geofact.analysis.transfer import smart_init
from geofact.task import SharedAttributeTask
from tests.analysis.test_readout import planted


def test_smart_init_encodes_new_bijections_under_a_planted_superposition():
    s, answers, vectors = planted(N=256, R=3, k=8, d=32)
    R, N = answers.shape
    maps = linear_readout(s.expand(R, N, -1), answers, vectors, split_subjects(N, 0.2, seed=1), alpha=1e-8).maps
    new = torch.as_tensor(SharedAttributeTask.random(N, R, seed=99).bijections)
    s_new = smart_init(maps, vectors, new)
    for r, (W, b) in enumerate(maps):
        assert torch.equal(nearest(s_new @ W + b, vectors), new[r])  # every new attribute reads out


def test_smart_init_checks_its_input():
    with pytest.raises(ValueError, match="one readout map per relation"):
        smart_init([(torch.zeros(4, 2), torch.zeros(2))], torch.zeros(5, 2), torch.zeros(2, 5, dtype=torch.long))
