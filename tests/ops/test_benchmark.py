import pytest

from geofact.ops.benchmark import benchmark, format_rows, step_ops
from geofact.ops.calibration import step_flops
from geofact.training.config import TrainConfig


def test_benchmark_times_every_way_at_every_d():
    result = benchmark("cpu", runs=2, steps=2, ds=(4, 8), N=32, R=2, batch_size=16)
    assert [r["d"] for r in result["rows"]] == [4, 8]
    for row in result["rows"]:
        assert row["group_size"] >= 1 and row["flop_per_step"] > 0
        assert all(row[k] > 0 for k in ("plain_untuned", "plain", "stacked", "policy"))
    assert result["matmul_peak_flops"] > 0 and result["device"] == "cpu"
    assert len(format_rows(result)) == 3


def test_step_flops_counts_the_unembedding_and_mlp():
    c = TrainConfig(N=4096, R=8, d=32, batch_size=1024)
    assert step_flops(c) == 3 * 2 * 1024 * (2 * 32 * 32 + 2 * 32 * 128 + 32 * 4096)


def test_benchmark_rejects_empty_work():
    with pytest.raises(ValueError, match="runs and steps"):
        benchmark("cpu", runs=0)


def test_a_step_is_counted_in_ops_and_reads_once_per_block():
    counted = step_ops(runs=2, N=64, R=2, d=8, batch_size=32, block_steps=4)
    assert counted["syncs_per_step"] == 1 / 4  # the block's one to_host, nothing data-dependent besides
    assert 20 < counted["ops_per_step"] < 200 and counted["views_per_step"] > 0
    assert not counted["cuda_graphs"] and counted["launches_per_step"] == counted["ops_per_step"]  # eager off CUDA
