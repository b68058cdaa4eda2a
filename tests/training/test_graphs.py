"""CUDA graphs, checked on a CPU as far as a CPU can (geofact.training.graphs).

A capture records a step's kernels once; each replay runs them again on the same memory. So a step
body may only do device work on buffers that outlive it: it may not read a device value on the host,
pass a host value into the device other than through a buffer, or rebind a buffer (a replay would
write to the old one). The tests run the trainers with a stand-in backend whose capture runs nothing
and whose replay reruns the body: the results must be those of eager steps, bit for bit, across runs
leaving the stack and re-captures. Under fake tensors on the meta device, a body's ops must take no
CPU tensor (even a 0-dim one, which a capture would freeze as a constant).
"""

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode

from geofact.host import host_reads
from geofact.training import graphs
from geofact.training.config import MultiHopConfig, TrainConfig
from geofact.training.graphs import GraphedStep
from geofact.training.hop_trainer import train_multihop
from geofact.training.trainer import FactGroup, train_group
from tests.training.test_fake_device import Reads


class StandIn:
    """A backend that counts: warm-up runs the body, capture runs nothing, replay reruns the body."""

    def __init__(self, fail: bool = False) -> None:
        self.fail, self.warmed, self.captured, self.replayed = fail, 0, 0, 0

    def warm(self, body):
        self.warmed += 1
        body()

    def capture(self, body):
        if self.fail:
            raise RuntimeError("operation not permitted when stream is capturing")
        self.captured += 1

        def replay():
            self.replayed += 1
            body()

        return replay


def test_off_cuda_the_body_just_runs_and_the_setting_is_checked(monkeypatch):
    calls = []
    step = GraphedStep(lambda: calls.append(1), torch.device("cpu"))
    for _ in range(5):
        step()
    assert len(calls) == 5 and not step.captured
    monkeypatch.setenv(graphs.ENV, "yes")
    with pytest.raises(ValueError, match="GEOFACT_CUDA_GRAPHS must be '0'"):
        graphs.graphs_wanted(torch.device("cuda"))
    monkeypatch.setenv(graphs.ENV, "0")
    assert not graphs.graphs_wanted(torch.device("cuda"))
    monkeypatch.delenv(graphs.ENV)
    assert graphs.graphs_wanted(torch.device("cuda")) and not graphs.graphs_wanted(torch.device("cpu"))
    with pytest.raises(ValueError, match="warmup must be an integer >= 0"):
        GraphedStep(lambda: None, torch.device("cpu"), warmup=-1)


def test_warm_up_then_one_capture_then_replays_and_every_call_is_one_step():
    calls, backend = [], StandIn()
    step = GraphedStep(lambda: calls.append(1), torch.device("cpu"), warmup=2, backend=backend)
    for _ in range(6):
        step()
    assert (backend.warmed, backend.captured, backend.replayed) == (2, 1, 4) and len(calls) == 6


def test_a_failed_capture_warns_and_goes_on_eagerly():
    calls, backend = [], StandIn(fail=True)
    step = GraphedStep(lambda: calls.append(1), torch.device("cpu"), warmup=1, backend=backend)
    step()
    with pytest.warns(RuntimeWarning, match="CUDA graph capture of the training step failed .*goes on eagerly"):
        step()
    step()
    assert len(calls) == 3 and not step.captured


@pytest.fixture
def stand_in(monkeypatch):
    """The trainers' steps captured by StandIn backends on the CPU (one per stack they make)."""
    made = []

    def backend():
        made.append(StandIn())
        return made[-1]

    monkeypatch.setattr(graphs, "graphs_wanted", lambda device: True)
    monkeypatch.setattr(graphs, "CudaGraphs", backend)
    return made


def assert_same_runs(a, b):
    for x, y in zip(a, b):
        assert (x.steps, x.final_loss, x.accuracy, x.loss_curve, x.accuracy_curve) == \
            (y.steps, y.final_loss, y.accuracy, y.loss_curve, y.accuracy_curve)
        for name in x.params:
            assert torch.equal(x.params[name], y.params[name]), name


