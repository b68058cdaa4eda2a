"""A page's verdicts as the book shows them, and the check of what a page reported against the ledger."""

from __future__ import annotations

import re
from typing import Any

from geofact.pipeline.ledger import Claim, population_mismatches, verdict_label


class NotebookError(RuntimeError):
    """A notebook failed; the message names the notebook and the cell."""


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
