import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import geofact.training.sweep as sweep_module
from geofact.training.config import TrainConfig
from geofact.training.sweep import SweepPool, chunk_cost, in_schedule_order, load_weights, result_path, run_sweep, stack_chunks
from geofact.training.trainer import train_group

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
    with pytest.raises(KeyboardInterrupt):  # workers=1: the patched trainer runs in this process
        run_sweep(RUNS, tmp_path, group_size=2, progress=False, workers=1)
    saved = {p.stem for p in tmp_path.glob("*.json")}
    assert len(saved) == 2  # the finished group is kept

    trained = []
    monkeypatch.setattr(sweep_module, "train_group", lambda configs, **kw: trained.extend(configs) or real(configs, **kw))
    records = run_sweep(RUNS, tmp_path, group_size=2, progress=False, workers=1)
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


def test_checkpoints_are_cached_and_a_run_lacking_one_is_trained_again(tmp_path, monkeypatch):
    config = RUNS[0]
    record = run_sweep([config], tmp_path, progress=False, checkpoints=(0, 5))[0]
    assert [(c["step"], c["weights"]) for c in record["checkpoints"]] == [(0, f"{config.key()}-step0.npz"),
                                                                          (5, f"{config.key()}-step5.npz")]
    (alone,) = train_group([config], checkpoints=(5,))
    for name, value in load_weights(tmp_path, config, step=5).items():
        torch.testing.assert_close(value, alone.checkpoints[5][name])
    trained = []
    real = sweep_module.train_group
    monkeypatch.setattr(sweep_module, "train_group", lambda configs, **kw: trained.extend(configs) or real(configs, **kw))
    run_sweep([config], tmp_path, progress=False, checkpoints=(5,), workers=1)
    assert trained == []  # it has step 5 already
    record = run_sweep([config], tmp_path, progress=False, checkpoints=(10, 99), workers=1)[0]
    assert trained == [config]  # step 10 was missing (99 is past its 15 steps and is not asked of it)
    assert [c["step"] for c in record["checkpoints"]] == [10]


def test_workers_train_the_same_runs_as_one_process(tmp_path):
    one = run_sweep(RUNS, tmp_path / "one", progress=False, workers=1)
    two = run_sweep(RUNS, tmp_path / "two", progress=False, workers=2)
    assert [r["group_size"] for r in one] == [4] * 4 and [r["group_size"] for r in two] == [2] * 4  # split for 2 workers
    for a, b in zip(one, two):
        assert a["config"] == b["config"] and a["steps"] == b["steps"]
        assert a["final_loss"] == pytest.approx(b["final_loss"], rel=1e-4)  # 15 steps: stacking rounding stays tiny
    with pytest.raises(ValueError, match="workers must be >= 1"):
        run_sweep(RUNS, tmp_path, progress=False, workers=0)


def test_pool_answers_runs_as_they_finish_and_trains_a_repeated_config_once(tmp_path, monkeypatch):
    calls = []
    real = sweep_module.train_group

    def counting(configs, **kwargs):
        calls.append(len(configs))
        return real(configs, **kwargs)

    monkeypatch.setattr(sweep_module, "train_group", counting)
    with SweepPool(tmp_path, progress=False, workers=1) as pool:
        pool.submit([("a", RUNS[0]), ("b", RUNS[1])])
        first = pool.completed()
        pool.submit([("again", RUNS[0]), ("c", RUNS[2])])  # RUNS[0] is cached by now
        second = pool.completed()  # the cached one, at once
        third = pool.completed()
        with pytest.raises(RuntimeError, match="no run submitted"):
            pool.completed()
    assert sorted(t for t, _ in first) == ["a", "b"] and [t for t, _ in second] == ["again"] and [t for t, _ in third] == ["c"]
    assert dict(second)["again"] == dict(first)["a"] and calls == [2, 1]

    with SweepPool(tmp_path / "two", progress=False, workers=2) as pool:  # worker processes: no monkeypatch there
        pool.submit([("x", RUNS[3]), ("y", RUNS[3]), ("z", RUNS[2])])  # one config under two tags trains once
        answered = []
        while len(answered) < 3:
            answered += pool.completed()
    assert sorted(t for t, _ in answered) == ["x", "y", "z"]
    assert dict(answered)["x"] == dict(answered)["y"] == json.loads(result_path(tmp_path / "two", RUNS[3]).read_text())


