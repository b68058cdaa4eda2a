"""`geofact check`: the committed book and results are fresh and clean.

A page or results file is *stale* when, since it ran,
* its notebook source changed (sha256 of notebooks/<name>.py),
* the parameters its profile now gives differ from those it ran with, or
* any geofact module the notebook imported changed (sha256 of each module's source).
A page is *broken* when it holds an error output. A page or results file is *unreproducible* when the
commit its provenance names is not in this checkout's history, so nobody can check out the code that
made it (work executed on commits that never landed); judged only in a full, non-shallow git clone. The generated pages (status, claims, the front page and its figure) must equal what the ledger and
results generate, and every notebook must be a page of the table of contents.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import nbformat
import yaml

from geofact.pipeline.ledger import load_ledger, population_mismatches
from geofact.pipeline.project import Project
from geofact.pipeline.script import expected_parameters
from geofact.pipeline.stability import PERTURBATIONS, ROUNDING_DIR, misfiled, moved_since
from geofact.pipeline.status import generated_pages
from geofact.pipeline.verdicts import same_execution, stale_sections
from geofact.provenance import module_hashes, sha256_file


def _staleness(project: Project, name: str, meta: dict[str, Any], what: str) -> list[str]:
    problems = []
    if meta.get("notebook_sha256") != sha256_file(project.source(name)):
        problems.append(f"{what}: stale, notebooks/{name}.py changed since it ran")
    try:
        expected = expected_parameters(project, name, meta["profile"], meta.get("device_arg"), meta.get("precision_arg"))
    except ValueError as exc:
        return problems + [f"{what}: {exc}"]
    if expected != meta.get("parameters"):
        problems.append(
            f"{what}: stale, profile {meta['profile']!r} now gives parameters {expected}, it ran with {meta.get('parameters')}"
        )
    recorded = meta.get("modules", {})
    changed = sorted(m for m, h in module_hashes(list(recorded)).items() if recorded[m] != h)
    if changed:
        problems.append(f"{what}: stale, library modules changed since it ran: {changed}")
    return problems


def _history(root: Path):
    """A test `commit -> bool` (is it HEAD or an ancestor of HEAD), or None where that cannot be judged:
    outside a git work tree, or in a shallow clone whose history stops short."""
    def git(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=False)

    if git("rev-parse", "--is-shallow-repository").stdout.strip() != "false":
        return None  # not a repository (no output) or a shallow one ("true")
    known: dict[str, bool] = {}

    def in_history(commit: str) -> bool:
        if commit not in known:
            known[commit] = git("merge-base", "--is-ancestor", commit, "HEAD").returncode == 0
        return known[commit]
    return in_history


def _unreproducible(meta: dict[str, Any], what: str, in_history) -> list[str]:
    if in_history is None:
        return []
    commit = str(meta.get("git_commit", "unknown")).removesuffix("+dirty")
    if in_history(commit):
        return []
    return [f"{what}: made at commit {commit[:12]}, which is not in this checkout's history; run `geofact run` and commit"]


def _error_outputs(nb: nbformat.NotebookNode) -> list[int]:
    return [i for i, cell in enumerate(nb.cells) for out in cell.get("outputs", []) if out.get("output_type") == "error"]


def check(project: Project) -> list[str]:
    """All problems found; empty when the book and results are fresh and clean."""
    problems: list[str] = []
    names = project.notebooks()
    in_history = _history(project.root)
    toc = yaml.safe_load(project.toc_path.read_text())
    toc_files = {entry["file"] for part in toc.get("parts", []) for entry in part.get("chapters", [])}
    for name in names:
        if name not in toc_files:
            problems.append(f"notebook {name}: not listed in _toc.yml")
        page = project.page(name)
        if not page.exists():
            problems.append(f"page book/{name}.ipynb: missing, run `geofact run {name}`")
            continue
        nb = nbformat.read(page, as_version=4)
        meta = nb.metadata.get("geofact")
        if not meta:
            problems.append(f"page book/{name}.ipynb: has no geofact provenance (not produced by `geofact run`)")
            continue
        for cell in _error_outputs(nb):
            problems.append(f"page book/{name}.ipynb: cell {cell} holds an error output")
        problems += _staleness(project, name, meta, f"page book/{name}.ipynb")
        problems += _unreproducible(meta, f"page book/{name}.ipynb", in_history)
        results = project.results(meta["profile"], name)
        if not results.exists():
            problems.append(f"page book/{name}.ipynb: its results file {results.relative_to(project.root)} is missing")
        elif not same_execution(meta, json.loads(results.read_text())):
            problems.append(f"page book/{name}.ipynb and {results.relative_to(project.root)} come from two executions "
                            f"(run `geofact run {name}`)")

    ledger = load_ledger(project.ledger_path)
    ledger_ids = {c.id for c in ledger}
    for path in sorted(project.results_dir.glob("*/*.json")):
        if path.parent.name == "interactive":
            continue
        rel = path.relative_to(project.root)
        data = json.loads(path.read_text())
        if path.stem not in names:
            problems.append(f"{rel}: no notebook notebooks/{path.stem}.py")
            continue
        problems += _staleness(project, path.stem, data["provenance"], str(rel))
        problems += _unreproducible(data["provenance"], str(rel), in_history)
        unknown = sorted(set(data["claims"]) - ledger_ids)
        if unknown:
            problems.append(f"{rel}: claims not in claims.yaml: {unknown}")
        problems += [f"{rel}: {p}" for p in population_mismatches([c for c in ledger if c.notebook == path.stem], data["claims"])]

    problems += [f"page book/{name}.ipynb: its verdicts section is out of date with the results and the rounding "
                 "perturbation's, run `geofact status`" for name in stale_sections(project)]
    problems += misfiled(project)
    for path in sorted(project.results_dir.glob(f"{ROUNDING_DIR}/*/*/*.json")):
        rel = path.relative_to(project.root)
        if path.parent.name not in PERTURBATIONS:
            continue  # misfiled's
        if path.stem not in names:
            problems.append(f"{rel}: no notebook notebooks/{path.stem}.py")
            continue
        data = json.loads(path.read_text())
        problems += _unreproducible(data["provenance"], str(rel), in_history)
    for path, text in generated_pages(project).items():
        if not path.exists() or path.read_text() != text:
            problems.append(f"{path.relative_to(project.root)}: out of date, run `geofact status`")
    return problems


def stale_cost(project: Project) -> dict[str, list[tuple[str, float]]]:
    """{profile: [(page, seconds)]}: every stale results file, with the longest its page has taken (its
    provenance's `wall_time_max_s`, as geofact.pipeline.units schedules by: an execution from a warm run
    cache takes seconds), so that a change can be priced before it is made: a module every page imports
    stales them all, at every profile the results hold."""
    stale: dict[str, list[tuple[str, float]]] = {}
    for path in sorted(project.results_dir.glob("*/*.json")):
        if path.parent.name == "interactive" or path.stem not in project.notebooks():
            continue
        meta = json.loads(path.read_text())["provenance"]
        if _staleness(project, path.stem, meta, str(path)):
            seconds = meta.get("wall_time_max_s", meta.get("wall_time_s")) or 0.0
            stale.setdefault(path.parent.name, []).append((path.stem, float(seconds)))
    return stale


def cost_lines(stale: dict[str, list[tuple[str, float]]]) -> list[str]:
    """One line per profile: how many pages are stale and the sum of their longest wall times, longest first."""
    lines = []
    for profile, pages in stale.items():
        pages = sorted(pages, key=lambda p: -p[1])
        listed = ", ".join(f"{name} {seconds:,.0f}" for name, seconds in pages)
        lines.append(f"{profile}: {len(pages)} page(s), {sum(s for _, s in pages) / 60:,.0f} page-minutes ({listed} s)")
    return lines


def main_check(root: Path) -> int:
    project = Project(root)
    moved = moved_since(project)
    if moved:  # a page re-executed here (on another CPU, or under the perturbation): what it changed
        print(f"geofact check: {len(moved)} verdict(s) differ from the committed results (HEAD):")
        print("\n".join(f"  - {m.line()}" for m in moved))
    problems = check(project)
    if problems:
        print(f"geofact check: {len(problems)} problem(s)")
        print("\n".join(f"  - {p}" for p in problems))
        stale = stale_cost(project)
        if stale:  # what re-executing costs (pages run side by side under --jobs; a unit's runs are shared)
            print("geofact check: re-executing the stale pages takes at most, by the longest each has taken (contended runs and older code included):")
            print("\n".join(f"  - {line}" for line in cost_lines(stale)))
        return 1
    print("geofact check: book and results are fresh and clean")
    return 0
