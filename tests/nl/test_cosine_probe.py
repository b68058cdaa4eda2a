import math

import pytest
import torch

from geofact.nl.cosine_probe import (
    ProbeConfig,
    chance_metrics,
    fit_probes,
    gold_ranks,
    majority_ranks,
    rank_metrics,
    subject_split,
    unit_rows,
)


def test_split_is_subject_disjoint_deterministic_and_near_the_fraction():
    subjects = [f"entity {i}" for i in range(500)] * 2  # every subject twice, as across relations
    train, val = subject_split(subjects, 0.2, seed=0)
    assert {subjects[i] for i in train}.isdisjoint({subjects[i] for i in val})
    assert (train, val) == subject_split(subjects, 0.2, seed=0)
    assert 0.15 < len(val) / len(subjects) < 0.25
    assert val != subject_split(subjects, 0.2, seed=1)[1]


@pytest.mark.parametrize("field,value", [("rank", 0), ("val_fraction", 1.0), ("patience", 0), ("lr", -1.0)])
def test_config_names_the_bad_field(field, value):
    with pytest.raises(ValueError, match=f"ProbeConfig.{field} must be"):
        ProbeConfig(**{field: value})


def _planted(n=400, d=16, seed=0):
    """Layer 1 carries a linear image of the target; layer 0 is noise."""
    g = torch.Generator().manual_seed(seed)
    x1 = torch.randn(n, d, generator=g)
    W = torch.randn(d, d, generator=g)
    states = torch.stack([torch.randn(n, d, generator=g), x1], dim=1)  # (n, 2, d)
    return states, x1 @ W


def test_probe_recovers_a_planted_linear_map_only_where_it_is():
    states, targets = _planted()
    _, log = fit_probes(states, targets, list(range(320)), list(range(320, 400)),
                        ProbeConfig(rank=16, lr=1e-2, max_epochs=100, batch_size=32))
    noise, signal = log["best_val_loss"]
    assert signal < 0.05 < 0.5 < noise
    assert log["rank"] == 16


def test_layers_train_independently():
    """Changing layer 1's data leaves layer 0's probe bit-for-bit the same."""
    states, targets = _planted()
    other = states.clone()
    other[:, 1] = torch.randn_like(other[:, 1])
    config = ProbeConfig(rank=8, max_epochs=7, patience=100)
    a, _ = fit_probes(states, targets, list(range(300)), list(range(300, 400)), config)
    b, _ = fit_probes(other, targets, list(range(300)), list(range(300, 400)), config)
    for name, value in a.state_dict().items():
        assert torch.equal(value[0], b.state_dict()[name][0])
        assert not torch.equal(value[1], b.state_dict()[name][1])


def test_a_layer_trains_the_same_whether_the_others_stop_early_or_not():
    """A stopped layer leaves the stack (`_keep_layers`): the layer still training must not notice."""
    states, targets = _planted()
    signal_first = states.flip(1).clone()  # layer 0 carries the target, layer 1 is noise (stops early)
    both_signal = signal_first.clone()
    noise = torch.randn(signal_first[:, 0].shape, generator=torch.Generator().manual_seed(1))
    both_signal[:, 1] = signal_first[:, 0] + 0.01 * noise  # layer 1 trains on too
    config = ProbeConfig(rank=16, lr=1e-2, max_epochs=60, patience=3, batch_size=32)
    a, log_a = fit_probes(signal_first, targets, list(range(320)), list(range(320, 400)), config)
    b, log_b = fit_probes(both_signal, targets, list(range(320)), list(range(320, 400)), config)
    assert log_a["epochs"][1] < log_a["epochs"][0]  # layer 0 outlived layer 1 in the first fit
    assert log_b["epochs"][1] > log_a["epochs"][1]
    assert log_a["epochs"][0] == log_b["epochs"][0] and log_a["best_val_loss"][0] == log_b["best_val_loss"][0]
    for name, value in a.state_dict().items():
        assert torch.equal(value[0], b.state_dict()[name][0])


def test_each_layer_keeps_its_best_validation_weights_and_stops_on_patience():
    states, targets = _planted()
    probes, log = fit_probes(states, targets, list(range(320)), list(range(320, 400)),
                             ProbeConfig(rank=16, lr=1e-2, max_epochs=200, patience=3, batch_size=32))
    assert log["epochs"][0] < 200  # the noise layer stopped early
    with torch.no_grad():
        pred = probes(states[320:].transpose(0, 1).contiguous())
    cos = torch.nn.functional.cosine_similarity(pred, targets[320:].unsqueeze(0), dim=-1)
    torch.testing.assert_close((1 - cos).mean(1), torch.tensor(log["best_val_loss"]), atol=1e-5, rtol=1e-5)


def test_gold_ranks_match_a_full_sort_over_the_vocabulary():
    g = torch.Generator().manual_seed(0)
    D = torch.randn(1000, 8, generator=g)
    pred = torch.randn(20, 8, generator=g)
    gold = torch.randint(0, 1000, (20,), generator=g)
    ranks = gold_ranks(pred, gold, unit_rows(D), chunk=128)
    scores = torch.nn.functional.normalize(pred, dim=-1) @ torch.nn.functional.normalize(D, dim=-1).T
    order = scores.argsort(dim=1, descending=True)
    expected = (order == gold[:, None]).float().argmax(1) + 1
    assert torch.equal(ranks, expected)
    assert torch.equal(gold_ranks(pred, gold, unit_rows(D), chunk=128, rows=7), expected)  # in blocks of rows
    assert gold_ranks(D[gold], gold, unit_rows(D)).eq(1).all()  # predicting the row itself ranks it first


def test_metrics_and_baselines():
    assert rank_metrics(torch.tensor([1, 2, 10, 20])) == pytest.approx({"hits1": 0.25, "hits10": 0.75, "mrr": (1 + 0.5 + 0.1 + 0.05) / 4})
    chance = chance_metrics(50_000)
    assert chance["hits1"] == pytest.approx(2e-5)
    assert chance["mrr"] == pytest.approx(sum(1 / r for r in range(1, 50_001)) / 50_000, rel=1e-6)
    ranks = majority_ranks(torch.tensor([7, 7, 7, 3, 3, 9]), torch.tensor([7, 3, 9, 5]), vocab_size=100)
    assert ranks.tolist() == [1, 2, 3, 3 + (100 - 3 + 1) / 2]
    assert math.isclose(rank_metrics(ranks)["hits1"], 0.25)
