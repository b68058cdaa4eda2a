"""What a notebook reports: headline numbers (glued into the prose) and verdicts on the paper's claims.

Inside a notebook::

    report = Report("thm-orthogonal-codes")
    report.number("success_rate_2_15", 0.64)             # stored, and glued for {glue:text}`success_rate_2_15:.2f`
    report.claim("lem-codes-probability", holds=False, measured="0.64 at k = 2^15 (paper: >= 1 - 2/k^2)")
    report.save()

`geofact run` tells the kernel where to write through GEOFACT_RESULTS_PATH and then adds the
provenance (profile, parameters, commit, device, versions, wall time) to the same JSON file; see
`geofact.pipeline.runner`. Run interactively, `save()` writes nothing, so hand-run notebooks never overwrite
the book's results.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from geofact.outcomes import NOT_RUN
from geofact.settings import RESULTS_PATH_ENV
from geofact.store import to_jsonable

VERDICTS = ("holds", "does not hold")


class Report:
    """Collects one notebook run's numbers and claim verdicts; `save()` writes them as JSON."""

    def __init__(self, notebook: str) -> None:
        self.notebook = notebook
        self.numbers: dict[str, Any] = {}
        self.claims: dict[str, dict[str, Any]] = {}
        self.scale_text = ""

    def number(self, name: str, value: Any, glue: bool = True) -> None:
        """Record a headline number; with glue=True it is also glued (myst-nb) for use in the prose."""
        self.numbers[name] = to_jsonable(value)
        if glue:
            from myst_nb import glue as myst_glue  # optional dependency (the `book` extra)

            # plain Python values: numpy 2 reprs (np.float64(...)) would not parse in {glue:text}
            myst_glue(name, self.numbers[name], display=False)

    def claim(self, claim_id: str, holds: bool, measured: str, note: str = "") -> None:
        """Verdict on one claim of the ledger (claims.yaml): what was measured and whether the claim holds."""
        if claim_id in self.claims:
            raise ValueError(f"claim {claim_id!r} reported twice in {self.notebook}")
        self.claims[claim_id] = {"verdict": VERDICTS[0] if holds else VERDICTS[1], "measured": measured, "note": note}

    def scale(self, text: str) -> None:
        """The scale this run judged its claims at, as a reader needs it beside a verdict (the paper's N or
        a smaller one, the model): "N = 128 (paper 4096), R 2-16, d 4-96, 3 seeds". The status page shows
        it with every verdict of the page, so a verdict at a reduced scale does not read as one at the paper's."""
        if not text.strip():
            raise ValueError("scale needs a description, got an empty one")
        self.scale_text = " ".join(text.split())

    def not_run(self, claim_id: str, why: str) -> None:
        """Record that this run could not test a claim of the ledger, and why: the claim stays "not run"
        on the status page, instead of a verdict taken on nothing (all() of an empty list holds)."""
        if claim_id in self.claims:
            raise ValueError(f"claim {claim_id!r} reported twice in {self.notebook}")
        self.claims[claim_id] = {"verdict": NOT_RUN, "measured": "nothing", "note": why}

    def as_dict(self) -> dict[str, Any]:
        out = {"notebook": self.notebook, "numbers": self.numbers, "claims": self.claims}
        return {**out, "scale": self.scale_text} if self.scale_text else out

    def save(self) -> None:
        path = os.environ.get(RESULTS_PATH_ENV)
        if not path:
            print(f"[geofact] interactive run: results not saved (use `geofact run {self.notebook}`)")
            return
        out = Path(path)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(self.as_dict(), indent=1, sort_keys=True) + "\n")
