"""`geofact run`: execute notebooks with papermill into the book, with provenance.

For each notebook the runner

1. reads notebooks/<name>.py (jupytext percent format) and the parameters its `parameters` cell
   declares, and takes from the profile only those (see `geofact.pipeline.profiles`; the same
   function serves `geofact compute`, geofact.pipeline.script);
2. executes it with papermill, the kernel told where to write its results (GEOFACT_RESULTS_PATH);
   a final probe cell lists the geofact modules the kernel imported, so that staleness is judged
   on exactly the code the page depends on;
3. on success writes book/<name>.ipynb with the parameters and injected cells hidden, progress widgets
   dropped, a provenance box under the title, and the provenance in the notebook metadata (`geofact`), and writes
   results/<profile>/<name>.json with the same provenance;
4. on failure stops with an error naming the notebook and the cell, keeping the failed notebook
   under .geofact/failed/ for inspection; the book is left untouched.

With `--jobs` > 1 the mechanism pages' second grid (`trajectory_grid`, geofact.training.grid.ladder_grids)
trains as a unit of its own from the start, beside exp-capacity, instead of inside the first mechanism
page after it: the pages that follow no longer queue behind its 37 minutes of training (measured from a
fresh clone: with the grid inside the page, the last 14 minutes of make book ran one unit on one core).
The mechanism pages form a unit that starts once exp-capacity (which trains the capacity grid they also
read) and the second grid are done (`split_for_second_grid`); until then a worker done with one of them
takes other units instead of waiting (on 2026-11-28 exp-capacity ended 15 minutes before the second grid,
and its worker waited).

The reproduction-status page is regenerated after every run. The steps are in their own modules:
executing one page (`execute`), its verdicts section and ledger check (`verdicts`), which pages may
run side by side (`units`); this module is the pool of worker processes and the environment they
inherit, set for the run and restored after it.

With a time budget (`geofact run --budget S`) no page starts after S seconds, and a page whose
training reaches the deadline checkpoints what it has in flight (geofact.training.resume) and stops;
the pages left unfinished are named, and the same command again resumes them from the run cache.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm import tqdm

from geofact.pipeline.execute import PageInterrupted, RunRecord, run_notebook, scoped_environ
from geofact.pipeline.project import Project
from geofact.pipeline.script import RunSettings
from geofact.pipeline.stability import ANOTHER_CPU, check_another_cpu, check_effective, perturbation_environ
from geofact.pipeline.status import write_status_page
from geofact.pipeline.units import plan_units
from geofact.pipeline.verdicts import NotebookError
from geofact.processes import PAGES_AT_ONCE_ENV, die_with_parent, usable_cores
from geofact.settings import DEADLINE_ENV, EXECUTOR_ENV, EXECUTOR_OPTIONS_ENV, RECORDS_ONLY_ENV, past_deadline
from geofact.ops.cluster import make_executor

THREADS_ENV = "GEOFACT_THREADS"  # geofact.device.THREADS_ENV, named here: importing it brings torch
THREAD_ENVS = (THREADS_ENV, "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


class RunUnfinished(RuntimeError):
    """Pages were left unfinished (see PageInterrupted); the others were executed."""

    def __init__(self, done: list[str], unfinished: list[tuple[str, str]]) -> None:
        self.done, self.unfinished = done, [name for name, _ in unfinished]
        super().__init__(f"{len(done)} page(s) executed ({', '.join(done) or 'none'}); unfinished: "
                         + "; ".join(f"{name} ({why})" for name, why in unfinished) + ". "
                         "Past a time budget, their finished training is cached and the groups in flight are "
                         "checkpointed: run the same command again to resume. Executed from records alone "
                         "(--records-only), a page whose records are missing must run where the weights are.")


SECOND_GRID_UNIT = "(the mechanism pages' second grid)"  # a unit that is no page: see the module docstring


@dataclass(frozen=True)
class Sharing:
    """How the units of one `run --jobs J` share the machine, passed to every worker process. Each page
    starts with the cores divided among the units then left (pages started together on all the cores
    would make their threads and sweep workers wait on each other: measured here, four single-thread
    trainers on two cores spent 5-11% more CPU each than two), so a page that starts once the other
    workers have nothing left to run gets them all."""

    cores: int
    jobs: int  # worker processes
    units: int
    finished: Any  # a manager's dict: {index of a unit: True} once it is done
    workers: Any  # a manager's dict: {index of a unit: pid of the worker process running it}
    second_grid: tuple[str, Any, int] | None = None  # (page, a manager's Event, index of its unit): see _run_unit

    def pages_at_once(self) -> int:
        return max(1, min(self.jobs, self.units - len(self.finished)))

    def environ(self) -> dict[str, str]:
        """A page's kernel runs on its share of the cores, and its sweeps start as many single-thread
        workers (geofact.training.sweep.cpu_workers)."""
        at_once = self.pages_at_once()
        return {**{key: str(max(1, self.cores // at_once)) for key in THREAD_ENVS}, PAGES_AT_ONCE_ENV: str(at_once)}


def _run_unit(root: str, index: int, names: list[str], settings: RunSettings,
              sharing: Sharing) -> tuple[list[RunRecord], list[tuple[str, str]]]:
    """Execute one unit's pages in turn (in a worker process of `run`), each on its share of the cores
    (`Sharing`). The unit [SECOND_GRID_UNIT] trains the second grid of `sharing.second_grid`'s page and
    then sets its event, whatever happened (a failure is the page's to report: it trains what is
    missing itself); the unit holding that page waits for the event before executing it."""
    project = Project(Path(root))
    sharing.workers[index] = os.getpid()
    try:
        if names != [SECOND_GRID_UNIT]:
            return _run_pages(project, names, settings, sharing=sharing)
        page, ready, _ = sharing.second_grid
        try:
            with scoped_environ(sharing.environ()):
                _train_second_grid(project, page, settings)
        except Exception as exc:
            tqdm.write(f"  {SECOND_GRID_UNIT}: {type(exc).__name__}: {exc} ({page} trains what is missing)")
        finally:
            ready.set()
        return [], []
    finally:
        sharing.finished[index] = True


def second_grid_page(project: Project, units: list[list[str]], settings: RunSettings) -> str | None:
    """The first page of a unit of several (the capacity grid's pages) given a second grid by the
    profile (a `trajectory_grid` that is not None), or None."""
    grid_pages = (name for unit in units if len(unit) > 1 for name in unit)
    return next((name for name in grid_pages if settings.parameters(project, name).get("trajectory_grid") is not None), None)


def _train_second_grid(project: Project, page: str, settings: RunSettings) -> None:
    """Train the runs of the second grid `page` declares (and its spike study, `spike_second`), as the page would,
    in a process of its own (geofact.analysis.second_grid): the pipeline never imports a model."""
    params = settings.parameters(project, page)
    cache = Path(params["cache_dir"]) if params.get("cache_dir") else project.runs_dir
    spec = {"trajectory_grid": params["trajectory_grid"], "precision": params.get("precision"), "cache": str(cache),
            "device": params.get("device", settings.device),
            **{key: params.get(key) for key in ("spike_second", "spike_steps", "spike_keep_every")}}
    subprocess.run([sys.executable, "-m", "geofact.analysis.second_grid", json.dumps(spec)], cwd=project.root, check=True)


class SecondGridLost(RuntimeError):
    """The worker training the second grid died (killed, or out of memory) before it was done."""


SECOND_GRID_POLL_S = 5.0  # how often a page waiting on the second grid looks whether its worker is still alive


def process_alive(pid: int) -> bool:
    """Whether process `pid` is running (a zombie, dead but not yet reaped by its parent, is not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    stat = Path(f"/proc/{pid}/stat")
    try:  # Linux: the state follows the command's closing parenthesis
        return stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def wait_for_second_grid(sharing: Sharing, poll_s: float = SECOND_GRID_POLL_S) -> None:
    """Wait until the second grid's unit has set its event; raise SecondGridLost as soon as the worker
    running that unit is gone without setting it (a wait on that event alone would never end)."""
    _, ready, unit = sharing.second_grid
    while not ready.wait(poll_s):
        pid = sharing.workers.get(unit)
        if pid is not None and not process_alive(pid) and not ready.is_set():
            raise SecondGridLost(f"the worker training {SECOND_GRID_UNIT} (pid {pid}) died before it was done; what it "
                                 "trained is cached: run the same command again to resume")


def _run_pages(project: Project, names: list[str], settings: RunSettings, bar=None,
               sharing: Sharing | None = None) -> tuple[list[RunRecord], list[tuple[str, str]]]:
    """Execute pages in turn: (records of those executed, (name, why) of those left unfinished); with
    `sharing`, each on its share of the cores, and the second grid's page once that grid is trained."""
    records, unfinished = [], []
    for name in names:
        if sharing is not None and sharing.second_grid is not None and name == sharing.second_grid[0]:
            wait_for_second_grid(sharing)
        if past_deadline():
            unfinished.append((name, "not started: the time budget was spent"))
            continue
        try:
            with scoped_environ(sharing.environ() if sharing is not None else {}):
                records.append(_run_one(project, name, settings))
        except PageInterrupted as exc:
            tqdm.write(f"  {name}: left unfinished: {exc}")
            unfinished.append((name, str(exc)))
        if bar is not None:
            bar.update()
    return records, unfinished


def _run_one(project: Project, name: str, settings: RunSettings) -> RunRecord:
    try:
        record = run_notebook(project, name, settings)
    except NotebookError:
        raise
    except Exception as exc:  # anything else still has to say which notebook it came from
        raise NotebookError(f"notebook {name!r} at profile {settings.profile.name!r}: {type(exc).__name__}: {exc}") from exc
    tqdm.write(f"  {name}: {record.wall_time_s:.1f} s")
    return record


def run(project: Project, names: list[str] | None, profile: str, device: str, jobs: int = 1,
        budget: float | None = None, records_only: bool = False, executor: str | None = None,
        executor_options: dict | None = None, precision: str | None = None, rounding: str | None = None) -> list[RunRecord]:
    """Run notebooks (all when `names` is empty), then regenerate the status page.

    With `jobs` > 1, that many pages execute at once (see plan_units for which may), each in its own
    process and kernel with the cores shared among them: the serial parts of one page (analyses,
    model loading, a sweep's last chunk) then overlap another page's training. A failed page stops
    the run once the pages executing beside it have finished; the status page is then left as it was.

    `budget` (seconds) sets the deadline of a time budget for this run and everything it starts (see
    the module docstring); pages left unfinished raise `RunUnfinished` after the status page is
    regenerated from the pages that did execute. `records_only` executes the pages from the cached
    records alone (geofact.ops.pack): a page that would train or read weights is left unfinished instead.
    `executor` ("local" or "slurm", with submitit `executor_options`) trains every sweep's groups as
    submitit jobs (geofact.ops.cluster). `precision` is the policy passed to pages that declare it
    (geofact.precision; None: the device's default). `rounding` names a perturbation of the matmul
    kernels (geofact.pipeline.stability.PERTURBATIONS): the pages train into a cache of their own and write
    their results beside the book's, whose verdicts they test; the book's pages are left as they are.
    """
    if not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"jobs must be an integer >= 1, got {jobs!r}")
    if budget is not None and not budget > 0:
        raise ValueError(f"budget must be a number of seconds > 0, got {budget!r}")
    names = list(dict.fromkeys(names or project.notebooks()))  # a page named twice runs once
    for n in names:
        project.source(n)  # fail on a typo before anything runs
    settings = RunSettings.resolve(project, profile, device, precision, rounding)  # once: a bad profile or device fails here
    inherited = {}  # what the kernels and their sweep workers inherit, for this run only
    if rounding is not None:
        if device.split(":")[0] != "cpu":  # MKL's setting changes no kernel of an accelerator: every verdict would stay
            raise ValueError(f"rounding perturbs the CPU's matmul kernels; device must be 'cpu' with it, got {device!r}")
        check_effective(rounding)  # before any page: a perturbation this BLAS ignores would call every verdict stable
        if rounding == ANOTHER_CPU:  # the runs must train here: a run's record does not say which CPU trained it
            if records_only or executor is not None:
                raise ValueError(f"rounding {ANOTHER_CPU!r} trains the pages' runs on this machine's CPU; "
                                 "--records-only and --executor would take them from elsewhere")
            check_another_cpu(project, profile, names)
        inherited |= perturbation_environ(rounding)
    if budget is not None:
        inherited[DEADLINE_ENV] = str(time.time() + budget)
    if records_only:
        inherited[RECORDS_ONLY_ENV] = "1"
    if executor is not None:
        make_executor(executor, project.runs_dir / "jobs", executor_options)  # a bad kind or option fails here, not in a page
        inherited |= {EXECUTOR_ENV: executor, EXECUTOR_OPTIONS_ENV: json.dumps(executor_options or {})}
    with scoped_environ(inherited):
        records, unfinished = _execute(project, names, settings, jobs)
    write_status_page(project)
    if unfinished:
        raise RunUnfinished([r.notebook for r in records], sorted(unfinished, key=lambda u: names.index(u[0])))
    return records


def split_for_second_grid(units: list[list[str]], page: str | None) -> tuple[list[list[str]], dict[int, set[int]]]:
    """The units of `geofact run --jobs` and which units each must wait for ({index: indices}). With a second
    grid (`page`, the first page that reads it, in the capacity grid's unit), its unit comes first and the
    capacity grid's unit is cut before `page`: the pages from `page` on are a unit of their own, right after
    the pages before it, started once those and the second grid are done."""
    if page is None:
        return units, {}
    shared = next(i for i, unit in enumerate(units) if page in unit)
    cut = units[shared].index(page)
    before, after = units[shared][:cut], units[shared][cut:]
    if not before:
        out = [[SECOND_GRID_UNIT], *units]
        return out, {shared + 1: {0}}
    out = [[SECOND_GRID_UNIT], *units[:shared], before, after, *units[shared + 1:]]
    return out, {shared + 2: {0, shared + 1}}


def ready_units(pending: list[int], deps: dict[int, set[int]], finished: set[int], free: int) -> list[int]:
    """Up to `free` of the `pending` units (in their order) whose units to wait for are all `finished`."""
    return [i for i in pending if deps.get(i, set()) <= finished][:max(0, free)]


def _execute(project: Project, names: list[str], settings: RunSettings, jobs: int
             ) -> tuple[list[RunRecord], list[tuple[str, str]]]:
    """The pages executed in this process (jobs = 1) or in `jobs` worker processes, unit by unit."""
    records: list[RunRecord] = []
    unfinished: list[tuple[str, str]] = []
    bar = tqdm(total=len(names), desc=f"geofact run ({settings.profile.name})", unit="notebook")
    if jobs == 1:
        records, unfinished = _run_pages(project, names, settings, bar)
    else:
        units = plan_units(project, names, settings.profile.name)
        page = None if os.environ.get(RECORDS_ONLY_ENV) else second_grid_page(project, units, settings)
        units, deps = split_for_second_grid(units, page)  # the second grid first: it starts beside the longest unit
        at_once = min(jobs, len(units))
        context = multiprocessing.get_context("spawn")
        with context.Manager() as manager, ProcessPoolExecutor(max_workers=at_once, mp_context=context,
                                                               initializer=die_with_parent, initargs=(os.getpid(),)) as pool:
            sharing = Sharing(usable_cores(), at_once, len(units), manager.dict(), manager.dict(),
                              (page, manager.Event(), 0) if page else None)
            pending, finished, futures = list(range(len(units))), set(), {}
            try:
                while pending or futures:
                    for i in ready_units(pending, deps, finished, at_once - len(futures)):
                        pending.remove(i)
                        futures[pool.submit(_run_unit, str(project.root), i, units[i], settings, sharing)] = i
                    if not futures:  # (split_for_second_grid's waits always end: a unit it waits for has none)
                        raise NotebookError(f"units {pending} wait for units that never run")
                    completed, _ = wait(futures, return_when=FIRST_COMPLETED)
                    for future in completed:
                        finished.add(futures.pop(future))
                        done, left = future.result()
                        records, unfinished = records + done, unfinished + left
                        bar.update(len(records) + len(unfinished) - bar.n)
            except BrokenProcessPool as exc:
                pool.shutdown(wait=True, cancel_futures=True)
                raise NotebookError("a worker process of `geofact run` died (killed, or out of memory) before its pages were "
                                    "done; every run it finished is cached and every page it finished is written: run the same "
                                    "command again to resume") from exc
            except BaseException:
                pool.shutdown(wait=True, cancel_futures=True)
                raise
        records.sort(key=lambda r: names.index(r.notebook))
    bar.close()
    return records, unfinished
