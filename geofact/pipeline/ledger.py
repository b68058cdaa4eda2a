"""The claims ledger (claims.yaml): every claim of the paper that geofact tests, and where.

Besides the claims it tests, the ledger lists the paper's statements judged *not checkable*, each
with the reason (`not_checkable: "..."` in place of `test` and `notebook`): the status page shows
them, so that what the ledger leaves out is a decision anyone can read, not an omission.

An experiment claim judged as a test against its alternative (`geofact.evidence.judge`) names, besides its
test, the `alternative` the measurement must rule out, the `population` its verdict judges in words
(from the paper's sentence) and the same as a `population_rule` mapping, which the page reports back
with its verdict: `geofact run` refuses a page whose rule differs from the ledger's.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from geofact.outcomes import NOT_RUN

REQUIRED = ("id", "paper", "statement", "test", "notebook")
REQUIRED_NOT_CHECKABLE = ("id", "paper", "statement", "not_checkable")
AGAINST_ALTERNATIVE = ("alternative", "population", "population_rule")  # given together, or not at all


@dataclass(frozen=True)
class Claim:
    id: str
    paper: str  # where in the paper, e.g. "Lemma G.1 (lem:orth vectors pm 1), Appendix G"
    statement: str  # the claim as the paper makes it
    test: str  # how geofact tests it
    notebook: str  # the page whose results carry the verdict
    paper_value: str | None = None  # the paper's number, if it gives one
    alternative: str | None = None  # what the measurement must rule out for the claim to hold
    population: str | None = None  # the runs or cells the verdict judges, from the paper's sentence
    population_rule: dict | None = None  # the same as the page applies it (reported back with the verdict)


@dataclass(frozen=True)
class NotCheckable:
    id: str
    paper: str
    statement: str
    not_checkable: str  # why no test can decide it


def _entries(path: Path) -> list[dict]:
    entries = yaml.safe_load(Path(path).read_text()) or []
    seen = set()
    for i, entry in enumerate(entries):
        required = REQUIRED_NOT_CHECKABLE if "not_checkable" in entry else REQUIRED
        missing = [k for k in required if not entry.get(k)]
        if missing:
            raise ValueError(f"{path}: claim #{i} ({entry.get('id', '?')}) lacks {missing}")
        allowed = set(required) | ({"paper_value", *AGAINST_ALTERNATIVE} if required is REQUIRED else set())
        given = [k for k in AGAINST_ALTERNATIVE if entry.get(k)]
        if given and len(given) < len(AGAINST_ALTERNATIVE):
            raise ValueError(f"{path}: claim {entry.get('id', '?')!r} gives {given} but not "
                             f"{[k for k in AGAINST_ALTERNATIVE if k not in given]}: a test against an alternative needs all three")
        rule = entry.get("population_rule")
        if rule is not None and (not isinstance(rule, dict) or any(v is None or isinstance(v, (dict, list)) for v in rule.values())):
            raise ValueError(f"{path}: claim {entry['id']!r}: population_rule must map names to plain values (quote a value "
                             f"holding a comma: YAML splits it), got {rule!r}")
        unknown = sorted(set(entry) - allowed)
        if unknown:
            raise ValueError(f"{path}: claim {entry['id']!r} has unknown fields {unknown}")
        if entry["id"] in seen:
            raise ValueError(f"{path}: duplicate claim id {entry['id']!r}")
        seen.add(entry["id"])
    return entries


GROUPS = ("The theorems as stated", "Proof steps and the paper's other statements", "Experiments")


def group(claim: Claim) -> str:
    """A claim's group, as the front page and the status page show it: an experiment (its page trains
    models); a theorem or lemma as the paper states it (cited as "Theorem ..." or "Lemma ...", not as a
    proof or a statement set against its proof); else a step of a proof or another statement of the text."""
    if claim.notebook.startswith("exp-"):
        return GROUPS[2]
    stated = claim.paper.startswith(("Theorem", "Lemma")) and " vs " not in claim.paper
    return GROUPS[0] if stated else GROUPS[1]


def claim_anchor(claim_id: str) -> str:
    """A claim's card on the claims page (geofact.pipeline.claim_cards), which the status page links to."""
    return f"claim-{claim_id}"


def verdict_label(claim_id: str) -> str:
    """A page's anchor for one claim's verdict (the runner writes it, the status page links to it)."""
    return f"verdict-{claim_id}"


def load_ledger(path: Path) -> list[Claim]:
    """The claims geofact tests, in ledger order."""
    claims = []
    for entry in _entries(path):
        if "not_checkable" in entry:
            continue
        value = entry.get("paper_value")
        claims.append(Claim(**{**entry, "paper_value": None if value is None else str(value)}))
    return claims


def load_not_checkable(path: Path) -> list[NotCheckable]:
    """The statements the ledger judges not checkable, with the reason."""
    return [NotCheckable(**entry) for entry in _entries(path) if "not_checkable" in entry]


def population_mismatches(claims: list[Claim], reported: dict[str, Any]) -> list[str]:
    """Where a page's verdict and the ledger disagree on how the claim is tested: a claim the ledger
    tests against an alternative must be judged so (`geofact.evidence.judge`), on the ledger's population rule."""
    problems = []
    for claim in claims:
        entry = reported.get(claim.id)
        if entry is None or entry["verdict"] == NOT_RUN:
            continue
        if claim.population_rule is None and "estimate" in entry:
            problems.append(f"claim {claim.id!r} is judged against an alternative the ledger does not name")
        elif claim.population_rule is not None and "estimate" not in entry:
            problems.append(f"claim {claim.id!r}: the ledger names an alternative, the page did not test against it (geofact.evidence.judge)")
        elif claim.population_rule is not None and entry.get("population") != claim.population_rule:
            problems.append(f"claim {claim.id!r} judged on population {entry.get('population')}, the ledger says {claim.population_rule}")
    return problems
