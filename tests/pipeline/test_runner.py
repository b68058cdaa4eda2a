import json
import os

import nbformat
import pytest

from geofact.pipeline.project import Project

from geofact.pipeline.execute import PROBE_SOURCE, PROBE_TAG, WIDGET_MIME, _finish_page, kernel_config
from geofact.pipeline.runner import run
from geofact.pipeline.units import plan_units
from geofact.pipeline.script import notebook_parameters


def test_pages_of_the_capacity_grid_form_one_unit_in_order_and_longer_units_go_first(repo):
    names = repo.notebooks()
    units = plan_units(repo, names, "laptop")
    grid_pages = [n for n in names if "capacity_grid" in notebook_parameters(repo, n)]
    assert "exp-capacity" in grid_pages and len(grid_pages) >= 4
    assert grid_pages in units  # one unit, in the order given: exp-capacity trains the grid first
    assert sorted(n for u in units for n in u) == sorted(names)
    assert all(len(u) == 1 for u in units if u != grid_pages)


def test_units_go_longest_first_by_their_last_wall_time_and_unknown_ones_last(repo, tmp_path):
    project = Project(tmp_path)
    (tmp_path / "notebooks").symlink_to(repo.notebooks_dir)
    (tmp_path / "book").mkdir()
    for name, profile, seconds in [("exp-multihop", "laptop", 10.0), ("exp-nl-lm", "laptop", 30.0), ("thm-khop-cot", "paper", 99.0)]:
        meta = {"profile": profile, "wall_time_s": 1.0, "wall_time_max_s": seconds}  # last run from a warm cache
        page = nbformat.v4.new_notebook(metadata={"geofact": meta})
        nbformat.write(page, project.page(name))
    names = ["exp-multihop", "exp-nl-lm", "thm-khop-cot", "thm-khop-no-cot"]  # the last has no page at all
    assert plan_units(project, names, "laptop") == [["exp-nl-lm"], ["exp-multihop"], ["thm-khop-cot"], ["thm-khop-no-cot"]]


@pytest.mark.parametrize("jobs", [0, -1, 1.5])
def test_jobs_must_be_a_positive_integer(repo, jobs):
    with pytest.raises(ValueError, match="jobs must be an integer >= 1"):
        run(repo, ["thm-khop-cot"], "smoke", "cpu", jobs=jobs)


@pytest.mark.parametrize("elsewhere", [dict(records_only=True), dict(executor="local")])
def test_another_cpu_trains_its_runs_here(repo, elsewhere):
    # a run's record does not say which CPU trained it: records or another machine's jobs would not test this CPU
    with pytest.raises(ValueError, match="--records-only and --executor would take them from elsewhere"):
        run(repo, ["exp-nl-lm"], "paper", "cpu", rounding="another-cpu", **elsewhere)


def test_finishing_a_page_drops_progress_widgets_and_keeps_every_other_output():
    cell = nbformat.v4.new_code_cell("x = 1")
    widget = nbformat.v4.new_output("display_data", data={WIDGET_MIME: {"model_id": "0"}, "text/plain": "0%|   | 0/10"})
    text = nbformat.v4.new_output("stream", name="stdout", text="a result\n")
    cell.outputs = [widget, text]
    probe = nbformat.v4.new_code_cell(PROBE_SOURCE, metadata={"tags": [PROBE_TAG]})
    probe.outputs = [nbformat.v4.new_output("stream", name="stdout", text=json.dumps(
        {"modules": ["geofact"], "records": {"device": ["cuda:0 (NVIDIA H100)"], "git_commit": ["0123456789abcdef"]}}) + "\n")]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# Page"), cell, probe])
    meta = {"parameters": {}, "profile": "smoke", "executed_at": "now", "wall_time_s": 1.0, "git_commit": "abc",
            "device": "cpu", "environment": {"torch": "t", "python": "p", "numpy": "n"}, "notebook": "page"}
    assert _finish_page(nb, meta) == ["geofact"]
    assert nb.cells[2].outputs == [text]
    assert meta["records_made_on"]["device"] == ["cuda:0 (NVIDIA H100)"]  # where the cached records it read were made
    assert "| cached records made on | cuda:0 (NVIDIA H100) |" in nb.cells[1].source


def test_a_pages_kernel_talks_over_sockets_in_its_own_folder(tmp_path):
    """Two pages' kernels never pick the same socket: no TCP port, no name in a shared folder."""
    from jupyter_client.manager import AsyncKernelManager

    managers = [AsyncKernelManager(config=kernel_config(tmp_path / name)) for name in ("a", "b")]
    assert [km.transport for km in managers] == ["ipc", "ipc"]
    assert [km.ip for km in managers] == [str(tmp_path / "a" / "kernel"), str(tmp_path / "b" / "kernel")]
    managers[0].write_connection_file()
    sockets = json.loads(open(managers[0].connection_file).read())
    assert sockets["transport"] == "ipc" and sockets["ip"].startswith(str(tmp_path / "a"))
    managers[0].cleanup_connection_file()


