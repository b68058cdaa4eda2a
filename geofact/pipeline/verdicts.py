"""A page's verdicts as the book shows them, and the check of what a page reported against the ledger."""

from __future__ import annotations

import json
from typing import Any

import nbformat

from geofact.pipeline.ledger import Claim, load_ledger, population_mismatches, verdict_label
from geofact.evidence import estimate_words
from geofact.pipeline.ledger_view import FRAGILE_BADGE, badge, plain_markdown, reading_badge, readings_text
from geofact.pipeline.project import Project
from geofact.pipeline.stability import FRAGILE, NOT_COMPARED, Stability, page_stability, trains


class NotebookError(RuntimeError):
    """A notebook failed; the message names the notebook and the cell."""


def _rounding_cell(moved: Stability | None) -> str:
    if moved is None or moved.state == NOT_COMPARED:
        return "not compared"
    return f"{FRAGILE_BADGE} {moved.moved_to} under rounding" if moved.state == FRAGILE else "stable"


def verdicts_markdown(name: str, profile: str, claims: list[Claim], reported: dict[str, Any],
                      stability: dict[str, Stability] | None = None) -> str:
    """The page's closing section: a table of its claims with the verdict this run computed, the estimate and
    its interval where the claim is a test against an alternative, and for a page of trained models
    (`stability` given) whether the verdict moved under the rounding perturbation; then each claim under its
    own anchor with what was measured and the rule that turned it into the verdict."""
    lines = [f"(verdicts-{name})=", "## Verdicts at a glance", "",
             f"What this run (profile `{profile}`) decided for each claim this page tests; the code above computes "
             "every one. The {doc}`status page <reproduction-status>` sets them beside the rest of the paper "
             "{cite}`ravfogel-geometric`.", "",
             "| Claim | Verdict | Estimate [interval] |" + (" Rounding |" if stability is not None else ""),
             "|---|---|---|" + ("---|" if stability is not None else "")]
    for claim in claims:
        entry = reported[claim.id]
        cells = [f"{{ref}}`{claim.id} <{verdict_label(claim.id)}>`",
                 badge(entry["verdict"]) + (f" {reading_badge()}" if entry.get("reading_sensitive") else ""), estimate_words(entry) or "–"]
        if stability is not None:
            cells.append(_rounding_cell(stability.get(claim.id)))
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "What each verdict rests on:", ""]
    for claim in claims:
        entry = reported[claim.id]
        measured = f" {plain_markdown(entry['measured'])}." if entry.get("measured") else ""
        rule = f" *Rule:* {plain_markdown(entry['note'])}." if entry.get("note") else ""
        moved = stability.get(claim.id) if stability is not None else None
        robust = f" *Rounding:* {moved.text()}." if moved is not None else ""
        read = readings_text(entry)
        robust += (f" *Read elsewhere:* {reading_badge() + ' ' if entry.get('reading_sensitive') else ''}{plain_markdown(read)}."
                   if read else "")
        lines += [f"({verdict_label(claim.id)})=",
                  f"**`{claim.id}`** ({plain_markdown(claim.paper)}): {badge(entry['verdict'])}.{measured}{rule}{robust}", ""]
    if stability is not None:
        compared = [s for s in stability.values() if s.state != NOT_COMPARED]
        lines += ["*Rounding* says whether the verdict stayed the same when this page was executed again with the matmul "
                  "kernels summing in another order (`geofact run --rounding`, the recipe unchanged); a verdict that moved is "
                  "**fragile**: it depends on the CPU, not on the paper"
                  + ("." if compared else "; this page has not yet been executed so."), ""]
    return "\n".join(lines)


def check_claims(name: str, claims: list[Claim], reported: dict[str, Any]) -> None:
    """The page reported exactly its ledger claims, each on the population rule the ledger states."""
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


def _section_index(nb: nbformat.NotebookNode, name: str) -> int | None:
    """The index of the page's closing verdicts cell (the runner appends it), or None."""
    anchor = f"(verdicts-{name})="
    return next((i for i, c in enumerate(nb.cells) if c.cell_type == "markdown" and c.source.startswith(anchor)), None)


def same_execution(meta: dict, results: dict) -> bool:
    """Whether a page's provenance and a results file's come from one execution (`geofact run` writes both)."""
    theirs = results.get("provenance", {})
    return all(meta.get(k) == theirs.get(k) for k in ("executed_at", "notebook_sha256", "git_commit", "parameters"))


def expected_section(project: Project, name: str, nb: nbformat.NotebookNode) -> str | None:
    """The closing section page `name` should show now: its committed results' verdicts and, for a page of
    trained models, their stability under the rounding perturbation (None: no results to build it from)."""
    meta = nb.metadata.get("geofact") or {}
    path = project.results(meta.get("profile", ""), name)
    if not meta or not path.exists():
        return None
    results = json.loads(path.read_text())
    if not same_execution(meta, results):
        return None  # the page and its results come from two executions: check's to report, not this section's
    claims = [c for c in load_ledger(project.ledger_path) if c.notebook == name]
    if set(results.get("claims", {})) != {c.id for c in claims}:
        return None  # the page and the ledger disagree: check_claims' to report, not this section's
    stable = page_stability(project, meta["profile"], name) if trains(results) else None
    return verdicts_markdown(name, meta["profile"], claims, results["claims"], stable)


def stale_sections(project: Project) -> list[str]:
    """Pages whose closing section differs from what their results and the perturbed results give."""
    stale = []
    for name in project.notebooks():
        page = project.page(name)
        if not page.exists():
            continue
        nb = nbformat.read(page, as_version=4)
        index, expected = _section_index(nb, name), expected_section(project, name, nb)
        if index is not None and expected is not None and nb.cells[index].source != expected:
            stale.append(name)
    return stale


def refresh_sections(project: Project) -> list[str]:
    """Rewrite the closing section of every page that `stale_sections` names (generated text, like the
    status page: a perturbed run executed after the page changes what it says); returns their names."""
    names = stale_sections(project)
    for name in names:
        page = project.page(name)
        nb = nbformat.read(page, as_version=4)
        nb.cells[_section_index(nb, name)].source = expected_section(project, name, nb)
        nbformat.write(nb, page)
    return names
