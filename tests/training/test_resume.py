"""Resumable groups (geofact.training.resume): a group stopped by a time budget or killed with SIGKILL
at any moment resumes to the records of a group that was never interrupted."""

import json
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import geofact.training.resume as resume_module
from geofact.settings import DEADLINE_ENV, deadline
from geofact.training.config import MultiHopConfig, TrainConfig
from geofact.training.resume import BudgetSpent, GroupCheckpoint
from geofact.training.sweep import group_settings, groups_dir, run_sweep

TIMING = ("group_seconds", "provenance")  # what may differ between an interrupted and an uninterrupted group

# R differs (padded stacks) and the loss threshold is loose, so runs leave the stack at different steps
# and a state is written with only some runs still in it
RUNS = [TrainConfig(N=32, R=R, d=8, batch_size=32, max_steps=400, lr=1e-2, seed=s, loss_threshold=0.3)
        for R in (1, 2) for s in (0, 1, 2)]


def outcome(cache: Path) -> dict:
    """Every record (without timing) and every weights file of a cache, to compare two caches exactly."""
    records = {p.name: {k: v for k, v in json.loads(p.read_text()).items() if k not in TIMING} for p in cache.glob("*.json")}
    weights = {}
    for p in cache.glob("*.npz"):
        with np.load(p) as z:
            weights[p.name] = {k: z[k].tobytes() for k in z.files}
    return {"records": records, "weights": weights}


def budget_spent_at_boundary(n: int):
    """A stand-in for `past_deadline` that says the budget is spent from the n-th block boundary on."""
    calls = []

    def spent() -> bool:
        calls.append(1)
        return len(calls) >= n

    return spent


def test_a_group_stopped_by_the_budget_resumes_to_the_records_of_an_uninterrupted_one(tmp_path, monkeypatch):
    reference = run_sweep(RUNS, tmp_path / "ref", progress=False, workers=1, checkpoints=(50, 300), checkpoint_every=None)
    stops = sorted(r["steps"] for r in reference)
    monkeypatch.setattr(resume_module, "past_deadline", budget_spent_at_boundary(4))
    with pytest.raises(BudgetSpent, match="checkpointed"):
        run_sweep(RUNS, tmp_path / "cut", progress=False, workers=1, checkpoints=(50, 300), checkpoint_every=0)
    assert not list((tmp_path / "cut").glob("*.json"))  # no record of an unfinished group
    (index,) = groups_dir(tmp_path / "cut").glob("*.json")
    keys = json.loads(index.read_text())["keys"]
    state = GroupCheckpoint(index.parent, keys, json.loads(index.read_text())["settings"]).load()
    assert state.step == 4 * 64 and 0 < len(state.alive) < len(RUNS), (state.step, state.alive, stops)  # some runs had left

    monkeypatch.undo()
    resumed = run_sweep(RUNS, tmp_path / "cut", progress=False, workers=1, checkpoints=(50, 300))
    assert outcome(tmp_path / "cut") == outcome(tmp_path / "ref")
    assert [r["steps"] for r in resumed] == [r["steps"] for r in reference]
    assert not list(groups_dir(tmp_path / "cut").iterdir())  # the state is gone once the records are written


# d_min trials with the hopeless rule (TrainConfig.give_up): one crosses at step 260, one gives up at 340 (its rule reads
# the best counts of its checks from the first on, so a state must carry them), two train to their budget
GIVING_UP = [TrainConfig(N=64, R=4, d=8, lr=lr, batch_size=64, max_steps=400, seed=s, stop_accuracy=(0.4, 20), give_up=2.0)
             for lr, s in ((3e-2, 0), (1e-2, 1), (3e-3, 2), (1e-5, 3))]


