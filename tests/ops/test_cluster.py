"""Sweeps as submitit jobs (geofact.ops.cluster), with submitit's local executor: real processes."""

import json
import signal
import threading
import time

import pytest

from geofact.settings import EXECUTOR_ENV, EXECUTOR_OPTIONS_ENV
from geofact.ops.cluster import executor_from_env, make_executor, parse_options
from geofact.training.config import TrainConfig
from geofact.training.sweep import groups_dir, run_sweep

from tests.training.test_resume import outcome

pytest.importorskip("submitit")
RUNS = [TrainConfig(N=32, R=R, d=8, batch_size=32, max_steps=60, lr=1e-2, seed=s) for R in (1, 2) for s in (0, 1)]
LONG = [TrainConfig(N=64, R=R, d=16, batch_size=64, max_steps=5000, lr=1e-2, seed=s, loss_threshold=1e-3)
        for R in (1, 2) for s in (0, 1)]


class Recording:
    """A submitit executor that keeps the jobs it submits, so a test can kill one."""

    def __init__(self, executor) -> None:
        self.executor, self.jobs = executor, []

    def submit(self, fn, *args):
        job = self.executor.submit(fn, *args)
        self.jobs.append(job)
        return job


def test_each_group_is_a_job_and_its_records_are_those_of_local_training(tmp_path):
    executor = Recording(make_executor("local", tmp_path / "jobs"))
    on_jobs = run_sweep(RUNS, tmp_path / "cache", progress=False, group_size=2, executor=executor)
    here = run_sweep(RUNS, tmp_path / "here", progress=False, group_size=2, workers=1)
    assert len(executor.jobs) == 2  # two stacked groups of two runs, one job each
    for a, b in zip(on_jobs, here):
        assert a["config"] == b["config"] and a["steps"] == b["steps"] and a["group_size"] == 2
        assert a["final_loss"] == pytest.approx(b["final_loss"], rel=1e-4)  # threads may differ: rounding only
    again = Recording(make_executor("local", tmp_path / "jobs"))
    assert run_sweep(RUNS, tmp_path / "cache", progress=False, executor=again) == on_jobs and again.jobs == []  # cached


def test_a_killed_job_leaves_its_group_checkpointed_and_the_sweep_resumes_it(tmp_path, monkeypatch):
    monkeypatch.setenv("GEOFACT_THREADS", "1")  # the jobs inherit it: the reference and the resumed group round alike
    run_sweep(LONG, tmp_path / "ref", progress=False, executor=make_executor("local", tmp_path / "jobs"), checkpoint_every=0)
    executor = Recording(make_executor("local", tmp_path / "jobs"))
    failure = []

    def sweep() -> None:
        try:
            run_sweep(LONG, tmp_path / "cut", progress=False, executor=executor, checkpoint_every=0)
        except Exception as exc:  # noqa: BLE001 - the killed job's error is what the test expects
            failure.append(exc)

    thread = threading.Thread(target=sweep)
    thread.start()
    deadline = time.monotonic() + 120
    while not list(groups_dir(tmp_path / "cut").glob("*.npz")) and time.monotonic() < deadline:
        time.sleep(0.05)
    (job,) = executor.jobs
    job._process.send_signal(signal.SIGKILL)  # the node went away: no cleanup in the job
    assert list(groups_dir(tmp_path / "cut").glob("*.npz"))  # it died mid-group, leaving the group's state
    thread.join(timeout=300)
    assert not thread.is_alive()
    if failure:  # the sweep said the job died; otherwise submitit requeued it (as SLURM requeues a preempted job)
        run_sweep(LONG, tmp_path / "cut", progress=False, executor=make_executor("local", tmp_path / "jobs"))
    assert outcome(tmp_path / "cut") == outcome(tmp_path / "ref")  # resumed from the state: the records of an uninterrupted group
    assert not list(groups_dir(tmp_path / "cut").glob("*"))


def test_the_executor_comes_from_the_environment_and_bad_settings_are_clear(tmp_path, monkeypatch):
    assert executor_from_env(tmp_path) is None
    monkeypatch.setenv(EXECUTOR_ENV, "local")
    monkeypatch.setenv(EXECUTOR_OPTIONS_ENV, json.dumps({"timeout_min": 5}))
    assert type(executor_from_env(tmp_path)).__name__ == "LocalExecutor"
    monkeypatch.setenv(EXECUTOR_OPTIONS_ENV, "[1]")
    with pytest.raises(ValueError, match="must be a JSON object"):
        executor_from_env(tmp_path)
    with pytest.raises(ValueError, match="executor must be one of"):
        make_executor("pbs", tmp_path)
    assert parse_options(["slurm_partition=gpu", "timeout_min=120", "gpus_per_node=1"]) == \
        {"slurm_partition": "gpu", "timeout_min": 120, "gpus_per_node": 1}
    with pytest.raises(ValueError, match="key=value"):
        parse_options(["gpu"])