def test_stack_chunks_spread_groups_over_workers_only_when_there_are_fewer_groups_than_workers():
    one_group = stack_chunks(list(range(10)), key=lambda i: 0, size=lambda i: 8, spread=2)
    assert [len(c) for c in one_group] == [5, 5]  # both workers get half
    two_groups = stack_chunks(list(range(10)), key=lambda i: i % 2, size=lambda i: 4, spread=2)
    assert [len(c) for c in two_groups] == [4, 1, 4, 1]  # a group stays one stack (up to size)
    assert [len(c) for c in stack_chunks(list(range(10)), key=lambda i: 0, size=lambda i: 4)] == [4, 4, 2]


def test_chunks_are_scheduled_longest_first():
    small, big = TrainConfig(N=16, R=2, d=4, batch_size=8, max_steps=10), TrainConfig(N=16, R=2, d=32, batch_size=8, max_steps=10)
    assert chunk_cost([big]) > chunk_cost([small, small]) > chunk_cost([small])


def test_one_worker_under_a_time_budget_trains_the_shortest_chunks_first(monkeypatch):
    small, big = TrainConfig(N=16, R=2, d=4, batch_size=8, max_steps=10), TrainConfig(N=16, R=2, d=32, batch_size=8, max_steps=10)
    chunks = [[small], [big], [small, small]]
    monkeypatch.delenv("GEOFACT_DEADLINE", raising=False)
    assert in_schedule_order(chunks, workers=1) == [[big], [small, small], [small]]
    monkeypatch.setenv("GEOFACT_DEADLINE", str(time.time() + 600))
    assert in_schedule_order(chunks, workers=2) == [[big], [small, small], [small]]  # workers still share the long ones
    assert in_schedule_order(chunks, workers=1) == [[small], [small, small], [big]]  # a lease ends with the most runs recorded


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="workers die with their parent through prctl, on Linux")
@pytest.mark.parametrize("seconds", [0.0, 8.0])  # while the workers start, and once they train
def test_workers_die_with_a_killed_sweep(tmp_path, seconds):
    """A sweep killed from the terminal (SIGKILL: no cleanup runs) leaves no worker training on."""
    script = tmp_path / "sweep.py"
    script.write_text(
        "from pathlib import Path\n"
        "from geofact.training.config import TrainConfig\n"
        "from geofact.training.sweep import run_sweep\n"
        "if __name__ == '__main__':\n"
        f"    runs = [TrainConfig(N=16, R=2, d=8, seed=s, max_steps=10**7, batch_size=8) for s in range(2)]\n"
        f"    run_sweep(runs, Path({str(tmp_path / 'runs')!r}), progress=False, workers=2)\n")
    parent = subprocess.Popen([sys.executable, str(script)])
    try:
        deadline = time.monotonic() + 120
        children: list[int] = []
        while len(children) < 2 and time.monotonic() < deadline:  # the spawned workers (and the pool's helper)
            time.sleep(0.5)
            children = [int(p) for p in Path(f"/proc/{parent.pid}/task/{parent.pid}/children").read_text().split()]
        assert len(children) >= 2, "the sweep never started its workers"
        time.sleep(seconds)
        parent.kill()
        parent.wait()
        def alive() -> list[int]:
            return [p for p in children if Path(f"/proc/{p}").exists() and Path(f"/proc/{p}/stat").read_text().split()[2] != "Z"]

        deadline = time.monotonic() + 20
        while alive() and time.monotonic() < deadline:
            time.sleep(0.5)
        survivors = alive()
        assert survivors == [], [Path(f"/proc/{p}/cmdline").read_text() for p in survivors]
    finally:
        parent.kill()


