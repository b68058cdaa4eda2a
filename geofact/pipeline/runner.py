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

The reproduction-status page is regenerated after every run.

With a time budget (`geofact run --budget S`) no page starts after S seconds, and a page whose
training reaches the deadline checkpoints what it has in flight (geofact.training.resume) and stops;
the pages left unfinished are named, and the same command again resumes them from the run cache.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import re
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import nbformat
import papermill
from tqdm import tqdm

from geofact.device import THREADS_ENV, describe_device
from geofact.training.precision import check_precision
from geofact.pipeline.ledger import Claim, load_ledger, population_mismatches, verdict_label
from geofact.pipeline.profiles import load_profile
from geofact.pipeline.project import Project
from geofact.pipeline.script import UNFINISHED_ERRORS, expected_parameters, notebook_parameters
from geofact.processes import PAGES_AT_ONCE_ENV, die_with_parent, usable_cores
from geofact.provenance import environment, git_commit, module_hashes, sha256_file
from geofact.settings import DEADLINE_ENV, EXECUTOR_ENV, EXECUTOR_OPTIONS_ENV, RECORDS_ONLY_ENV, RESULTS_PATH_ENV, past_deadline
from geofact.training.cluster import make_executor

PROBE_TAG = "geofact-probe"
PROBE_SOURCE = (  # the geofact modules the kernel imported, and where the cached records it read were made
    "import json as _json, sys as _sys\n"
    "_seen = getattr(_sys.modules.get('geofact.store'), 'SEEN', {})\n"
    "print(_json.dumps({'modules': sorted(m for m in _sys.modules if m == 'geofact' or m.startswith('geofact.')),\n"
    "                   'records': {k: sorted(v) for k, v in _seen.items()}}))"
)
HIDDEN_TAGS = ("parameters", "injected-parameters")
# Experiment pages lead with their results, so their code starts folded (one click shows it); theory
# pages keep the code open beside the proof it implements.
FOLDED_CODE_PREFIX = "exp-"
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
KERNEL_NAME = "geofact-runner"
PAGE_KERNELSPEC = {"name": "python3", "display_name": "Python 3", "language": "python"}  # what readers' Jupyter has


class NotebookError(RuntimeError):
    """A notebook failed; the message names the notebook and the cell."""


class PageInterrupted(NotebookError):
    """A page left for later: its training met the time budget's deadline (BudgetSpent), or, executed from
    records alone, it needed work that is not among them (RecordMissing)."""


class RunUnfinished(RuntimeError):
    """Pages were left unfinished (see PageInterrupted); the others were executed."""

    def __init__(self, done: list[str], unfinished: list[tuple[str, str]]) -> None:
        self.done, self.unfinished = done, [name for name, _ in unfinished]
        super().__init__(f"{len(done)} page(s) executed ({', '.join(done) or 'none'}); unfinished: "
                         + "; ".join(f"{name} ({why})" for name, why in unfinished) + ". "
                         f"Past a time budget, their finished training is cached and the groups in flight are "
                         f"checkpointed: run the same command again to resume. Executed from records alone "
                         f"(--records-only), a page whose records are missing must run where the weights are.")


@dataclass(frozen=True)
class RunRecord:
    notebook: str
    profile: str
    wall_time_s: float
    page: Path
    results: Path


