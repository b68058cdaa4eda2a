"""`geofact compute`: the compute side of pages (training, per-model analyses, the benchmark) into the
run cache's records, where there is no Jupyter: a GPU lease, with torch, numpy, scipy, scikit-learn,
matplotlib, pyyaml and tqdm and nothing else.

Each page runs as the plain script it is (geofact.pipeline.script), in a fresh interpreter per page,
from notebooks/ as `geofact run`'s kernels do, with the profile's parameters injected after its
parameters cell and figures drawn off screen (Agg); where IPython, myst-nb, jupytext or nbformat are
not installed, their stand-ins (geofact.pipeline.standins) make its display and glue calls no-ops. What it
leaves are the records under .geofact/runs/, which `geofact pack` carries home; there `geofact run
--records-only` executes the pages from them into the book. The claims a page computes are printed as
a preview and discarded.

With a time budget no page starts after the deadline, and a page whose training meets it checkpoints
and stops (geofact.training.resume): the command names the pages left unfinished (ComputeUnfinished),
and the same command again resumes from the cache. A page that finishes leaves a marker,
.geofact/computed/<profile>/<name>.json, keyed by what determines its records (the notebook, its
parameters, the device and geofact's source), so a resumed command does not execute it again.

The mechanism pages read the weights of every capacity-grid run at every checkpoint, and weights never
leave the lease, while the paper's grid trains for longer than one lease lasts. `grid_cells` (`--grid-R`,
`--grid-d`) runs them on some cells of the grid (geofact.training.grid.restriction): each trains
those cells' runs and caches their analyses, which travel as records; the page itself, on those cells
alone, leaves no marker and previews nothing, and once every cell has been through a lease the pages
compute from records on the whole grid.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import geofact
from geofact.pipeline.project import Project
from geofact.pipeline.script import SHARED_RUNS_PARAMETERS, UNFINISHED_MARK, UNFINISHED_STATUS, RunSettings, notebook_parameters
from geofact.settings import DEADLINE_ENV, RESULTS_PATH_ENV, past_deadline
from geofact.store import record_key, write_json

# The pages with something to compute, in the order they run when none is named: the capacity grid's
# pages share its runs (exp-capacity trains them, the mechanism pages analyse them), so in that order.
DEFAULT_PAGES = ("exp-capacity", "exp-readout", "exp-interventions", "exp-freeze-transfer", "exp-multihop", "exp-scaling")
MECHANISM_PAGES = ("exp-readout", "exp-interventions", "exp-freeze-transfer")  # what a lease runs on some of the grid's cells
GRID_CELLS_ENV = "GEOFACT_GRID_CELLS"  # geofact.training.grid.CELLS_ENV, named here: importing the grid brings torch
TAIL_BYTES = 8192  # of a failed page's output, kept for the error message
PREVIEW_CHARS = 120  # of a claim's measured string in the preview


def unfinished_reason(returncode: int, tail: str) -> str | None:
    """Why a page stopped unfinished (its exit status UNFINISHED_STATUS and its UNFINISHED_MARK line), else
    None. The mark need not start the last line: a progress bar cut by the budget leaves its line open
    before it, and may write itself again after it (seen in the lease rehearsal, 2026-11-28)."""
    if returncode != UNFINISHED_STATUS or UNFINISHED_MARK not in tail:
        return None
    return tail.rsplit(UNFINISHED_MARK, 1)[1].splitlines()[0].strip()


class ComputeFailed(RuntimeError):
    """A page failed; the message names it and ends with its traceback."""


class ComputeUnfinished(RuntimeError):
    """Pages were left for the next command (the time budget was spent); the others were computed."""

    def __init__(self, done: list[str], unfinished: list[tuple[str, str]]) -> None:
        self.done, self.unfinished = done, [name for name, _ in unfinished]
        super().__init__(f"{len(done)} page(s) computed ({', '.join(done) or 'none'}); unfinished: "
                         + "; ".join(f"{name} ({why})" for name, why in unfinished)
                         + ". Their finished training is cached and the groups in flight are checkpointed: "
                           "run the same command again to resume.")


@dataclass(frozen=True)
class Computed:
    notebook: str
    wall_time_s: float  # 0 for a page computed by an earlier command
    claims: dict[str, dict[str, Any]]
    skipped: bool  # computed by an earlier command (its marker matched)


def source_sha256() -> str:
    """sha256 over geofact's Python sources (paths and contents): records made by other code are other records."""
    package = Path(geofact.__file__).resolve().parent
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        digest.update(path.relative_to(package).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def marker_path(project: Project, profile: str, name: str) -> Path:
    return project.root / ".geofact" / "computed" / profile / f"{name}.json"


def marker_key(project: Project, name: str, params: dict[str, Any], device: str, sources: str) -> str:
    """What a finished page's marker must match for the page to count as computed."""
    notebook = hashlib.sha256(project.source(name).read_bytes()).hexdigest()
    return record_key({"notebook_sha256": notebook, "parameters": params, "device": device, "geofact_sha256": sources})


def computed_before(project: Project, profile: str, name: str, key: str) -> dict[str, Any] | None:
    """The marker of an earlier command's run of the page with this key, or None."""
    try:
        marker = json.loads(marker_path(project, profile, name).read_text())
    except (OSError, ValueError):
        return None
    return marker if marker.get("key") == key else None


def _stream(proc: subprocess.Popen, echo: BinaryIO) -> bytes:
    """Copy the page's output to `echo` as it comes (progress bars included); returns its last TAIL_BYTES."""
    tail = b""
    for chunk in iter(lambda: proc.stdout.read1(65536), b""):
        echo.write(chunk)
        echo.flush()
        tail = (tail + chunk)[-TAIL_BYTES:]
    proc.wait()
    return tail


def page_environment(results: Path) -> dict[str, str]:
    """The environment of a page's interpreter: this one's (the deadline included), figures off screen,
    output unbuffered, results to `results` (which also makes widgets one call), and geofact importable from where it is here
    (the page runs in notebooks/, where a relative PYTHONPATH would no longer find it)."""
    here = str(Path(geofact.__file__).resolve().parents[1])
    path = os.pathsep.join([here, *filter(None, [os.environ.get("PYTHONPATH")])])
    return {**os.environ, RESULTS_PATH_ENV: str(results), "MPLBACKEND": "Agg",
            "PYTHONUNBUFFERED": "1", "PYTHONPATH": path}


def compute_page(project: Project, name: str, params: dict[str, Any], echo: BinaryIO) -> tuple[float, dict | None, str]:
    """Execute one page in a fresh interpreter: (wall time, its results or None, why it is unfinished
    or ""). Raises ComputeFailed when it fails otherwise."""
    with tempfile.TemporaryDirectory() as tmp:
        results = Path(tmp) / "results.json"
        started = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, "-m", "geofact.pipeline.script", str(project.source(name)), json.dumps(params)],
            cwd=project.notebooks_dir, env=page_environment(results), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        try:
            tail = _stream(proc, echo).decode(errors="replace")
        finally:
            if proc.poll() is None:  # this command was interrupted: the page goes with it
                proc.kill()
                proc.wait()
        wall = time.perf_counter() - started
        why = unfinished_reason(proc.returncode, tail)
        if why is not None:
            return wall, None, why
        if proc.returncode != 0:
            raise ComputeFailed(f"notebook {name!r} failed (exit status {proc.returncode}) after {wall:.1f} s; "
                                f"the end of its output:\n{tail.strip()[-3000:]}")
        if not results.exists():
            raise ComputeFailed(f"notebook {name!r} ran but never called Report.save(): no results were written")
        return wall, json.loads(results.read_text()), ""


