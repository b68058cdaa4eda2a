"""geofact.training.fused_sampler: the batch keys from one Triton kernel are the torch ops' keys, bit for bit,
checked in Triton's interpreter (a child process, as tests/training/test_fused_ce.py explains), and counted as
one write of them on fake `meta` tensors."""

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from geofact.training import fused_ce
from geofact.training.data import FactSampler
from geofact.training.dispatch_count import TrafficCounter
from tests.training.test_fused_ce import _interpreted

pytestmark = pytest.mark.skipif(not fused_ce.TRITON, reason="Triton is a test dependency (pip install -e '.[test]')")


def test_the_kernels_batches_are_the_torch_ops_batches_bit_for_bit():
    same = _interpreted("""
        from geofact.training.data import FactSampler
        result = {}
        # one fact count; several, hashed together (a GPU's way) or in groups (a CPU's); steps far from 0 (products
        # past 2^63 wrap in both); a run kept out of a stack
        cases = {"one count": ([0, 7, 123456789], [300, 300, 300], 32, 300),
                 "padded": ([3, 4, 5, 6], [200, 350, 50, 350], 50, 350),
                 "groups": ([3, 4, 5, 6], [200, 350, 50, 350], 50, 350)}
        for name, (seeds, n_facts, batch, n_max) in cases.items():
            padded = name == "padded"
            torch_ops = FactSampler(seeds, n_facts, batch, n_max, "cpu", padded=padded, fused=False)
            kernel = FactSampler(seeds, n_facts, batch, n_max, "cpu", padded=padded, fused=True)
            checks = []
            for steps in (range(0, 3), range(14997, 15000), range(2**31 - 2, 2**31 + 1)):
                checks.append(torch.equal(torch_ops(steps), kernel(steps)))
            checks.append(torch.equal(torch_ops.keep([0, 2])(range(5, 8)), kernel.keep([0, 2])(range(5, 8))))
            result[name] = checks
    """)
    assert all(all(checks) for checks in same.values()), same


def test_a_gpu_draws_its_keys_through_the_kernel_counted_as_one_write_of_them(monkeypatch):
    monkeypatch.delenv(fused_ce.ENV, raising=False)
    runs, n = 5, 4096
    with FakeTensorMode(allow_non_fake_inputs=True):
        sampler = FactSampler(list(range(runs)), [n, n // 2, n, n, n], 64, n, "meta")
        assert sampler.fused and not FactSampler([0], [n], 64, n, "cpu").fused
        with TrafficCounter() as traffic:
            batches = sampler(range(10, 13))
    assert batches.shape == (runs, 3, 64)
    assert traffic.by_op["sampler_keys"] == runs * 3 * n * 8 + 2 * runs * 8  # the keys written; seeds, counts read
    assert set(traffic.by_op) == {"sampler_keys", "topk"}
