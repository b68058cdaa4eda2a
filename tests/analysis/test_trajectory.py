import json
import time
from pathlib import Path

import numpy as np
import pytest

from geofact.analysis.trajectory import Point, analyse_grid, final_values, train_grid, train_grids
from geofact.pages.curves import value_at_steps
from geofact.settings import DEADLINE_ENV, RECORDS_ONLY_ENV
from geofact.store import RecordMissing
from geofact.training.grid import CapacityGrid
from geofact.training.resume import BudgetSpent

GRID = CapacityGrid(N=16, R_values=[1], d_values=[8], seeds=[0], lr=1e-2, batch_size=16, max_steps=30, checkpoints=[0, 10])


def test_every_checkpoint_and_the_final_state_are_analysed(tmp_path):
    records = train_grid(GRID, tmp_path)
    seen = []
    points = analyse_grid(GRID, records, tmp_path, lambda m: seen.append(m.step) or {"norm": float(m.weights["E_out"].norm())},
                          "norm", {})
    assert sorted(seen, key=lambda s: -1 if s is None else s) == [None, None, 0, 0, 10, 10]  # learned and frozen: 2 checkpoints + final each
    pts = points["learned", 1, 8, 0]
    assert [(p.step, p.final) for p in pts] == [(0, False), (10, False), (30, True)]
    assert pts[-1].accuracy == records["learned", 1, 8, 0]["accuracy"] and pts[0].loss == records["learned", 1, 8, 0]["checkpoints"][0]["loss"]
    assert pts[0].values["norm"] != pts[-1].values["norm"]  # the weights moved between step 0 and the stop
    assert final_values(GRID, points, "norm")["learned"].shape == (1, 1, 1)


def test_grids_trained_together_stack_their_runs_of_one_shape_and_keep_each_grids_keys(tmp_path):
    ladders = [CapacityGrid(N=16, R_values=[R], d_values=[8], seeds=[0], lr=1e-2, batch_size=16, max_steps=30, checkpoints=[0, 10])
               for R in (1, 2, 3)]
    together = train_grids(ladders, tmp_path / "together")
    assert [sorted(records) for records in together] == [sorted(g.configs()) for g in ladders]
    apart = train_grid(ladders[2], tmp_path / "apart")

    def stacks(records: list[dict]) -> int:
        return len({(r["group_seconds"], r["group_size"]) for r in records})

    # one ladder alone is as many stacks as it has runs or workers; three together share theirs
    assert stacks([r for records in together for r in records.values()]) < len(ladders) * stacks(list(apart.values()))
    assert all(apart[k]["config"] == together[2][k]["config"] and apart[k]["checkpoints"][0]["step"] == 0 for k in apart)


def test_a_run_that_stopped_keeps_its_final_value():
    pts = [Point(0, 5.0, 0.1, False, {"m": 0.1}), Point(40, 1e-5, 1.0, True, {"m": 0.9})]
    assert np.allclose(value_at_steps(pts, "m", [0, 40, 100]), [0.1, 0.9, 0.9])
    assert np.isnan(value_at_steps(pts, "m", [20])[0])  # no checkpoint there and not yet stopped
    assert value_at_steps(pts, "loss", [0]).tolist() == [5.0]


def norm(model) -> dict:
    return {"norm": float(model.weights["E_out"].norm()), "rows": model.weights["E_out"].norm(dim=0)[:3].tolist()}


def test_analyses_are_cached_as_records_and_pages_can_execute_from_them_without_weights(tmp_path, monkeypatch):
    records = train_grid(GRID, tmp_path)
    first = analyse_grid(GRID, records, tmp_path, norm, "norm", {"p": 1})
    assert len(list((tmp_path / "analyses" / "norm").glob("*.json"))) == 6  # 2 runs x (2 checkpoints + final)
    for weights in tmp_path.glob("*.npz"):  # what stays on the node: only the JSON records travel
        weights.unlink()
    monkeypatch.setenv(RECORDS_ONLY_ENV, "1")
    assert train_grid(GRID, tmp_path) == records
    again = analyse_grid(GRID, records, tmp_path, norm, "norm", {"p": 1})
    assert again == first and isinstance(again["learned", 1, 8, 0][-1].values["rows"], list)
    with pytest.raises(RecordMissing, match="weights .* not among the records"):  # other parameters: computed afresh
        analyse_grid(GRID, records, tmp_path, norm, "norm", {"p": 2})
    with pytest.raises(RecordMissing, match="run .* not among the records"):
        train_grid(GRID.__class__(**{**GRID.__dict__, "seeds": [1]}), tmp_path)
    record = json.loads(next((tmp_path / "analyses" / "norm").glob("*-final-*.json")).read_text())
    assert record["params"] == {"p": 1} and record["provenance"]["device"]
    # its wall seconds (geofact plan --check): the final state's accuracy is the run record's, a checkpoint's computed
    # once, as a record of its own that every analysis of the state reads
    assert record["seconds"]["accuracy"] is None and record["seconds"]["load"] > 0 and record["seconds"]["analysis"] > 0
    checkpoint = json.loads(next((tmp_path / "analyses" / "norm").glob("*-step0-*.json")).read_text())
    accuracy = json.loads(next((tmp_path / "analyses" / "accuracy").glob("*-step0-*.json")).read_text())
    assert checkpoint["seconds"]["accuracy"] is None and accuracy["seconds"]["analysis"] > 0
    assert accuracy["seconds"]["load"] == 0.0 and accuracy["analysis"] == "accuracy"


