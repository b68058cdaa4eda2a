"""CUDA's terms, checked on a CPU: the trainers under torch's FakeTensorMode on the data-less 'meta' device.

Fake tensors carry shapes, dtypes and devices but no values, so any host read of a device value
(`.item()`, `.tolist()`, `bool(t)`, `nonzero`) raises `DataDependentOutputException`, and an op mixing a
tensor left on the CPU with one on the device raises `FakeTensorDeviceMismatchError`: a whole block of
steps that runs here makes no host read and leaves nothing on the CPU by mistake, as code that must
run on a GPU the first time must not. The trainers' one sanctioned read, `geofact.host.to_host` at a
block's end, is answered here with values of the test's choosing (`host_reads`), and counted.
"""

import numpy as np
import pytest
import torch
from torch._subclasses.fake_tensor import DataDependentOutputException, FakeTensorMode

from geofact.host import as_device, host_reads
from geofact.training import hop_trainer
from geofact.training.config import MultiHopConfig, TrainConfig
from geofact.training.hop_queries import query_sets
from geofact.training.trainer import train_group


class Reads:
    """Answers `to_host` for fake tensors: floats of 0.5 (no run meets a loss or accuracy rule) and, for integer
    tensors, `fill`; `stops` {call: (position, step)} makes the run at a stack position stop at a step."""

    def __init__(self, fill: int, stops: dict[int, tuple[int, int]] | None = None) -> None:
        self.fill, self.stops, self.calls = fill, stops or {}, []

    def __call__(self, tensors):
        self.calls.append([tuple(t.shape) for t in tensors])
        out = [np.zeros(tuple(t.shape), dtype=bool) if t.dtype == torch.bool  # no held-out query left to redraw
               else np.full(tuple(t.shape), 0.5) if t.dtype.is_floating_point
               else np.full(tuple(t.shape), self.fill, dtype=np.int64) for t in tensors]
        if len(self.calls) - 1 in self.stops:
            position, step = self.stops[len(self.calls) - 1]
            out[1][position] = step  # the block's stop steps come second, after its losses
        return tuple(out)


def configs(max_steps: int, **over) -> list[TrainConfig]:
    kw = dict(N=64, d=16, batch_size=32, max_steps=max_steps, loss_threshold=1e-4, **over)
    return [TrainConfig(R=2, seed=0, **kw), TrainConfig(R=4, seed=1, frozen_embeddings=True, lr=3e-3, **kw),
            TrainConfig(R=4, seed=2, **kw)]


def test_meta_is_refused_outside_fake_mode_and_accepted_in_it():
    with pytest.raises(ValueError, match="FakeTensorMode"):
        as_device("meta")
    with FakeTensorMode(allow_non_fake_inputs=True):
        assert as_device("meta").type == "meta"


def test_fake_mode_refuses_host_reads_and_mixed_devices():
    """The two refusals the tests below rely on."""
    with FakeTensorMode(allow_non_fake_inputs=True):
        x = torch.ones(3, device="meta")
        with pytest.raises(DataDependentOutputException):
            bool((x > 0).any())
        with pytest.raises(Exception, match="device"):
            x + torch.ones(3)


@pytest.fixture(params=["1", "0"], ids=["geofact's kernels", "torch's ops"])
def kernels(request, monkeypatch):
    """A GPU's step both ways: through geofact's Triton kernels, and through torch's ops (GEOFACT_FUSED_CE=0, the
    fallback of a lease whose GPU does not compile them)."""
    monkeypatch.setenv("GEOFACT_FUSED_CE", request.param)
    return request.param


@pytest.mark.parametrize("attention, positions", [("uniform", False), ("learned", False), ("learned", True)])
def test_a_single_hop_group_trains_whole_blocks_on_the_device_reading_once_per_block(attention, positions, kernels):
    # learned attention without positions takes the written-out step (geofact.training.step), with them autograd
    reads = Reads(fill=10**6)  # stop steps past max_steps: nobody stops
    with FakeTensorMode(allow_non_fake_inputs=True), host_reads(reads):
        results = train_group(configs(12, attention=attention, learned_positions=positions),
                              device="meta", block_steps=5, eval_every=4, checkpoints=(0, 6), evaluate=True)
    blocks = [call for call in reads.calls if len(call) >= 2]
    assert len(blocks) == 3  # steps 0-4, 5-9, 10-11: one read each
    assert blocks[0] == [(3, 5), (3,), (3,), (3,)]  # losses, stop steps, accuracy checks at steps 0 and 4
    assert len(reads.calls) == 4  # and the final accuracy of the runs that reached max_steps
    assert [r.steps for r in results] == [12, 12, 12] and set(results[0].checkpoints) == {0, 6}
    assert [t for t, _ in results[0].accuracy_curve] == [0, 4, 8, 12]


