"""The claims ledger (claims.yaml): every claim of the paper that geofact tests, and where."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

REQUIRED = ("id", "paper", "statement", "test", "notebook")


@dataclass(frozen=True)
class Claim:
    id: str
    paper: str  # where in the paper, e.g. "Lemma G.1 (lem:orth vectors pm 1), Appendix G"
    statement: str  # the claim as the paper makes it
    test: str  # how geofact tests it
    notebook: str  # the page whose results carry the verdict
    paper_value: str | None = None  # the paper's number, if it gives one


def load_ledger(path: Path) -> list[Claim]:
    entries = yaml.safe_load(Path(path).read_text()) or []
    claims, seen = [], set()
    for i, entry in enumerate(entries):
        missing = [k for k in REQUIRED if not entry.get(k)]
        if missing:
            raise ValueError(f"{path}: claim #{i} ({entry.get('id', '?')}) lacks {missing}")
        unknown = sorted(set(entry) - set(REQUIRED) - {"paper_value"})
        if unknown:
            raise ValueError(f"{path}: claim {entry['id']!r} has unknown fields {unknown}")
        if entry["id"] in seen:
            raise ValueError(f"{path}: duplicate claim id {entry['id']!r}")
        seen.add(entry["id"])
        value = entry.get("paper_value")
        claims.append(Claim(**{**entry, "paper_value": None if value is None else str(value)}))
    return claims