def test_a_states_accuracy_is_computed_once_for_every_analysis_that_reads_it(tmp_path, monkeypatch):
    from geofact.analysis.trained import TrainedModel

    records = train_grid(GRID, tmp_path)
    computed = []
    accuracy = TrainedModel.accuracy
    monkeypatch.setattr(TrainedModel, "accuracy", lambda self, *a: computed.append(self.step) or accuracy(self, *a))
    first = analyse_grid(GRID, records, tmp_path, norm, "norm", {})
    assert sorted(computed) == [0, 0, 10, 10]  # each checkpoint of both regimes; the stops' are the run records'
    second = analyse_grid(GRID, records, tmp_path, lambda m: {"d": m.config.d}, "width", {})
    assert len(computed) == 4  # the second analysis read them
    assert [[p.accuracy for p in points] for points in first.values()] == \
        [[p.accuracy for p in points] for points in second.values()]
    model = TrainedModel.load(tmp_path, GRID.config(1, 8, False, 0), 10)
    assert first["learned", 1, 8, 0][1].accuracy == accuracy(model)  # the cached value is the state's own


def test_a_processs_first_state_of_a_shape_is_marked_as_its_warm_up_and_a_cells_states_come_together(tmp_path, monkeypatch):
    from geofact.analysis import trajectory

    grid = CapacityGrid(N=16, R_values=[1, 2], d_values=[4, 8], seeds=[0], lr=1e-2, batch_size=16, max_steps=30,
                        checkpoints=[0, 10])
    records = train_grid(grid, tmp_path)
    monkeypatch.setattr(trajectory, "_SHAPES_TIMED", set())
    order = []
    analyse_grid(grid, records, tmp_path, lambda m: order.append((m.config.R, m.config.d)) or {}, "cells", {})
    assert order == sorted(order) and len(order) == 4 * 2 * 3  # cell by cell: (R, d), both regimes, 3 states a run
    saved = [json.loads(p.read_text()) for p in (tmp_path / "analyses" / "cells").glob("*.json")]
    cold = sorted((r["config"]["R"], r["config"]["d"]) for r in saved if not r["seconds"]["warm"])
    assert cold == [(1, 4), (1, 8), (2, 4), (2, 8)]  # one a shape


def test_a_grids_states_are_keyed_and_stamped_once(tmp_path, monkeypatch):
    """The code's hash (0.6 ms) and the provenance (git, about 3 ms) are made once for a grid's states, not per
    state: a paper-scale mechanism page analyses about 3,000."""
    from geofact.analysis import trajectory

    records = train_grid(GRID, tmp_path)
    made = {"code": 0, "origin": 0}

    def counted(name, fn):
        def wrapped(*args, **kwargs):
            made[name] += 1
            return fn(*args, **kwargs)
        return wrapped

    monkeypatch.setattr(trajectory, "analysis_code_hash", counted("code", trajectory.analysis_code_hash))
    monkeypatch.setattr(trajectory, "provenance", counted("origin", trajectory.provenance))
    monkeypatch.setattr(trajectory, "_ACCURACY_STAMPS", {})
    analyse_grid(GRID, records, tmp_path, norm, "norm", {})
    # the analysis's stamp and the checkpoints' accuracies' (`_shared_accuracy`), each made once
    assert made == {"code": 2, "origin": 2} and len(list((tmp_path / "analyses" / "norm").glob("*.json"))) == 6
    analyse_grid(GRID, records, tmp_path, norm, "norm", {})  # all cached: keyed, nothing stamped
    assert made == {"code": 3, "origin": 2}