def _provenance_markdown(meta: dict[str, Any]) -> str:
    params = ", ".join(f"`{k}={v!r}`" for k, v in sorted(meta["parameters"].items())) or "none"
    rows = [
        ("profile", f"`{meta['profile']}`"),
        ("parameters", params),
        ("git commit", f"`{meta['git_commit']}`"),
        ("device", meta["device"]),
    ]
    if "precision" in meta["parameters"]:  # a page that trains: its matmul policy (geofact.training.precision)
        rows.append(("training precision", f"`{meta['parameters']['precision']}`"))
    made = meta.get("records_made_on", {})
    if made.get("device"):  # the page read cached training and analysis records: where they were computed
        rows += [("cached records made on", "; ".join(made["device"])),
                 ("cached records made at commits", ", ".join(f"`{c[:12]}`" for c in made.get("git_commit", [])))]
    env = meta["environment"]
    rows += [("torch", f"{env['torch']} (python {env['python']}, numpy {env['numpy']})"),
             ("results", f"`results/{meta['profile']}/{meta['notebook']}.json`")]
    return (
        ":::{admonition} Provenance\n:class: note\n\n"
        f"Executed by `geofact run --profile {meta['profile']}` on {meta['executed_at']}, "
        f"wall time {meta['wall_time_s']:.1f} s.\n\n"
        "| | |\n|---|---|\n" + "".join(f"| {k} | {v} |\n" for k, v in rows) + ":::\n"
    )


def _finish_page(nb: nbformat.NotebookNode, meta: dict[str, Any]) -> list[str]:
    """Hide parameter cells, drop the probe, note where the cached records the page read were made (in
    `meta`), insert the provenance box; returns the imported modules."""
    probe = [c for c in nb.cells if PROBE_TAG in c.metadata.get("tags", [])]
    if len(probe) != 1:
        raise NotebookError("lost its provenance probe cell")
    stdout = "".join(o.get("text", "") for o in probe[0].outputs if o.get("name") == "stdout")
    probed = json.loads(stdout.strip().splitlines()[-1])
    if probed["records"].get("device"):
        meta["records_made_on"] = probed["records"]
    nb.cells.remove(probe[0])
    # The saved widget state would make the book load require.js and the widget manager from CDNs, for
    # progress bars that are gone anyway.
    nb.metadata.pop("widgets", None)
    for cell in nb.cells:
        if cell.cell_type == "code":  # widgets are live progress bars (tqdm.auto in libraries): nothing a static page can show
            cell.outputs = [o for o in cell.outputs if WIDGET_MIME not in o.get("data", {})]
        tags = cell.metadata.setdefault("tags", [])
        if any(t in tags for t in HIDDEN_TAGS) and "remove-cell" not in tags:
            tags.append("remove-cell")
        elif cell.cell_type == "code" and meta["notebook"].startswith(FOLDED_CODE_PREFIX) and "hide-input" not in tags:
            tags.append("hide-input")
    first_md = next((i for i, c in enumerate(nb.cells) if c.cell_type == "markdown"), -1)
    nb.cells.insert(first_md + 1, nbformat.v4.new_markdown_cell(_provenance_markdown(meta)))
    return probed["modules"]


def _pin_kernel(tmp: Path) -> str:
    """A kernelspec running this very interpreter, first on JUPYTER_PATH; returns its name.

    Provenance (torch version, modules) is read in this process, so the kernel must be the same
    interpreter; a user-wide `python3` kernelspec pointing elsewhere would otherwise win.
    """
    spec = tmp / "jupyter" / "kernels" / KERNEL_NAME
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": f"geofact ({sys.executable})",
        "language": "python",
    }))
    os.environ["JUPYTER_PATH"] = os.pathsep.join(filter(None, [str(tmp / "jupyter"), os.environ.get("JUPYTER_PATH")]))
    return KERNEL_NAME