def test_a_lease_computing_grid_cells_trains_again_a_run_of_its_cells_whose_weights_are_not_here(tmp_path, monkeypatch):
    from geofact.training.grid import CapacityGrid

    spec = dict(N=16, R_values=[2], d_values=[4, 8], seeds=[0], lr=1e-2, batch_size=8, max_steps=10, checkpoints=[5])
    monkeypatch.delenv("GEOFACT_GRID_CELLS", raising=False)
    whole = CapacityGrid.from_parameter(spec)
    inside, outside = whole.config(2, 4, False, 0), whole.config(2, 8, False, 0)
    other = whole.config(2, 4, False, 0, weight_decay=0.0)  # same cell, not a grid run (a control)
    run_sweep([inside, outside, other], tmp_path, progress=False, checkpoints=(5,))
    for c in (inside, outside, other):  # an earlier lease's runs: their records came home, their weights did not
        (tmp_path / f"{c.key()}-step5.npz").unlink()
    pool = SweepPool(tmp_path, progress=False, checkpoints=(5,))
    assert all(pool.cached(c) is not None for c in (inside, outside, other))  # the pages at home read the records alone
    monkeypatch.setenv("GEOFACT_GRID_CELLS", '{"d": [4]}')
    assert CapacityGrid.from_parameter(spec).d_values == (4,)  # a page of this lease builds its grid on d = 4
    assert pool.cached(inside) is None  # its analyses need the weights: trained again here
    assert pool.cached(outside) is not None and pool.cached(other) is not None  # not this lease's cells: records stand
    run_sweep([inside], tmp_path, progress=False, checkpoints=(5,))
    assert (tmp_path / f"{inside.key()}-step5.npz").exists() and pool.cached(inside) is not None


def test_a_lease_computing_grid_cells_trains_the_second_grid_again_when_its_weights_are_not_here(tmp_path, monkeypatch):
    # the H200 lease of 2026-11-27 stopped on a second-grid run whose record an earlier lease brought home
    # without its weights: the mechanism pages analyse the second grid on every lease that computes cells
    from geofact.training.grid import ladder_grids

    spec = dict(N=16, seeds=[0], lr=1e-2, batch_size=8, max_steps=10, checkpoints=[5],
                d_ladders=[{"R": 2, "d_values": [4, 8]}])
    monkeypatch.delenv("GEOFACT_GRID_CELLS", raising=False)
    run = ladder_grids(spec)[0].config(2, 4, False, 0)
    run_sweep([run], tmp_path, progress=False, checkpoints=(5,))
    (tmp_path / f"{run.key()}-step5.npz").unlink()
    pool = SweepPool(tmp_path, progress=False, checkpoints=(5,))
    ladder_grids(spec)
    assert pool.cached(run) is not None  # at home, with no cells named, the record stands
    monkeypatch.setenv("GEOFACT_GRID_CELLS", '{"d": [32]}')
    ladder_grids(spec)  # a lease's page builds the second grid beside its cells
    assert pool.cached(run) is None


def test_a_sweep_on_a_cpu_takes_its_share_of_the_cores_when_pages_execute_side_by_side(monkeypatch):
    from geofact.processes import PAGES_AT_ONCE_ENV
    from geofact.training import sweep

    monkeypatch.setattr(sweep, "usable_cores", lambda: 4)
    monkeypatch.delenv(PAGES_AT_ONCE_ENV, raising=False)
    assert sweep.cpu_workers(torch.device("cpu")) == 4  # alone (a notebook in Jupyter, geofact compute)
    for pages, workers in [("1", 4), ("2", 2), ("3", 1), ("8", 1)]:
        monkeypatch.setenv(PAGES_AT_ONCE_ENV, pages)
        assert sweep.cpu_workers(torch.device("cpu")) == workers
    assert sweep.cpu_workers(torch.device("meta")) == 1  # an accelerator: one process feeds it