def test_a_group_whose_runs_may_give_up_resumes_to_the_records_of_an_uninterrupted_one(tmp_path, monkeypatch):
    reference = run_sweep(GIVING_UP, tmp_path / "ref", progress=False, workers=1, checkpoint_every=None)
    assert sorted(r["gave_up"] for r in reference) == [False, False, False, True]
    monkeypatch.setattr(resume_module, "past_deadline", budget_spent_at_boundary(1))  # at step 64: its checks at 20-60
    with pytest.raises(BudgetSpent, match="checkpointed"):
        run_sweep(GIVING_UP, tmp_path / "cut", progress=False, workers=1, checkpoint_every=0)
    monkeypatch.undo()
    run_sweep(GIVING_UP, tmp_path / "cut", progress=False, workers=1)
    assert outcome(tmp_path / "cut") == outcome(tmp_path / "ref")


# k-hop runs with and without chain-of-thought, stopping at different checks (accuracy or loss)
HOPS = [MultiHopConfig(N=16, R=2, k=2, d=32, batch_size=128, max_steps=500, lr=3e-3, cot=cot, seed=s, check_every=50,
                       target_accuracy=0.9) for cot in (True, False) for s in (0, 1)]


def test_a_multihop_group_stopped_by_the_budget_resumes_to_the_records_of_an_uninterrupted_one(tmp_path, monkeypatch):
    reference = run_sweep(HOPS, tmp_path / "ref", progress=False, workers=1, checkpoint_every=None, group_size=2)
    calls = []
    monkeypatch.setattr(resume_module, "past_deadline", lambda: calls.append(1) or len(calls) >= 5)
    with pytest.raises(BudgetSpent, match="checkpointed"):
        run_sweep(HOPS, tmp_path / "cut", progress=False, workers=1, checkpoint_every=0, group_size=2)
    (index,) = groups_dir(tmp_path / "cut").glob("*.json")
    meta = json.loads(index.read_text())
    assert GroupCheckpoint(index.parent, meta["keys"], meta["settings"]).load().step == 5 * 50
    monkeypatch.undo()
    resumed = run_sweep(HOPS, tmp_path / "cut", progress=False, workers=1, group_size=2)
    assert outcome(tmp_path / "cut") == outcome(tmp_path / "ref")
    assert [r["steps"] for r in resumed] == [r["steps"] for r in reference]
    assert len({r["steps"] for r in reference}) > 1  # the runs left the stack at different steps


def test_a_group_killed_while_writing_its_records_resumes_whole_and_leaves_no_state(tmp_path, monkeypatch):
    """Killed after some of a group's records are written (the window CI's random SIGKILL once hit): the
    group is resumed from its state, not the other runs trained afresh in a smaller stack (whose
    records and rounding need not match), and its state is cleared."""
    import geofact.training.sweep as sweep_module

    reference = run_sweep(RUNS, tmp_path / "ref", progress=False, workers=1, checkpoints=(50, 300), checkpoint_every=None)
    write, written = sweep_module.save_result, []

    class Killed(Exception):
        pass

    def killed_after_two(*args, **kwargs):
        if len(written) == 2:
            raise Killed
        written.append(1)
        write(*args, **kwargs)

    monkeypatch.setattr(sweep_module, "save_result", killed_after_two)
    with pytest.raises(Killed):
        run_sweep(RUNS, tmp_path / "cut", progress=False, workers=1, checkpoints=(50, 300), checkpoint_every=0)
    assert len(list((tmp_path / "cut").glob("*.json"))) == 2 and list(groups_dir(tmp_path / "cut").glob("*.npz"))
    monkeypatch.undo()
    resumed = run_sweep(RUNS, tmp_path / "cut", progress=False, workers=1, checkpoints=(50, 300))
    assert outcome(tmp_path / "cut") == outcome(tmp_path / "ref")  # group_size included: one stack of six
    assert [r["steps"] for r in resumed] == [r["steps"] for r in reference]
    assert not list(groups_dir(tmp_path / "cut").iterdir())