def run_notebook(project: Project, name: str, profile: str, device: str, precision: str | None = None) -> RunRecord:
    nb = project.read_notebook(name)
    params = expected_parameters(project, name, profile, device, precision)
    nb.metadata["kernelspec"] = dict(PAGE_KERNELSPEC)
    nb.metadata.setdefault("language_info", {"name": "python"})
    nb.cells.append(nbformat.v4.new_code_cell(PROBE_SOURCE, metadata={"tags": [PROBE_TAG]}))
    commit = git_commit(project.root)

    with tempfile.TemporaryDirectory() as tmp:
        source, executed, results_tmp = (Path(tmp) / f for f in ("in.ipynb", "out.ipynb", "results.json"))
        nbformat.write(nb, source)
        saved_env = {k: os.environ.get(k) for k in (RESULTS_PATH_ENV, "JUPYTER_PATH")}
        os.environ[RESULTS_PATH_ENV] = str(results_tmp)
        kernel = _pin_kernel(Path(tmp))
        started = time.perf_counter()
        try:
            papermill.execute_notebook(
                str(source), str(executed), parameters=params, kernel_name=kernel,
                progress_bar=False, cwd=str(project.notebooks_dir),
            )
        except papermill.PapermillExecutionError as exc:
            failed = project.root / ".geofact" / "failed" / f"{name}.ipynb"
            failed.parent.mkdir(parents=True, exist_ok=True)
            if executed.exists():
                failed.write_bytes(executed.read_bytes())
            if exc.ename in UNFINISHED_ERRORS:
                raise PageInterrupted(f"{exc.ename}: {exc.evalue}") from None
            raise NotebookError(
                f"notebook {name!r} failed in cell {exc.cell_index} (execution count {exc.exec_count}) "
                f"at profile {profile!r}: {exc.ename}: {exc.evalue}\n  executed copy: {failed}"
            ) from None
        finally:
            for key, value in saved_env.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
        wall = time.perf_counter() - started
        if not results_tmp.exists():
            raise NotebookError(f"notebook {name!r} ran but never called Report.save(): no results were written")
        report = json.loads(results_tmp.read_text())
        out = nbformat.read(executed, as_version=4)

    meta: dict[str, Any] = {
        "notebook": name,
        "profile": profile,
        "parameters": params,
        "device": describe_device(device),
        "device_arg": device,
        **({"precision_arg": precision} if precision is not None else {}),
        "git_commit": commit,
        "environment": environment(),
        "executed_at": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "wall_time_s": round(wall, 2),
        "wall_time_max_s": round(max(wall, page_cost(project, name, profile)), 2),  # what plan_units schedules by
        "notebook_sha256": sha256_file(project.source(name)),
    }
    modules = _finish_page(out, meta)
    out.metadata["kernelspec"] = dict(PAGE_KERNELSPEC)  # the pinned runner kernel exists only during the run
    meta["modules"] = module_hashes(modules)
    claims = [c for c in load_ledger(project.ledger_path) if c.notebook == name]  # the page's claims, in ledger order
    _check_claims(name, claims, report["claims"])
    out.cells.append(nbformat.v4.new_markdown_cell(verdicts_markdown(name, profile, claims, report["claims"])))
    out.metadata["geofact"] = meta

    page = project.page(name)
    page.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(out, page)
    results = project.results(profile, name)
    results.parent.mkdir(parents=True, exist_ok=True)
    results.write_text(json.dumps({**report, "provenance": meta}, indent=1, sort_keys=True) + "\n")
    return RunRecord(name, profile, wall, page, results)


def _plain(text: str) -> str:
    """Measured strings and notes as literal text in MyST (no emphasis, math or roles from their symbols)."""
    return re.sub(r"([\\`*_$\[\]<>{}|])", r"\\\1", " ".join(str(text).split()))


def verdicts_markdown(name: str, profile: str, claims: list[Claim], reported: dict[str, Any]) -> str:
    """The page's closing section: each of its claims with the verdict this run computed, what was
    measured and the rule that turned it into the verdict, each under its own anchor."""
    lines = [f"(verdicts-{name})=", "## Verdicts at a glance", "",
             f"What this run (profile `{profile}`) decided for each claim this page tests; the code above computes "
             "every one. The {doc}`status page <reproduction-status>` sets them beside the rest of the paper "
             "{cite}`ravfogel-geometric`.", ""]
    for claim in claims:
        entry = reported[claim.id]
        measured = f" {_plain(entry['measured'])}." if entry.get("measured") else ""
        rule = f" *Rule:* {_plain(entry['note'])}." if entry.get("note") else ""
        lines += [f"({verdict_label(claim.id)})=",
                  f"**`{claim.id}`** ({_plain(claim.paper)}): **{entry['verdict']}**.{measured}{rule}", ""]
    return "\n".join(lines)


