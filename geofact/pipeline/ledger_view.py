"""The ledger beside the results: what the generated pages (the front page, the status page, the claims
page and the ledger figure) read, and how they show a verdict.

One reading of claims.yaml, results/<profile>/*.json and the rounding comparison, so that the four
generated pages cannot count the same verdicts differently.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from geofact.evidence import estimate_words
from geofact.outcomes import FAILS, HOLDS, INCONCLUSIVE, NOT_IN_REGIME, NOT_RUN
from geofact.pipeline.ledger import GROUPS, Claim, group, load_ledger
from geofact.pipeline.profiles import profile_rank
from geofact.pipeline.project import Project
from geofact.pipeline.stability import FRAGILE, Stability, stability

STATES = (HOLDS, FAILS, INCONCLUSIVE, NOT_IN_REGIME, NOT_RUN)
COUNTED_AS = {HOLDS: "hold", FAILS: "do not hold", INCONCLUSIVE: "inconclusive", NOT_IN_REGIME: "not in regime",
              NOT_RUN: "not run"}  # "9 hold, 2 do not hold"
# A mark per state besides its colour, so that a verdict reads without colour (print, colour blindness).
MARKS = {HOLDS: "✓", FAILS: "✗", INCONCLUSIVE: "?", NOT_IN_REGIME: "○", NOT_RUN: "–"}
# What each profile is, for a column heading and the figure.
PROFILE_MEANING = {
    "smoke": "smoke (seconds, for the tests)",
    "laptop": "laptop (a CPU, experiments at reduced scale)",
    "paper": "paper (the paper's scale, a GPU)",
}


def css_class(state: str) -> str:
    """"does not hold" -> "gf-does-not-hold" (book/_static/geofact.css colours it)."""
    return "gf-" + state.replace(" ", "-")


def badge(state: str) -> str:
    """A verdict as the book's pages show it: inline HTML, coloured by state, with its mark and its words."""
    return f'<span class="gf-badge {css_class(state)}">{MARKS[state]} {state}</span>'


def fragile_badge(n: int | None = None) -> str:
    """The mark of a verdict that moved under the rounding perturbation ("⚠ fragile"), or of `n` of them."""
    return f'<span class="gf-badge gf-fragile">⚠ {"" if n is None else f"{n} "}{FRAGILE}</span>'


FRAGILE_BADGE = fragile_badge()
READ_WHERE = "moves with where training is read"
READINGS_SHOWN = {"best": "best state before any spike", "last": "end of the budget"}  # the stop's is the verdict


def reading_badge(n: int | None = None) -> str:
    """The mark of a verdict that differs when its runs are read at their best state before any loss spike
    or at the end of the budget instead of at the stop rule (geofact.pages.readings), or of `n` of them."""
    return f'<span class="gf-badge gf-reading">⇄ {"" if n is None else f"{n} "}{READ_WHERE}</span>'


def readings_text(entry: dict) -> str:
    """What a verdict read at the other points gives ("best state before any spike: inconclusive, 0.52
    [0.31, 0.74]; end of the budget: the same"); empty where the page read no other point."""
    readings = entry.get("readings")
    if not readings:
        return ""
    parts = []
    for reading, words in READINGS_SHOWN.items():
        other = readings.get(reading)
        if other is None:
            parts.append(f"{words}: not read")
        elif other["verdict"] == entry["verdict"]:
            parts.append(f"{words}: the same" + (f" ({e})" if (e := estimate_words(other)) else ""))
        else:
            parts.append(f"{words}: {other['verdict']}" + (f", {e}" if (e := estimate_words(other)) else ""))
    return "; ".join(parts)


def count_badge(state: str, n: int) -> str:
    """"✓ 9 hold": a count of verdicts in the state's badge."""
    return f'<span class="gf-badge {css_class(state)}">{MARKS[state]} {n} {COUNTED_AS[state]}</span>'


def plain_markdown(text: str) -> str:
    """A page's measured string or note as literal text in MyST (no emphasis, math or roles from its symbols)."""
    return re.sub(r"([\\`*_$\[\]<>{}|])", r"\\\1", " ".join(str(text).split()))


def load_results(project: Project) -> dict[str, dict[str, dict[str, Any]]]:
    """{profile: {notebook: results JSON}} for every results file present."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for path in sorted(project.results_dir.glob("*/*.json")):
        if path.parent.name == "interactive":
            continue
        out.setdefault(path.parent.name, {})[path.stem] = json.loads(path.read_text())
    return out


@dataclass
class LedgerView:
    """The ledger's claims, each profile's results and the rounding comparison, read once."""

    claims: list[Claim]
    results: dict[str, dict[str, dict[str, Any]]]  # {profile: {notebook: results JSON}}
    stable: dict[str, dict[str, Stability]]  # {profile: {claim id: Stability}}

    @classmethod
    def read(cls, project: Project) -> LedgerView:
        return cls(load_ledger(project.ledger_path), load_results(project), stability(project))

    @property
    def profiles(self) -> list[str]:
        """The profiles with results, smallest first."""
        return sorted(self.results, key=lambda p: (profile_rank(p), p))

    def entry(self, claim: Claim, profile: str) -> dict[str, Any] | None:
        return self.results.get(profile, {}).get(claim.notebook, {}).get("claims", {}).get(claim.id)

    def verdict(self, claim: Claim, profile: str) -> str:
        return (self.entry(claim, profile) or {}).get("verdict", NOT_RUN)

    def fragile(self, claim: Claim, profile: str) -> Stability | None:
        """The claim's comparison under the rounding perturbation where its verdict moved, else None."""
        s = self.stable.get(profile, {}).get(claim.id)
        return s if s is not None and s.state == FRAGILE else None

    def reading_sensitive(self, claim: Claim, profile: str) -> bool:
        """Whether the claim's verdict differs when its runs are read at another point of training."""
        return bool((self.entry(claim, profile) or {}).get("reading_sensitive"))

    def scale(self, notebook: str, profile: str) -> str | None:
        """The scale a page ran at (its results' `scale`, e.g. "N = 128 (the paper's 4096), ...")."""
        return self.results.get(profile, {}).get(notebook, {}).get("scale")

    def by_group(self) -> dict[str, list[Claim]]:
        return {g: [c for c in self.claims if group(c) == g] for g in GROUPS}

    def counts(self, claims: list[Claim], profile: str) -> dict[str, int]:
        states = [self.verdict(c, profile) for c in claims]
        return {s: states.count(s) for s in STATES}

    def counted(self, claims: list[Claim], profile: str) -> str:
        """"9 hold, 2 do not hold" (the states that occur, in STATES order)."""
        return ", ".join(f"{n} {COUNTED_AS[s]}" for s, n in self.counts(claims, profile).items() if n)