def test_a_state_left_behind_by_a_group_whose_records_are_all_written_is_cleared(tmp_path):
    run_sweep(RUNS, tmp_path, progress=False, workers=1, checkpoints=(50, 300), checkpoint_every=None)
    keys, settings = [c.key() for c in RUNS], group_settings(RUNS[0], (50, 300))
    GroupCheckpoint(groups_dir(tmp_path), keys, settings).save(
        resume_module.GroupState(step=64, alive=[0], tensors={}, meta={}, seconds=1.0))
    run_sweep(RUNS[:1], tmp_path, progress=False, workers=1, checkpoints=(50, 300))  # all cached: no group to form
    assert list(groups_dir(tmp_path).iterdir())  # the pool forms groups only when it has runs to train
    run_sweep([*RUNS, replace(RUNS[0], seed=9)], tmp_path, progress=False, workers=1, checkpoints=(50, 300))
    assert not list(groups_dir(tmp_path).iterdir())


def test_past_the_deadline_a_sweep_starts_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv(DEADLINE_ENV, str(time.time() - 1))
    with pytest.raises(BudgetSpent, match="6 runs not started"):
        run_sweep(RUNS, tmp_path, progress=False, workers=1)
    assert not list(tmp_path.glob("*.json"))
    monkeypatch.setenv(DEADLINE_ENV, "soon")
    with pytest.raises(ValueError, match=f"{DEADLINE_ENV} must be a Unix time"):
        deadline()


SCRIPT = """
import sys
from pathlib import Path
from geofact.training.config import TrainConfig
from geofact.training.sweep import run_sweep
if __name__ == "__main__":
    runs = [TrainConfig(N=64, R=R, d=16, batch_size=64, max_steps=5000, lr=1e-2, seed=s, loss_threshold=1e-3)
            for R in (1, 2) for s in (0, 1)]
    run_sweep(runs, Path(sys.argv[1]), progress=False, workers=1, checkpoints=(100, 2000), checkpoint_every=0)
"""


def newest_state(cache: Path) -> float:
    """mtime of the newest group state in a cache (0 when none)."""
    states = list(groups_dir(cache).glob("*.npz")) if groups_dir(cache).exists() else []
    return max((p.stat().st_mtime for p in states), default=0.0)


@pytest.mark.slow
def test_sigkill_at_random_moments_then_resume_gives_the_records_of_an_uninterrupted_run(tmp_path):
    """The issue's test: kill the sweep (SIGKILL, no cleanup) at random points, run it again until it
    finishes, and compare with a run never killed: records and weights identical, bit for bit. Half the
    kills land anywhere (while starting, training, writing); the others, and the first two, just after
    a state was written, so that the run is known to be killed mid-group and resumed from a state."""
    script = tmp_path / "sweep.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "GEOFACT_THREADS": "1"}  # one thread in both, so both round alike
    started = time.monotonic()
    subprocess.run([sys.executable, str(script), str(tmp_path / "ref")], check=True, env=env)
    whole = time.monotonic() - started
    cut = tmp_path / "cut"
    rng = random.Random(0)
    kills, resumed_from_a_state = 0, 0
    for attempt in range(12):
        resumed_from_a_state += newest_state(cut) > 0
        before = newest_state(cut)
        process = subprocess.Popen([sys.executable, str(script), str(cut)], env=env)
        if attempt < 2 or rng.random() < 0.5:  # just after the next state is written
            while process.poll() is None and newest_state(cut) <= before:
                time.sleep(0.02)
            time.sleep(rng.uniform(0, 0.2))
        else:  # anywhere
            time.sleep(rng.uniform(0, whole))
        if process.poll() is not None:
            assert process.returncode == 0
            break
        process.send_signal(signal.SIGKILL)
        process.wait()
        kills += 1
    else:
        subprocess.run([sys.executable, str(script), str(cut)], check=True, env=env)
    assert kills >= 2 and resumed_from_a_state >= 2, (kills, resumed_from_a_state)
    assert outcome(cut) == outcome(tmp_path / "ref")