def claims_preview(claims: dict[str, dict[str, Any]]) -> str:
    """A page's verdicts as lines for the terminal, each measured string cut to PREVIEW_CHARS (a lease
    shows only the end of a command's output)."""
    def cut(text: str) -> str:
        return text if len(text) <= PREVIEW_CHARS else text[:PREVIEW_CHARS - 3] + "..."

    return "".join(f"    {claim_id}: {c['verdict']} ({cut(c['measured'])})\n" for claim_id, c in claims.items())


def compute(project: Project, names: list[str] | None, profile: str, device: str, budget: float | None = None,
            force: bool = False, echo: BinaryIO | None = None, precision: str | None = None,
            grid_cells: dict[str, list[int]] | None = None) -> list[Computed]:
    """Compute pages (DEFAULT_PAGES when `names` is empty) in turn, each in its own interpreter; see the
    module docstring. `force` executes pages whose marker says they are computed. The pages' own output
    (progress bars, tracebacks) goes to `echo` (default: standard error), this function's lines to
    standard output. `precision` is the policy passed to pages that declare it (None: the device's
    default, geofact.precision). `grid_cells` ({"R": [...], "d": [...]}, MECHANISM_PAGES when
    `names` is empty; pages declaring `capacity_grid` alone) computes the pages on those cells of the capacity grid: their
    records, never a marker. Raises ComputeFailed at the first page that fails, ComputeUnfinished when
    the budget left pages for the next command."""
    echo = echo or sys.stderr.buffer
    if budget is not None and not budget > 0:
        raise ValueError(f"budget must be a number of seconds > 0, got {budget!r}")
    if grid_cells is not None and (not grid_cells or set(grid_cells) - {"R", "d"}):
        raise ValueError(f'grid_cells must name "R" values, "d" values or both, got {grid_cells!r}')
    names = list(dict.fromkeys(names or (MECHANISM_PAGES if grid_cells else DEFAULT_PAGES)))
    for n in names:
        project.source(n)  # fail on a typo before anything runs
    off_grid = [n for n in names if not notebook_parameters(project, n) & set(SHARED_RUNS_PARAMETERS)] if grid_cells else []
    if off_grid:
        raise ValueError(f"grid cells (--grid-R, --grid-d) are for the capacity grid's pages (those declaring "
                         f"{' or '.join(SHARED_RUNS_PARAMETERS)}), not {off_grid}")
    settings = RunSettings.resolve(project, profile, device, precision)  # a device that is not here is an error, not a CPU run
    if budget is not None:  # the pages and their sweep workers inherit it
        os.environ[DEADLINE_ENV] = str(time.time() + budget)

    os.environ.pop(GRID_CELLS_ENV, None)
    try:
        if grid_cells is not None:
            os.environ[GRID_CELLS_ENV] = json.dumps(grid_cells)
        return _compute_pages(project, names, profile, device, settings, force, echo, grid_cells)
    finally:
        os.environ.pop(GRID_CELLS_ENV, None)


