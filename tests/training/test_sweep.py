import json

import pytest
import torch

import geofact.training.sweep as sweep_module
from geofact.training.config import TrainConfig
from geofact.training.sweep import load_weights, result_path, run_sweep

RUNS = [TrainConfig(N=32, R=R, d=8, batch_size=32, max_steps=15, lr=1e-2, seed=s) for R in (1, 2) for s in (0, 1)]


def test_sweep_caches_every_run_with_config_and_provenance(tmp_path):
    records = run_sweep(RUNS, tmp_path, progress=False)
    assert [r["config"] for r in records] == [c.as_dict() for c in RUNS]
    record = json.loads(result_path(tmp_path, RUNS[0]).read_text())
    assert record["provenance"]["device"] and record["provenance"]["git_commit"] and 0 <= record["accuracy"] <= 1
    weights = load_weights(tmp_path, RUNS[3])
    assert weights["E_rel"].shape == (2, 8) and weights["E_out"].shape == (8, 32)


def test_interrupted_sweep_resumes_without_recomputing(tmp_path, monkeypatch):
    calls = []
    real = sweep_module.train_group

    def flaky(configs, **kwargs):
        if calls:  # the second group dies, as if the machine went away
            raise KeyboardInterrupt
        calls.append(len(configs))
        return real(configs, **kwargs)

    monkeypatch.setattr(sweep_module, "train_group", flaky)
    with pytest.raises(KeyboardInterrupt):
        run_sweep(RUNS, tmp_path, group_size=2, progress=False)
    saved = {p.stem for p in tmp_path.glob("*.json")}
    assert len(saved) == 2  # the finished group is kept

    trained = []
    monkeypatch.setattr(sweep_module, "train_group", lambda configs, **kw: trained.extend(configs) or real(configs, **kw))
    records = run_sweep(RUNS, tmp_path, group_size=2, progress=False)
    assert len(trained) == 2 and {c.key() for c in trained}.isdisjoint(saved)  # only the missing runs
    assert all(r is not None for r in records)
    before = {p.name: p.read_text() for p in tmp_path.glob("*.json")}
    run_sweep(RUNS, tmp_path, progress=False)  # nothing left to do: nothing rewritten
    assert before == {p.name: p.read_text() for p in tmp_path.glob("*.json")}


def test_cached_record_of_another_config_is_an_error(tmp_path):
    run_sweep(RUNS[:1], tmp_path, progress=False)
    path = result_path(tmp_path, RUNS[0])
    record = json.loads(path.read_text())
    record["config"]["d"] = 999
    path.write_text(json.dumps(record))
    with pytest.raises(ValueError, match="delete it"):
        run_sweep(RUNS[:1], tmp_path, progress=False)


def test_cuda_is_refused_clearly_when_missing(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(RuntimeError, match="cuda"):
        run_sweep(RUNS[:1], tmp_path, device="cuda", progress=False)