def test_a_bf16_group_trains_through_its_written_out_step_on_the_device_reading_once_per_block(kernels):
    from geofact.training import trainer

    reads = Reads(fill=10**6)
    with FakeTensorMode(allow_non_fake_inputs=True), host_reads(reads):
        group = trainer.FactGroup(configs(12, precision="bf16"), torch.device("meta"), torch.float32, None, None)
        assert group.by_hand  # geofact.training.step_bf16
        results = train_group(configs(12, precision="bf16"), device="meta", block_steps=5, checkpoints=(0, 6))
    assert len([call for call in reads.calls if len(call) >= 2]) == 3
    assert [r.steps for r in results] == [12, 12, 12] and set(results[0].checkpoints) == {0, 6}


def test_a_run_that_stops_inside_a_block_leaves_the_stack_at_its_end_without_a_host_read(kernels):
    reads = Reads(fill=10**6, stops={0: (1, 3)})  # the run at stack position 1 stops at step 3
    with FakeTensorMode(allow_non_fake_inputs=True), host_reads(reads):
        results = train_group(configs(12), device="meta", block_steps=5, checkpoints=(4,))
    assert [r.steps for r in results] == [12, 3, 12] and results[1].stopped_early
    assert 4 not in results[1].checkpoints and 4 in results[0].checkpoints  # no weights after its stop
    later = [call for call in reads.calls if len(call) >= 2][1:]
    assert later and all(call[0][0] == 2 for call in later)  # two runs left in the stack


def test_a_run_read_past_its_stop_stays_in_the_stack_and_its_best_state_is_kept_without_a_host_read():
    reads = Reads(fill=10**6, stops={0: (1, 3)})  # the run at stack position 1 stops at step 3
    with FakeTensorMode(allow_non_fake_inputs=True), host_reads(reads):
        results = train_group(configs(12, read_past_stop=True), device="meta", block_steps=5, checkpoints=(4,))
    assert [r.steps for r in results] == [12, 3, 12] and results[1].stopped_early
    later = [call for call in reads.calls if len(call) >= 2 and len(call[0]) == 2][1:]
    assert later and all(call[0][0] == 3 for call in later)  # every run stays in the stack to the end
    # 3 blocks; the stopped run's accuracy at its stop; at the end the best steps and losses, the accuracies at
    # the best and last states, and the accuracy of the runs that never stopped: one read each
    assert len(reads.calls) == 7
    assert results[1].past_stop["points"] == {"best": 10**6, "stop": 3, "last": 12}  # the best step as the device gave it
    assert results[0].past_stop["points"] == {"best": 10**6, "stop": None, "last": 12}
    assert all(set(r.past_weights) == {"best", "last"} for r in results)


def test_a_run_keeping_a_tail_keeps_its_states_on_the_device_without_a_host_read():
    reads = Reads(fill=10**6, stops={0: (1, 3)})  # the run at stack position 1 stops at step 3
    with FakeTensorMode(allow_non_fake_inputs=True), host_reads(reads):
        results = train_group(configs(12, keep_tail=(2, 2)), device="meta", block_steps=5, checkpoints=(4,))
    assert [r.steps for r in results] == [12, 3, 12]
    assert set(results[0].checkpoints) == {4, 8, 10} and set(results[1].checkpoints) == {0, 2}  # tails below the stop
    assert len([call for call in reads.calls if len(call) >= 2]) == 3  # one read a block, as without a tail


def test_a_run_with_an_accuracy_stop_is_decided_on_the_device_without_a_host_read():
    reads = Reads(fill=10**6, stops={0: (1, 4)})  # the device says: the run at stack position 1 stopped at check 4
    with FakeTensorMode(allow_non_fake_inputs=True), host_reads(reads):
        results = train_group(configs(12, stop_accuracy=(0.95, 2)), device="meta", block_steps=5)
    assert [r.steps for r in results] == [12, 4, 12] and results[1].stopped_early
    blocks = [call for call in reads.calls if len(call) >= 2]
    # its checks stay on the device: one read a block, with the checks' counts (steps 2 and 4), the count that
    # stopped a run (its recorded accuracy) and which runs gave up
    assert len(blocks) == 3 and blocks[0] == [(3, 5), (3,), (3,), (3,), (3,), (3,)]


def test_a_run_that_may_give_up_is_judged_on_the_device_without_a_host_read():
    """`give_up`'s rule reads the best counts at every check (a (runs, checks) table on the device) from the middle of
    the budget; the stack drops a run that gave up as any that stopped, the table with it, and its record keeps the
    count of the check that stopped it, read with the block (no recount)."""

    class GaveUp(Reads):  # the second block says: the run at stack position 0 gave up at step 8, answering 7 facts
        def __call__(self, tensors):
            out = super().__call__(tensors)
            if len(self.calls) == 2:
                out[-2][:], out[-2][0], out[-1][0] = -1, 7, True  # decided counts, gave_up
            return out

    reads = GaveUp(fill=10**6, stops={1: (0, 8)})
    with FakeTensorMode(allow_non_fake_inputs=True), host_reads(reads):
        results = train_group(configs(16, stop_accuracy=(0.95, 2), give_up=2.0), device="meta", block_steps=5)
    assert [(r.steps, r.gave_up) for r in results] == [(8, True), (16, False), (16, False)]
    assert results[0].accuracy == 7 / 128 and results[0].record()["gave_up"]
    blocks = [call for call in reads.calls if len(call) >= 2]
    assert len(blocks) == 4 and len(reads.calls) == 5  # one read a block, and the two runs left counted at the end