def _compute_pages(project: Project, names: list[str], profile: str, device: str, settings: RunSettings, force: bool,
                   echo: BinaryIO, grid_cells: dict[str, list[int]] | None) -> list[Computed]:
    sources = source_sha256()
    done: list[Computed] = []
    unfinished: list[tuple[str, str]] = []
    for i, name in enumerate(names, 1):
        params = settings.parameters(project, name)
        key = marker_key(project, name, params, device, sources)
        marker = None if force or grid_cells else computed_before(project, profile, name, key)
        if marker is not None:
            print(f"[{i}/{len(names)}] {name}: computed at {marker['computed_at']}, skipped (--force computes it again)",
                  flush=True)
            done.append(Computed(name, 0.0, marker["claims"], skipped=True))
            continue
        if past_deadline():
            unfinished.append((name, "not started: the time budget was spent"))
            continue
        print(f"[{i}/{len(names)}] {name}: computing at profile {profile!r} on {device}", flush=True)
        wall, results, why = compute_page(project, name, params, echo)
        if results is None:
            print(f"[{i}/{len(names)}] {name}: unfinished after {wall:.1f} s: {why}", flush=True)
            unfinished.append((name, why))
            continue
        if grid_cells:  # done for these cells: no marker (the page is not computed), nothing previewed
            print(f"[{i}/{len(names)}] {name}: computed on the grid's cells {json.dumps(grid_cells)} alone in {wall:.1f} s: "
                  "their runs and analyses are cached; the page is computed once every cell is", flush=True)
            done.append(Computed(name, wall, {}, skipped=False))
            continue
        write_json(marker_path(project, profile, name), {
            "notebook": name, "profile": profile, "device": device, "parameters": params, "key": key,
            "computed_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "wall_time_s": round(wall, 2),
            "claims": results["claims"]})
        print(f"[{i}/{len(names)}] {name}: computed in {wall:.1f} s; its verdicts (rendered at home by "
              f"`geofact run --records-only`):\n{claims_preview(results['claims'])}", end="", flush=True)
        done.append(Computed(name, wall, results["claims"], skipped=False))
    if unfinished:
        raise ComputeUnfinished([c.notebook for c in done], unfinished)
    return done