def test_past_the_deadline_cached_states_still_read_and_an_uncached_one_stops_with_budget_spent(tmp_path, monkeypatch):
    # a GPU lease's analyses stop with its budget (a lease once ran its rank sweeps 50 s past it and lost
    # the command's records to the hard time limit, before they were packed)
    records = train_grid(GRID, tmp_path)
    analyse_grid(GRID, records, tmp_path, norm, "norm", {"p": 1})
    monkeypatch.setenv(DEADLINE_ENV, str(time.time() - 1))
    assert analyse_grid(GRID, records, tmp_path, norm, "norm", {"p": 1})["learned", 1, 8, 0][-1].final
    with pytest.raises(BudgetSpent, match="before the norm analysis of run .* at step 0; the states analysed so far"):
        analyse_grid(GRID, records, tmp_path, norm, "norm", {"p": 2})
    assert len(list((tmp_path / "analyses" / "norm").glob("*.json"))) == 6  # the p = 1 states alone


def test_a_reading_names_the_state_a_verdict_reads():
    from geofact.analysis.trajectory import reading_step

    stopped = {"stopped_early": True, "steps": 900,
               "past_stop": {"points": {"best": 700, "stop": 900, "last": 15000}}}
    never = {"stopped_early": False, "steps": 15000, "past_stop": {"points": {"best": 12000, "stop": None, "last": 15000}}}
    plain = {"stopped_early": True, "steps": 900}
    assert [reading_step(stopped, r) for r in ("stop", "best", "last")] == [None, 700, 15000]
    assert [reading_step(never, r) for r in ("stop", "best", "last")] == [None, 12000, None]  # its stop is its end
    assert [reading_step(plain, r) for r in ("stop", "best", "last")] == [None, False, False]  # not read past its stop
    unfinite = {"stopped_early": False, "steps": 10, "past_stop": {"points": {"best": None, "stop": None, "last": 10}}}
    assert reading_step(unfinite, "best") is False
    with pytest.raises(ValueError, match="reading must be one of"):
        reading_step(stopped, "peak")


def test_the_next_uncached_states_weights_are_read_while_one_is_analysed_each_once(tmp_path, monkeypatch):
    import threading

    from geofact.analysis import trajectory

    records = train_grid(GRID, tmp_path)
    analyse_grid(GRID, records, tmp_path, norm, "norm", {})  # every state cached under "norm"
    read = []
    load = trajectory.load_weights

    def counted(cache_dir, config, step):
        read.append((config.key(), step, threading.current_thread().name))
        return load(cache_dir, config, step)

    monkeypatch.setattr(trajectory, "load_weights", counted)
    assert analyse_grid(GRID, records, tmp_path, norm, "norm", {}) is not None and read == []  # cached: nothing read
    ahead = analyse_grid(GRID, records, tmp_path, norm, "norm-again", {})
    assert sorted((k, -1 if s is None else s) for k, s, _ in read) == sorted(
        (c.key(), -1 if s is None else s) for c in GRID.configs().values() for s in (0, 10, None))  # each state once
    here = [name for *_, name in read if name == threading.current_thread().name]
    assert len(here) == 1  # the first state read when asked, every other ahead, on the reader's thread
    assert all(name.startswith("geofact-weights") for *_, name in read if name not in here)
    plain = {key: [p.values for p in points] for key, points in analyse_grid(GRID, records, tmp_path, norm, "norm", {}).items()}
    assert {key: [p.values for p in points] for key, points in ahead.items()} == plain
    # a state whose weights cannot be read fails where it is analysed, after the states before it are cached
    next(tmp_path.glob(f"{list(GRID.configs().values())[-1].key()}*.npz")).unlink()
    with pytest.raises(FileNotFoundError):
        analyse_grid(GRID, records, tmp_path, norm, "norm-third", {})
    assert list((tmp_path / "analyses" / "norm-third").glob("*.json"))


def test_a_run_trained_again_has_its_checkpoints_accuracy_computed_again_from_its_own_weights(tmp_path, monkeypatch):
    import os

    from geofact.analysis.trained import TrainedModel

    records = train_grid(GRID, tmp_path)
    analyse_grid(GRID, records, tmp_path, norm, "norm", {})
    computed = []
    accuracy = TrainedModel.accuracy
    monkeypatch.setattr(TrainedModel, "accuracy", lambda self, *a: computed.append(self.step) or accuracy(self, *a))
    analyse_grid(GRID, records, tmp_path, norm, "norm-again", {})
    assert computed == []  # read from the records the first analysis made
    weights = next(tmp_path.glob("*-step10.npz"))  # written anew, as a lease's training writes a recorded run again
    made = weights.stat()
    os.utime(weights, ns=(made.st_atime_ns, made.st_mtime_ns + 10**9))
    analyse_grid(GRID, records, tmp_path, norm, "norm-third", {})
    assert computed == [10]  # that state alone