def _check_claims(name: str, claims: list[Claim], reported: dict[str, Any]) -> None:
    expected = {c.id for c in claims}
    unknown, missing = sorted(set(reported) - expected), sorted(expected - set(reported))
    if unknown or missing:
        raise NotebookError(
            f"notebook {name!r} reported claims not in claims.yaml for it: {unknown}; "
            f"and did not report ledger claims: {missing}"
        )
    problems = population_mismatches(claims, reported)
    if problems:
        raise NotebookError(f"notebook {name!r}: " + "; ".join(problems))


SHARED_RUNS_PARAMETERS = ("capacity_grid",)  # pages declaring one read the same cached runs (geofact.training.grid)
THREAD_ENVS = (THREADS_ENV, "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def page_cost(project: Project, name: str, profile: str) -> float:
    """The longest the page has taken at `profile`, in seconds (its book/ metadata), 0 when unknown: an
    execution from a warm run cache takes seconds, so the last wall time alone would understate it."""
    try:
        meta = nbformat.read(project.page(name), as_version=4).metadata.get("geofact", {})
    except (OSError, ValueError):
        return 0.0
    if meta.get("profile") != profile:
        return 0.0
    return float(meta.get("wall_time_max_s", meta.get("wall_time_s", 0.0)))


def plan_units(project: Project, names: list[str], profile: str) -> list[list[str]]:
    """`names` as units that may execute side by side, longest first.

    Pages that declare a parameter of SHARED_RUNS_PARAMETERS train and read the same cached runs
    (exp-capacity trains the capacity grid, the mechanism pages analyse it): they form one unit,
    executed in the order given, so that no two of them train the same runs at once. Every other page
    is a unit of its own. A unit's length is the sum of its pages' `page_cost`; units of unknown length
    go last (the long chain of grid pages must not wait behind them).
    """
    def declared(name: str) -> set[str]:
        try:
            return notebook_parameters(project, name)
        except Exception as exc:  # the pages are planned before any runs: the error must still name one
            raise NotebookError(f"notebook {name!r}: {type(exc).__name__}: {exc}") from exc

    shared = [n for n in names if declared(n) & set(SHARED_RUNS_PARAMETERS)]
    units = ([shared] if shared else []) + [[n] for n in names if n not in shared]
    length = {tuple(u): sum(page_cost(project, n, profile) for n in u) for u in units}
    return sorted(units, key=lambda u: -length[tuple(u)])


def _run_unit(root: str, names: list[str], profile: str, device: str, precision: str | None, threads: int,
              at_once: int) -> tuple[list[RunRecord], list[tuple[str, str]]]:
    """Execute one unit's pages in turn (in a worker process of `run`), each kernel on `threads` threads:
    side by side, kernels that each used every core would make their threads wait on each other (a
    page's sweeps still start one single-thread worker per core, so that a page training alone keeps
    every core busy). Kernels learn how many pages share the machine (a timing taken on a page says so)."""
    for key in THREAD_ENVS:
        os.environ[key] = str(threads)
    os.environ[PAGES_AT_ONCE_ENV] = str(at_once)
    return _run_pages(Project(Path(root)), names, profile, device, precision)


def _run_pages(project: Project, names: list[str], profile: str, device: str, precision: str | None,
               bar=None) -> tuple[list[RunRecord], list[tuple[str, str]]]:
    """Execute pages in turn: (records of those executed, (name, why) of those left unfinished)."""
    records, unfinished = [], []
    for name in names:
        if past_deadline():
            unfinished.append((name, "not started: the time budget was spent"))
            continue
        try:
            records.append(_run_one(project, name, profile, device, precision))
        except PageInterrupted as exc:
            tqdm.write(f"  {name}: left unfinished: {exc}")
            unfinished.append((name, str(exc)))
        if bar is not None:
            bar.update()
    return records, unfinished


def _run_one(project: Project, name: str, profile: str, device: str, precision: str | None) -> RunRecord:
    try:
        record = run_notebook(project, name, profile, device, precision)
    except NotebookError:
        raise
    except Exception as exc:  # anything else still has to say which notebook it came from
        raise NotebookError(f"notebook {name!r} at profile {profile!r}: {type(exc).__name__}: {exc}") from exc
    tqdm.write(f"  {name}: {record.wall_time_s:.1f} s")
    return record


def run(project: Project, names: list[str] | None, profile: str, device: str, jobs: int = 1,
        budget: float | None = None, records_only: bool = False, executor: str | None = None,
        executor_options: dict | None = None, precision: str | None = None) -> list[RunRecord]:
    """Run notebooks (all when `names` is empty), then regenerate the status page.

    With `jobs` > 1, that many pages execute at once (see plan_units for which may), each in its own
    process and kernel with the cores shared among them: the serial parts of one page (analyses,
    model loading, a sweep's last chunk) then overlap another page's training. A failed page stops
    the run once the pages executing beside it have finished; the status page is then left as it was.

    `budget` (seconds) sets the deadline of a time budget for this run and everything it starts (see
    the module docstring); pages left unfinished raise `RunUnfinished` after the status page is
    regenerated from the pages that did execute. `records_only` executes the pages from the cached
    records alone (geofact.pipeline.pack): a page that would train or read weights is left unfinished instead.
    `executor` ("local" or "slurm", with submitit `executor_options`) trains every sweep's groups as
    submitit jobs (geofact.training.cluster). `precision` is the policy passed to pages that declare it
    (geofact.training.precision; None: the device's default).
    """
    from geofact.pipeline.status import write_status_page

    if not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"jobs must be an integer >= 1, got {jobs!r}")
    if budget is not None and not budget > 0:
        raise ValueError(f"budget must be a number of seconds > 0, got {budget!r}")
    names = list(dict.fromkeys(names or project.notebooks()))  # a page named twice runs once
    for n in names:
        project.source(n)  # fail on a typo before anything runs
    load_profile(profile, project.profiles_dir)
    describe_device(device)
    if precision is not None:
        check_precision(precision, device)
    if budget is not None:  # kernels and their sweep workers inherit it
        os.environ[DEADLINE_ENV] = str(time.time() + budget)
    if records_only:
        os.environ[RECORDS_ONLY_ENV] = "1"
    if executor is not None:
        make_executor(executor, project.runs_dir / "jobs", executor_options)  # a bad kind or option fails here, not in a page
        os.environ[EXECUTOR_ENV], os.environ[EXECUTOR_OPTIONS_ENV] = executor, json.dumps(executor_options or {})
    records: list[RunRecord] = []
    unfinished: list[tuple[str, str]] = []
    bar = tqdm(total=len(names), desc=f"geofact run ({profile})", unit="notebook")
    if jobs == 1:
        records, unfinished = _run_pages(project, names, profile, device, precision, bar)
    else:
        units = plan_units(project, names, profile)
        cores = usable_cores()
        at_once = min(jobs, len(units))
        threads = max(1, cores // at_once)
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=at_once, mp_context=context, initializer=die_with_parent,
                                 initargs=(os.getpid(),)) as pool:
            futures = [pool.submit(_run_unit, str(project.root), u, profile, device, precision, threads, at_once) for u in units]
            try:
                for future in as_completed(futures):
                    done, left = future.result()
                    records, unfinished = records + done, unfinished + left
                    bar.update(len(records) + len(unfinished) - bar.n)
            except BaseException:
                pool.shutdown(wait=True, cancel_futures=True)
                raise
        records.sort(key=lambda r: names.index(r.notebook))
    bar.close()
    write_status_page(project)
    if unfinished:
        raise RunUnfinished([r.notebook for r in records], sorted(unfinished, key=lambda u: names.index(u[0])))
    return records
