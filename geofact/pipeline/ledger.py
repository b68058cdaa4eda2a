"""The claims ledger (claims.yaml): every claim of the paper that geofact tests, and where.

Besides the claims it tests, the ledger lists the paper's statements judged *not checkable*, each
with the reason (`not_checkable: "..."` in place of `test` and `notebook`): the status page shows
them, so that what the ledger leaves out is a decision anyone can read, not an omission.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

REQUIRED = ("id", "paper", "statement", "test", "notebook")
REQUIRED_NOT_CHECKABLE = ("id", "paper", "statement", "not_checkable")


@dataclass(frozen=True)
class Claim:
    id: str
    paper: str  # where in the paper, e.g. "Lemma G.1 (lem:orth vectors pm 1), Appendix G"
    statement: str  # the claim as the paper makes it
    test: str  # how geofact tests it
    notebook: str  # the page whose results carry the verdict
    paper_value: str | None = None  # the paper's number, if it gives one


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
        allowed = set(required) | ({"paper_value"} if required is REQUIRED else set())
        unknown = sorted(set(entry) - allowed)
        if unknown:
            raise ValueError(f"{path}: claim {entry['id']!r} has unknown fields {unknown}")
        if entry["id"] in seen:
            raise ValueError(f"{path}: duplicate claim id {entry['id']!r}")
        seen.add(entry["id"])
    return entries


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
