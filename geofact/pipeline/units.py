"""Which pages may execute side by side (`geofact run --jobs J`), and how long each is expected to take."""

from __future__ import annotations

import nbformat

from geofact.pipeline.project import Project
from geofact.pipeline.script import SHARED_RUNS_PARAMETERS, notebook_parameters
from geofact.pipeline.verdicts import NotebookError


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