def test_single_hop_runs_replayed_are_eager_runs_bit_for_bit(stand_in):
    configs = [TrainConfig(N=16, R=R, d=16, batch_size=16, max_steps=120, lr=lr, loss_threshold=0.05, seed=s,
                           frozen_embeddings=s == 2) for s, (R, lr) in enumerate([(1, 5e-2), (2, 1e-4), (1, 3e-2)])]
    kw = dict(block_steps=16, eval_every=9, checkpoints=(0, 40))
    graphed = train_group(configs, **kw)
    assert len(stand_in) >= 2 and all(b.captured == 1 for b in stand_in)  # a new capture once runs left the stack
    assert sum(b.replayed for b in stand_in) > 50
    stand_in.clear()
    with pytest.MonkeyPatch.context() as m:
        m.setattr(graphs, "graphs_wanted", lambda device: False)
        eager = train_group(configs, **kw)
    assert graphed[0].stopped_early and not graphed[1].stopped_early  # a stop inside a block, and a run to the end
    assert_same_runs(graphed, eager)
    for x, y in zip(graphed, eager):
        assert x.checkpoints.keys() == y.checkpoints.keys() and x.checkpoint_losses == y.checkpoint_losses


def test_multihop_runs_replayed_are_eager_runs_bit_for_bit(stand_in):
    configs = [MultiHopConfig(N=16, R=R, k=2, d=16, batch_size=32, max_steps=60, check_every=10, eval_queries=40,
                              seed=s, cot=True, lr=lr) for s, (R, lr) in enumerate([(2, 3e-2), (3, 1e-2)])]
    graphed = train_multihop(configs)
    assert stand_in and sum(b.replayed for b in stand_in) > 0
    with pytest.MonkeyPatch.context() as m:
        m.setattr(graphs, "graphs_wanted", lambda device: False)
        eager = train_multihop(configs)
    assert_same_runs(graphed, eager)


def buffers(group: FactGroup) -> list[int]:
    """Where every tensor a captured step reads or writes lives."""
    step, update = group.step, group.update
    tensors = [update.stack.flat, update.opt.grad, update.opt.m, update.opt.v, update.opt.t, step.batch, step.step,
               step.loss, step.stop_at, step.running, step.at_stop, *update.params.values()]
    return [t.data_ptr() for t in tensors]


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_a_step_writes_in_place_into_the_buffers_it_was_made_with(precision):
    configs = [TrainConfig(N=16, R=2, d=16, batch_size=16, seed=s, precision=precision) for s in range(2)]
    group = FactGroup(configs, torch.device("cpu"), torch.float32, None, None)
    before = buffers(group)
    group.step.start_block()
    for step, batch in zip(range(3), group.step_batches(range(3))):
        group.step(step, batch)
    assert buffers(group) == before


class NoHostTensors(TorchDispatchMode):
    """Refuses any op given a CPU tensor: under a capture it would be a copy frozen into the graph."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        flat, _ = torch.utils._pytree.tree_flatten((args, kwargs or {}))
        cpu = [a for a in flat if isinstance(a, torch.Tensor) and a.device.type == "cpu"]
        if cpu:
            raise AssertionError(f"{func} took a CPU tensor of shape {tuple(cpu[0].shape)} inside a step")
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("attention", ["uniform", "learned"])
def test_a_step_body_takes_nothing_from_the_host(attention):
    configs = [TrainConfig(N=32, R=2, d=16, batch_size=16, seed=s, attention=attention,
                           learned_positions=attention == "learned") for s in range(2)]
    with FakeTensorMode(allow_non_fake_inputs=True), host_reads(Reads(fill=0)):
        group = FactGroup(configs, torch.device("meta"), torch.float32, None, None)
        step = group.step
        step.start_block()
        (batch,) = group.step_batches(range(1))
        step.batch.copy_(batch)
        with NoHostTensors():
            step._body()  # what a capture records
    with pytest.raises(AssertionError, match="took a CPU tensor"), NoHostTensors():
        torch.ones(2, device="meta") + torch.ones(2)