def test_the_second_grid_trains_as_a_unit_of_its_own_in_a_pool_worker_and_then_releases_its_page(repo, tmp_path):
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from geofact.pipeline.runner import SECOND_GRID_UNIT, Sharing, _run_unit, second_grid_page
    from geofact.pipeline.script import RunSettings
    from geofact.training.grid import ladder_grids
    from geofact.training.sweep import load_result
    from geofact.training.variants import kept_jobs, second_study, variant_path

    project = Project(tmp_path)
    (tmp_path / "notebooks").symlink_to(repo.notebooks_dir)
    settings = RunSettings.resolve(project, "smoke", "cpu")
    units = plan_units(project, project.notebooks(), "smoke")
    page = second_grid_page(project, units, settings)
    shared = next(u for u in units if len(u) > 1)
    assert page in shared and shared.index(page) > 0  # after exp-capacity, which trains the capacity grid
    assert second_grid_page(project, [[n] for u in units for n in u], settings) is None  # no unit of pages, no wait
    context = multiprocessing.get_context("spawn")
    with context.Manager() as manager, ProcessPoolExecutor(1, mp_context=context) as pool:  # as `run` does
        sharing = Sharing(cores=2, jobs=2, units=3, finished=manager.dict(), workers=manager.dict(),
                          second_grid=(page, manager.Event(), 0))
        assert sharing.environ()["GEOFACT_PAGES_AT_ONCE"] == "2" and sharing.environ()["OMP_NUM_THREADS"] == "1"
        assert pool.submit(_run_unit, str(tmp_path), 0, [SECOND_GRID_UNIT], settings, sharing).result() == ([], [])
        assert sharing.second_grid[1].is_set() and dict(sharing.finished) == {0: True} and list(sharing.workers) == [0]
        sharing.finished[1] = True  # the other worker has nothing left to run: a page starting now gets every core
        assert sharing.environ()["GEOFACT_PAGES_AT_ONCE"] == "1" and sharing.environ()["OMP_NUM_THREADS"] == "2"
    params = settings.parameters(project, page)
    grids = ladder_grids(params["trajectory_grid"])
    configs = [c for grid in grids for c in grid.configs().values()]
    assert len(configs) >= 4 and all(load_result(project.runs_dir, c) is not None for c in configs)
    study = kept_jobs(*second_study(grids, params["spike_second"]), params["spike_steps"], params["spike_keep_every"])
    assert len(study) >= 6 and all(variant_path(project.runs_dir / "variants", *job).exists() for job in study)  # its spike study too


def test_a_page_waiting_on_the_second_grid_fails_clearly_when_its_worker_is_killed():
    """The wait watches the worker it waits for: killed with SIGKILL (nothing runs its `finally`, the event is
    never set), the waiting page gets a clear error within a poll or two instead of waiting for ever."""
    import multiprocessing
    import signal
    import time

    import pytest

    from geofact.pipeline.runner import SecondGridLost, Sharing, process_alive, wait_for_second_grid

    context = multiprocessing.get_context("spawn")
    with context.Manager() as manager:
        worker = context.Process(target=time.sleep, args=(60,))
        worker.start()
        sharing = Sharing(cores=2, jobs=2, units=2, finished=manager.dict(), workers=manager.dict({0: worker.pid}),
                          second_grid=("exp-readout", manager.Event(), 0))
        assert process_alive(worker.pid)
        os.kill(worker.pid, signal.SIGKILL)
        started = time.monotonic()
        with pytest.raises(SecondGridLost, match="died before it was done.*run the same command again"):
            wait_for_second_grid(sharing, poll_s=0.2)  # the dead worker is a zombie until joined: still seen as gone
        assert time.monotonic() - started < 5
        worker.join()
        sharing.second_grid[1].set()
        wait_for_second_grid(sharing, poll_s=0.2)  # set: returns at once, whoever ran it


def test_the_mechanism_pages_wait_for_exp_capacity_and_the_second_grid_and_no_worker_waits_meanwhile():
    from geofact.pipeline.runner import SECOND_GRID_UNIT, ready_units, split_for_second_grid

    shared = ["exp-capacity", "exp-readout", "exp-interventions", "exp-freeze-transfer"]
    units, deps = split_for_second_grid([shared, ["exp-multihop"], ["thm-khop-cot"]], "exp-readout")
    assert units == [[SECOND_GRID_UNIT], ["exp-capacity"], shared[1:], ["exp-multihop"], ["thm-khop-cot"]]
    assert deps == {2: {0, 1}}
    # two workers: the second grid and exp-capacity start; exp-capacity ends first, and its worker takes
    # exp-multihop, not the mechanism pages, which start once the second grid is done too
    assert ready_units([0, 1, 2, 3, 4], deps, set(), 2) == [0, 1]
    assert ready_units([2, 3, 4], deps, {1}, 1) == [3]
    assert ready_units([2, 4], deps, {0, 1}, 1) == [2]
    assert ready_units([2, 4], deps, {0, 1}, 0) == []
    # no second grid: the units as planned, none waiting; the page first in its unit: the unit waits for the grid
    assert split_for_second_grid([shared], None) == ([shared], {})
    assert split_for_second_grid([["exp-multihop"], shared[1:]], "exp-readout") == (
        [[SECOND_GRID_UNIT], ["exp-multihop"], shared[1:]], {2: {0}})


def test_the_runner_names_the_workers_thread_variable_as_the_device_module_does():
    from geofact.device import THREADS_ENV
    from geofact.pipeline.runner import THREADS_ENV as NAMED_HERE

    assert NAMED_HERE == THREADS_ENV  # named in the publisher, which never imports torch
