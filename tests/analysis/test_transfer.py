import dataclasses
import time

import pytest
import torch

from geofact.analysis.readout import linear_readout, nearest, split_subjects
from geofact.analysis.trained import TrainedModel
from geofact.analysis.transfer import (CONDITIONS, TransferConfig, new_answers, run_transfers, smart_init,
                                       starting_embeddings)
from geofact.settings import DEADLINE_ENV
from geofact.task import SharedAttributeTask
from geofact.training.config import TrainConfig
from geofact.training.resume import BudgetSpent
from geofact.training.sweep import load_result
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


# Trained well past capacity (every fact right, loss ~4e-3 after 600 steps): the readout maps then read
# the table back with a margin of tens of facts, which no BLAS rounding difference can cross.
BASE = TrainConfig(N=64, R=2, d=32, batch_size=64, max_steps=600, lr=1e-2)


def test_transfer_runs_the_three_retraining_conditions_and_resumes_from_its_cache(tmp_path):
    configs = [TransferConfig(BASE, new_task_seed=5, steps=30, eval_every=10),
               TransferConfig(dataclasses.replace(BASE, frozen_embeddings=True), new_task_seed=5, steps=30, eval_every=10)]
    records = run_transfers(configs, tmp_path, progress=False)
    for config, record in zip(configs, records):
        assert set(record["curves"]) == set(CONDITIONS)
        for curve in record["curves"].values():
            assert [s for s, _ in curve] == [0, 10, 20, 30]
        model = TrainedModel.load(tmp_path, config.base)
        starts, on_g = starting_embeddings(config, model)
        assert record["smart_on_g"] == on_g
        # step 0 is the untrained start: the smart init's zero-shot accuracy on g', the random start's on g and g'
        # (stacked and solo forwards round differently: allow one fact of the N R to flip)
        one_fact = 1 / (config.base.N * config.base.R)
        assert record["curves"]["smart"][0][1] == pytest.approx(model.accuracy(starts["smart"], new_answers(config)), abs=one_fact)
        assert record["curves"]["control"][0][1] == pytest.approx(model.accuracy(starts["control"]), abs=one_fact)
        assert record["curves"]["random"][0][1] == pytest.approx(model.accuracy(starts["random"], new_answers(config)), abs=one_fact)
        assert record["config"]["base"] == config.base.as_dict() and record["provenance"]["device"]
    learned = records[0]
    assert load_result(tmp_path, BASE)["accuracy"] == 1.0
    # a model trained past its capacity reads its own table back: far above its random start (chance 1/N)
    assert learned["smart_on_g"] > 0.75 > 0.25 > learned["curves"]["control"][0][1]
    # control retrains toward g: its accuracy on g rises from the random start
    assert learned["curves"]["control"][-1][1] > learned["curves"]["control"][0][1]

    before = {p: p.stat().st_mtime_ns for p in (tmp_path / "transfer").iterdir()}
    assert run_transfers(configs, tmp_path, progress=False) == records
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "transfer").iterdir()} == before


def test_past_the_deadline_cached_transfers_still_read_and_no_new_group_starts(tmp_path, monkeypatch):
    done = TransferConfig(BASE, new_task_seed=5, steps=10, eval_every=10)
    records = run_transfers([done], tmp_path, progress=False)
    monkeypatch.setenv(DEADLINE_ENV, str(time.time() - 1))
    assert run_transfers([done], tmp_path, progress=False) == records
    with pytest.raises(BudgetSpent, match="1 of 1 groups of transfers not started"):
        run_transfers([done, dataclasses.replace(done, new_task_seed=6)], tmp_path, progress=False)
    assert len(list((tmp_path / "transfer").iterdir())) == 1


def test_transfer_config_rejects_bad_values():
    with pytest.raises(ValueError, match="new_task_seed must differ"):
        TransferConfig(BASE, new_task_seed=0)
    with pytest.raises(ValueError, match="steps must be >= 1"):
        TransferConfig(BASE, new_task_seed=1, steps=0)
    with pytest.raises(ValueError, match="condition must be one of"):
        TransferConfig(BASE, new_task_seed=1).retrain_config("zero-shot")
    retrain = TransferConfig(BASE, new_task_seed=1, lr=0.5).retrain_config("smart")
    assert (retrain.task_seed, retrain.lr, retrain.frozen_embeddings, retrain.loss_threshold) == (1, 0.5, False, 0.0)
