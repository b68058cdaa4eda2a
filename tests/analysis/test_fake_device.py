"""The mechanism analyses on CUDA's terms, checked on a CPU: readout, interventions and zero-shot transfer
under torch's FakeTensorMode, on the data-less 'meta' device that stands in for a GPU.

A fake tensor has no values: any host read of a device value raises, and so does an op that mixes a
tensor left on the CPU with one on the device. An analysis that runs here computes on the device it is
given, makes what the host knows (splits, draws from seeds, task tables) on the host and moves it
there, and reads device values back only through `geofact.host.to_host`, counted here (see
tests/training/test_fake_device.py for the trainers).
"""

import math

import numpy as np
import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from geofact import fast_paths
from geofact.analysis.interventions import other_relations, rank_grid, selectivity_sweep
from geofact.analysis.readout import READOUTS, model_readouts, model_readouts_cv
from geofact.analysis.trained import TrainedModel
from geofact.analysis.transfer import fresh_bijections, zero_shot
from geofact.host import host_reads, on_host
from geofact.training.config import TrainConfig
from geofact.training.model import init_params


class Reads:
    """Answers `to_host` with values of the right shape (0.5 for floats, 1 for integers) and counts the calls."""

    def __init__(self) -> None:
        self.calls = []

    def __call__(self, tensors):
        self.calls.append([(tuple(t.shape), t.device.type) for t in tensors])
        return tuple(np.full(tuple(t.shape), 0.5) if t.dtype.is_floating_point else np.ones(tuple(t.shape), dtype=np.int64)
                     for t in tensors)


@pytest.fixture
def fake_model():
    """A model whose weights are fake tensors on 'meta', inside FakeTensorMode (the weights are drawn first, on the host)."""
    config = TrainConfig(N=40, R=3, d=8, batch_size=32)
    weights = init_params(config)
    with FakeTensorMode(allow_non_fake_inputs=True):
        yield TrainedModel(config, {k: v.to("meta") for k, v in weights.items()})


def test_readouts_run_on_the_device_and_read_once_each(fake_model):
    reads = Reads()
    with host_reads(reads):
        readouts = model_readouts(fake_model)
        assert set(readouts) == set(READOUTS) and reads.calls == []  # nothing read until a result is asked for
        assert all(r.accuracy.device.type == "meta" for r in readouts.values())
        means = {name: r.mean for name, r in readouts.items()}
    assert means == dict.fromkeys(READOUTS, 0.5) and len(reads.calls) == len(READOUTS)
    assert all(device == "meta" for call in reads.calls for _, device in call)


def test_cross_validated_readouts_read_once_per_penalty_search(fake_model):
    reads = Reads()
    with host_reads(reads):
        out = model_readouts_cv(fake_model, alphas=(1e-3, 1e-1), folds=3)
    assert set(out) == {"s", "h"}
    # per feature: the (folds, alphas) scores, then the held-out accuracy at the chosen penalty
    assert [shape for call in reads.calls for shape, _ in call] == [(3, 2), (), (3, 2), ()]


def test_the_other_relations_are_drawn_as_host_data_under_fake_tensors():
    # drawn on the host with its indices: made on the fake device, the mask that keeps the edited relation out would
    # index nothing, and about a quarter of the edits at R = 5 would score their own relation as another
    with FakeTensorMode(allow_non_fake_inputs=True):
        drawn = other_relations(5, 400, 1, seed=0)
    with on_host():
        assert not isinstance(drawn, torch._subclasses.FakeTensor)
        assert not (drawn == torch.arange(5)[:, None, None]).any()


@pytest.mark.parametrize("others_per_edit", [None, 1])  # every other relation scored; one drawn per edit
def test_the_rank_sweep_reads_its_counts_once_for_every_rank(fake_model, others_per_edit):
    reads = Reads()
    ks = rank_grid(fake_model.config.d, 4)
    assert fake_model.config.R > 2  # so that one relation drawn is fewer than all
    with host_reads(reads):
        sweep = selectivity_sweep(fake_model, ks, others_per_edit=others_per_edit)
    assert [s.k for s in sweep] == ks
    assert reads.calls == [[((len(ks),), "meta"), ((len(ks),), "meta")]]


