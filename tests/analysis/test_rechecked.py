"""geofact.analysis.rechecked: answers decided through TF32 where its rounding cannot change them, else in float32."""

from contextlib import nullcontext

import torch

from geofact import fast_paths
from geofact.analysis import rechecked
from geofact.analysis.rechecked import emulated_fast_logits
from geofact.analysis.trained import TrainedModel
from geofact.analysis.transfer import fresh_bijections, zero_shot
from geofact.training.config import TrainConfig
from geofact.training.sweep import run_sweep


def test_the_recheck_takes_every_row_near_a_tie_that_decides_it_and_every_row_without_a_margin(monkeypatch):
    from contextlib import nullcontext
    from types import SimpleNamespace


    fast = torch.tensor([[5.0, 1.0, 0.0],  # certain
                         [2.0, 2.0, 0.0],  # a tie in TF32, which float32 breaks for column 1
                         [float("nan"), 1.0, 0.0],  # no margin: predicted whole again
                         [float("inf"), 1.0, 0.0],
                         [3.0, 2.999, 0.0],  # within 1% of its largest |logit|, column 0 in float32
                         [3.0, 2.999, 0.0]])  # the same, with no largest in float32: predicted whole again
    final = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0], [0.0, 0.0], [1.0, 0.0], [float("nan"), 0.0]])  # float32's
    vectors = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])  # the unembedding's columns, (N, d)
    taken = []  # the rows rechecked in float32

    def final_states(states):
        taken.extend(states[:, 0].long().tolist())
        return final[states[:, 0].long()]

    model = SimpleNamespace(device=torch.device("cpu"), predict=lambda states: states[:, 1].long(),  # float32's argmax
                            final_states=final_states, attribute_vectors=lambda target: vectors)
    monkeypatch.setattr(rechecked, "fast_logits", lambda model, states: fast[states[:, 0].long()])
    monkeypatch.setattr(rechecked, "computing_in", lambda precision, device: nullcontext())

    def answered(whole: list[int], targets: list[int]) -> list[bool]:
        taken.clear()
        states = torch.stack([torch.arange(6.0), torch.tensor(whole, dtype=torch.float32)], 1)  # row, whole answer
        return rechecked.rechecked_answered(model, states, torch.tensor(targets)).tolist()

    assert answered([7, 7, 1, 0, 7, 0], [0, 1, 1, 1, 0, 0]) == [True, True, True, False, True, True]
    assert sorted(taken) == [1, 2, 3, 4, 5]
    # the same ties, targets far below them: decided in TF32 (the target is not float32's answer), none rechecked
    assert answered([7, 7, 7, 7, 7, 7], [1, 2, 2, 2, 2, 2]) == [False] * 6
    assert sorted(taken) == [2, 3]  # but the rows without a margin
    # a row whose candidates are all near its largest may have more near: predicted whole again
    monkeypatch.setattr(rechecked, "CANDIDATES", 2)
    assert answered([7, 0, 1, 0, 1, 0], [0, 1, 1, 1, 0, 0]) == [True, False, True, False, False, True]


def test_accuracies_through_tf32_are_float32s(tmp_path, monkeypatch):
    """A model's accuracy (TrainedModel.correct_fraction, which zero-shot transfer asks twice a state) on CUDA's
    fast path, TF32 emulated: float32's, on the model's own facts and on a smart init written for a new task."""
    config = TrainConfig(N=256, R=4, d=16, batch_size=256, max_steps=300, lr=3e-2)
    run_sweep([config], tmp_path, progress=False)
    model = TrainedModel.load(tmp_path, config)
    new = fresh_bijections(config.N, config.R, config.bijection_seed + 1)
    exact = model.correct_fraction(), zero_shot(model, new)
    taken = []  # the rows of each call through TF32

    def fast(model, states):
        logits = emulated_fast_logits(model, states)
        taken.append(len(states))
        return logits

    monkeypatch.setattr(fast_paths, "FAST_DEVICES", ("cpu",))
    monkeypatch.setattr(rechecked, "fast_logits", fast)
    monkeypatch.setattr(rechecked, "computing_in", lambda precision, device: nullcontext())
    assert (model.correct_fraction(), zero_shot(model, new)) == exact
    assert taken == [config.N * config.R] * 3 and 0 < float(exact[0]) < 1