@pytest.mark.parametrize("by_hand", [True, False])  # the GPU's step (geofact.training.hop_step), and autograd's
@pytest.mark.parametrize("queries", [dict(), dict(train_queries=200), dict(eval_seen=False)])
def test_a_multihop_group_trains_from_check_to_check_reading_once_per_check(queries, by_hand, monkeypatch):
    monkeypatch.setattr("geofact.training.hop_step.DEVICES", ("meta",) if by_hand else ())
    taken = []
    by_hand_step = hop_trainer.hop_step.hop_loss_and_grads
    monkeypatch.setattr("geofact.training.hop_step.hop_loss_and_grads", lambda *a, **k: taken.append(1) or by_hand_step(*a, **k))
    hops = [MultiHopConfig(N=16, R=R, k=2, d=16, batch_size=32, max_steps=25, check_every=10, eval_queries=40,
                           seed=s, cot=True, **queries) for s, R in [(0, 2), (1, 3)]]
    sets = {c: query_sets(c) for c in hops}  # host data (the tasks' tables, drawn with numpy), made beforehand
    monkeypatch.setattr(hop_trainer, "query_sets", sets.__getitem__)
    reads = Reads(fill=0)
    with FakeTensorMode(allow_non_fake_inputs=True), host_reads(reads):
        results = hop_trainer.train_multihop(hops, device="meta")
    checks = [call for call in reads.calls if len(call) >= 2]
    assert [len(call) for call in checks] == [3, 3, 3, 2]  # checks at 0, 10, 20 (accuracy, last and this loss), 25
    assert checks[0][0] == (2, 2)  # per-hop accuracy of both runs
    redraws = len(reads.calls) - len(checks)
    assert redraws == (3 * 2 if not queries.get("eval_seen", True) else 0)  # one clash read per draw, held out only
    assert [r.steps for r in results] == [25, 25] and all(r.stop_reason is None for r in results)
    assert bool(taken) == by_hand


@pytest.mark.parametrize("keep", [False, True])  # a GPU's way (recompute each chunk) and a CPU's (keep its exponentials)
def test_the_chunked_output_layer_runs_on_the_device_without_a_host_read(keep):
    from geofact.training.step import output_loss_and_grads

    with FakeTensorMode():
        M, B, d, N = 3, 8, 4, 13
        hf, E_out = torch.randn(M, B, d, device="meta"), torch.randn(M, d, N, device="meta")
        targets = torch.randint(0, N, (M, B), device="meta")
        losses, d_hf, d_E_out = output_loss_and_grads(hf, E_out, targets, width=5, keep=keep)  # chunks of 5, 5, 3
        assert [t.device.type for t in (losses, d_hf, d_E_out)] == ["meta"] * 3
        assert (losses.shape, d_hf.shape, d_E_out.shape) == ((M,), (M, B, d), (M, d, N))


@pytest.mark.parametrize("way", ["softmax kernel", "log-softmax kernel", "written-out softmax"])
def test_each_way_of_the_whole_output_layer_runs_on_the_device_without_a_host_read(way):
    # the GPU's A/B (geofact.ops.step_ab) runs every way of geofact.training.step.WAYS there
    from geofact.training.step import WAYS, output_loss_and_grads

    assert way in WAYS
    with FakeTensorMode():
        M, B, d, N = 3, 8, 4, 13
        hf, E_out = torch.randn(M, B, d, device="meta"), torch.randn(M, d, N, device="meta")
        targets = torch.randint(0, N, (M, B), device="meta")
        losses, d_hf, d_E_out = output_loss_and_grads(hf, E_out, targets, width=N, way=way)
        assert [t.device.type for t in (losses, d_hf, d_E_out)] == ["meta"] * 3
        assert (losses.shape, d_hf.shape, d_E_out.shape) == ((M,), (M, B, d), (M, d, N))


def test_a_stack_stepping_each_run_apart_freezes_a_stopped_run_without_a_host_read(monkeypatch):
    from geofact.training import optim

    monkeypatch.setattr(optim, "PER_RUN_MIN_PARAMS", 0)  # the paper's large stacks' way, at this test's shapes
    reads = Reads(fill=10**6, stops={0: (1, 3)})  # the run at stack position 1 stops at step 3
    with FakeTensorMode(allow_non_fake_inputs=True), host_reads(reads):
        results = train_group(configs(12), device="meta", block_steps=5, checkpoints=(4,))
    assert [r.steps for r in results] == [12, 3, 12] and results[1].stopped_early
    assert results[1].params["E_out"].device.type == "cpu"  # its weights at the stop, read once with the block's
