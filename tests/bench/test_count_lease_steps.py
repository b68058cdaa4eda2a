"""bench/count_lease_steps.py: a step counted with the code of a commit, taken out of git."""

import subprocess

import pytest

from geofact.training.config import TrainConfig
from geofact.training.traffic import step_traffic
from tests.bench import ROOT, script


def test_a_step_counted_at_head_is_this_checkouts_count_when_the_code_is_committed():
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: there is no commit to count at")
    stack = [TrainConfig(N=64, R=R, d=8, batch_size=32, max_steps=10, seed=s) for s, R in enumerate((2, 4))]
    (counted,) = script("count_lease_steps").count_at("HEAD", [[c.as_dict() for c in stack]])
    assert counted["bytes"] > 0 and counted["ops"] > 50 and counted["flops"] > 0
    clean = subprocess.run(["git", "-C", str(ROOT), "diff", "--quiet", "HEAD", "--", "geofact"]).returncode == 0
    if not clean:
        pytest.skip("geofact/ differs from HEAD here: the count at HEAD need not be this tree's")
    here = step_traffic(stack)
    assert (counted["bytes"], counted["ops"], counted["flops"]) == (here.bytes, here.ops, here.flops)


def test_the_benchmarks_small_stacks_are_rebuilt_as_it_stacked_them():
    stack = script("count_lease_steps").small_stack({"N": 128, "R": 16, "d": 8, "seed": 3}, 6)
    assert [c["R"] for c in stack] == [2, 4, 8, 16, 2, 4] and [c["seed"] for c in stack] == list(range(6))