@pytest.mark.parametrize("calls_per_rank", [1 / 5, 1, 3])  # every rank in one call; a call a rank; three a rank
def test_the_rank_sweep_through_tf32_reads_how_many_rows_it_rechecks_once_a_call(fake_model, monkeypatch, calls_per_rank):
    # CUDA's fast path (geofact.analysis.rechecked): each prediction call reads how many of its rows are near a tie
    # that decides them (then rechecked in float32) and how many of those it predicts whole again; the counts are
    # read once at the end
    from geofact.analysis import interventions, rechecked

    monkeypatch.setattr(fast_paths, "FAST_DEVICES", ("meta",))
    c = fake_model.config
    ks = rank_grid(c.d, 4)
    assert len(ks) == 5
    with on_host():
        edited = c.R * c.R * int((~interventions.split_subjects(c.N, 0.2, 0)).sum())  # rows a rank predicts
    monkeypatch.setattr(interventions, "PREDICT_LOGITS", {"other": math.ceil(edited / calls_per_rank) * c.N})
    reads = Reads()  # integers read as 1: one row of each call is rechecked, and predicted whole again
    with host_reads(reads):
        sweep = selectivity_sweep(fake_model, ks)
    assert [s.k for s in sweep] == ks
    calls = round(calls_per_rank * len(ks))
    assert reads.calls == [[((), "meta")]] * (2 * calls) + [[((len(ks),), "meta"), ((len(ks),), "meta")]]


@pytest.mark.parametrize("fast", [False, True])
def test_zero_shot_transfer_reads_once(fake_model, monkeypatch, fast):
    # on CUDA's fast path (geofact.analysis.rechecked) each accuracy also reads how many rows it rechecks in
    # float32, and how many of those it predicts whole again
    from geofact.analysis import rechecked

    if fast:
        monkeypatch.setattr(fast_paths, "FAST_DEVICES", ("meta",))
    reads = Reads()
    c = fake_model.config
    with host_reads(reads):
        out = zero_shot(fake_model, fresh_bijections(c.N, c.R, c.bijection_seed + 1))
    assert out == {"zero_shot": 0.5, "smart_on_g": 0.5}
    assert reads.calls == [[((), "meta")]] * (4 if fast else 0) + [[((), "meta"), ((), "meta")]]


def test_a_tensor_left_on_the_cpu_is_caught(fake_model):
    """The refusal the tests above rely on: new answers that stayed on the CPU meet the device's predictions."""
    c = fake_model.config
    with pytest.raises(Exception, match="device"):
        fake_model.predict(fake_model.hidden_states()) == torch.zeros(c.R, c.N, dtype=torch.long).to("cpu")


def test_a_batch_of_states_read_ahead_is_analysed_on_the_device_reading_only_through_to_host(tmp_path, monkeypatch):
    """`analyse_grid` as a GPU lease runs it: each state's weights read on the host (the next one on the reader's
    thread, `trajectory.Prefetch`), moved to the device, its checkpoint's accuracy computed there once."""
    from geofact.analysis import trajectory
    from geofact.analysis.trajectory import analyse_grid, train_grid
    from geofact.training.grid import CapacityGrid

    grid = CapacityGrid(N=16, R_values=[1], d_values=[8], seeds=[0], lr=1e-2, batch_size=16, max_steps=20,
                        checkpoints=[0, 10])
    records = train_grid(grid, tmp_path)  # trained on the CPU, as a lease's training leaves its states on disk
    devices = []

    def analyse(model: TrainedModel) -> dict:
        devices.append({v.device.type for v in model.weights.values()})
        return {"d": model.config.d}

    reads = Reads()
    monkeypatch.setattr(trajectory, "provenance", lambda device: {"device": "meta (fake)"})  # no real device to describe
    with FakeTensorMode(allow_non_fake_inputs=True), host_reads(reads):
        points = analyse_grid(grid, records, tmp_path, analyse, "on-meta", {}, device="meta")
    assert devices == [{"meta"}] * 6  # 2 runs x (2 checkpoints + the stop)
    assert reads.calls and all(device == "meta" for call in reads.calls for _, device in call)  # the accuracies
    assert len(list((tmp_path / "analyses" / "accuracy").glob("*.json"))) == 4  # the checkpoints', once each
    assert all(p.values == {"d": 8} for pts in points.values() for p in pts)