def test_a_slow_state_write_spaces_the_next_ones_out(tmp_path, monkeypatch):
    import geofact.training.resume as resume

    clock = iter([0.0, 100.0, 130.0, 200.0, 130.0 + 600.0])  # creation, save start, save end (30 s), then two checks
    monkeypatch.setattr(resume.time, "monotonic", lambda: next(clock))
    monkeypatch.setattr(resume, "write_atomically", lambda path, data, sync=False: None)
    checkpoint = GroupCheckpoint(tmp_path, ["a"], {}, every_s=120)
    state = resume.GroupState(step=64, alive=[0], tensors={}, meta={}, seconds=1.0)
    checkpoint.save(state)  # took 30 s: the next write waits 30 / 5% = 600 s rather than 120
    assert not checkpoint.due() and checkpoint.due()


def test_a_state_written_under_the_old_24_digit_name_is_found_and_cleared(tmp_path):
    """Group states were once named by sha256 cut at 24 digits (geofact.store.LEGACY_KEY_LENGTHS): a group
    interrupted then resumes from its state instead of starting over and orphaning the old files."""
    import hashlib

    keys, settings = ["run-a", "run-b"], {"group_size": 2}
    writer = GroupCheckpoint(tmp_path, keys, settings)
    writer.save(resume_module.GroupState(step=128, alive=[1], tensors={}, meta={"lr": 0.01}, seconds=2.0))
    old = hashlib.sha256(json.dumps({"keys": keys, "settings": settings}, sort_keys=True).encode()).hexdigest()[:24]
    for path in (writer.index, writer.state_path):
        path.rename(path.with_name(old + path.suffix))
    assert resume_module.pending_groups(tmp_path) == [(keys, settings)]

    reader = GroupCheckpoint(tmp_path, keys, settings)
    state = reader.load()
    assert state.step == 128 and state.alive == [1] and state.meta == {"lr": 0.01}
    reader.clear()
    assert list(tmp_path.iterdir()) == []



def cut_and_resumed(runs: list, tmp_path: Path, monkeypatch, blocks: int) -> tuple[dict, dict]:
    """The outcome of `runs` swept uninterrupted, and of the same sweep cut by its budget after `blocks`
    blocks and run again (checkpoint step 50 kept)."""
    run_sweep(runs, tmp_path / "ref", progress=False, workers=1, checkpoints=(50,), checkpoint_every=None)
    monkeypatch.setattr(resume_module, "past_deadline", budget_spent_at_boundary(blocks))
    with pytest.raises(BudgetSpent, match="checkpointed"):
        run_sweep(runs, tmp_path / "cut", progress=False, workers=1, checkpoints=(50,), checkpoint_every=0)
    monkeypatch.undo()
    run_sweep(runs, tmp_path / "cut", progress=False, workers=1, checkpoints=(50,))
    return outcome(tmp_path / "ref"), outcome(tmp_path / "cut")


def test_a_group_read_past_its_stop_resumes_to_the_records_of_an_uninterrupted_one(tmp_path, monkeypatch):
    reference, resumed = cut_and_resumed([replace(c, read_past_stop=True) for c in RUNS], tmp_path, monkeypatch, 4)
    assert resumed == reference
    records = list(reference["records"].values())
    assert any(r["stopped_early"] and r["past_stop"]["points"]["stop"] < 4 * 64 for r in records)  # stopped before the cut
    for r in records:  # the best and last states are written beside the run's own weights
        assert set(r["past_stop"]["weights"].values()) <= set(reference["weights"])


def test_a_group_keeping_a_tail_resumes_to_the_records_of_an_uninterrupted_one(tmp_path, monkeypatch):
    reference, resumed = cut_and_resumed([replace(c, keep_tail=(20, 2)) for c in RUNS], tmp_path, monkeypatch, 2)
    assert resumed == reference
    for r in reference["records"].values():
        tail = TrainConfig(**r["config"]).tail_steps(r["steps"])
        assert [c["step"] for c in r["checkpoints"]] == sorted({50} & set(range(r["steps"] + 1)) | set(tail))