def test_a_batch_records_each_states_read_and_copy_and_reads_a_state_listed_twice_once(tmp_path, monkeypatch):
    from geofact.analysis import trajectory
    from geofact.analysis.trajectory import analyse_states

    records = train_grid(GRID, tmp_path)
    config = GRID.config(1, 8, False, 0)
    reads = []
    load = trajectory.load_weights
    monkeypatch.setattr(trajectory, "load_weights", lambda *a: reads.append(a[2]) or load(*a))
    accuracy = records["learned", 1, 8, 0]["accuracy"]
    out = analyse_states(tmp_path, [(config, None, accuracy), (config, 10, None), (config, 10, None), (config, 0, None)],
                         norm, "twice", {})
    assert sorted(reads, key=lambda s: -1 if s is None else s) == [None, 0, 10]  # step 10 read once
    assert out[1] == out[2]  # the second listing read the record the first wrote
    seconds = [json.loads(p.read_text())["seconds"] for p in (tmp_path / "analyses" / "twice").glob("*.json")]
    assert sorted(s["ahead"] for s in seconds) == [False, True, True]  # the first state read when asked
    assert all(s["read"] > 0 and s["copy"] >= 0 and s["load"] >= s["copy"] for s in seconds)


def test_every_runs_accuracy_is_read_at_each_reading_point_from_its_record_and_a_point_some_run_lacks_is_not_read():
    from geofact.analysis.trajectory import reading_accuracies

    grid = CapacityGrid(N=16, R_values=[1], d_values=[8, 16], seeds=[0], lr=1e-2, batch_size=16, max_steps=15000, checkpoints=[0])

    def past(best: int | None, accuracy: dict) -> dict:
        return {"points": {"best": best, "stop": None, "last": 15000}, "accuracy": accuracy}

    records = {}
    for name in ("learned", "frozen"):
        # stopped at 900: its best and last states are its own, measured in training
        records[name, 1, 8, 0] = {"stopped_early": True, "steps": 900, "accuracy": 1.0,
                                  "past_stop": past(700, {"best": 0.9, "last": 0.5})}
        # never stopped: its last state is its stop (the record's accuracy), its best one its own
        records[name, 1, 16, 0] = {"stopped_early": False, "steps": 15000, "accuracy": 0.75,
                                   "past_stop": past(12000, {"best": 0.8, "last": 0.75})}
    at = reading_accuracies(grid, records)
    assert at["stop"]["learned"][0, :, 0].tolist() == [1.0, 0.75]
    assert at["best"]["frozen"][0, :, 0].tolist() == [0.9, 0.8] and at["last"]["learned"][0, :, 0].tolist() == [0.5, 0.75]
    # one run with no best state (its loss never finite): that reading is not read, the others are
    records["frozen", 1, 16, 0]["past_stop"]["points"]["best"] = None
    at = reading_accuracies(grid, records)
    assert at["best"] is None and at["last"]["frozen"][0, :, 0].tolist() == [0.5, 0.75]
    # a grid whose runs stop at the stop rule: only the stop is read
    for record in records.values():
        del record["past_stop"]
    at = reading_accuracies(grid, records)
    assert at["best"] is None and at["last"] is None and at["stop"]["learned"].shape == (1, 2, 1)


def test_the_accuracy_training_records_at_a_state_past_the_stop_is_that_states_own(tmp_path):
    from geofact.analysis.trained import TrainedModel
    from geofact.analysis.trajectory import READINGS, reading_accuracies, reading_step

    grid = CapacityGrid(N=16, R_values=[2], d_values=[32], seeds=[0, 1], lr=1e-2, batch_size=32, max_steps=3000,
                        checkpoints=[0], read_past_stop=True)
    records = train_grid(grid, tmp_path)
    at = reading_accuracies(grid, records)
    stopped = [key for key, record in records.items() if record["stopped_early"]]
    assert stopped  # (which runs stop is the CPU's rounding; some do at this rate)
    for key in records:
        for reading in READINGS[1:]:
            step = reading_step(records[key], reading)
            model = TrainedModel.load(tmp_path, grid.configs()[key], step)
            assert at[reading][key[0]][0, 0, key[3]] == model.accuracy()
