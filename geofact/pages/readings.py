"""A page's verdicts read at three points of training (issue 46, item 4).

Loss curves spike long after a run has memorised (geofact.spikes), so what a verdict reads depends on where
training is read: at the paper's stop rule (what every page reads, `Section 5.1`, `Appendix B`), at the best
state before any loss spike, or at the end of the step budget (`geofact.analysis.trajectory.READINGS`; the
runs are trained past their stop, `TrainConfig.read_past_stop`). A page computes its verdicts in one
function of the runs' metrics, `judge(report, values)`, and calls it on the metrics at the stop for its
own report; `read_at_points` calls it again on the metrics at the other two points: the same runs and the
same populations, chosen at the stop rule (which cells have sufficient capacity, which runs memorise), so
that only the weights read differ. Those verdicts go into reports that are never glued or saved, the
page's tables are not shown again (`geofact.pages.display.silenced`), and each verdict of the page's
report records what the other points read (`entry["readings"]`) and whether any differs from the stop's
(`entry["reading_sensitive"]`), which the status page marks.
"""

from __future__ import annotations

import contextlib
import io
from typing import Any, Callable

from geofact.analysis.trajectory import READINGS
from geofact.evidence import estimate_words
from geofact.pages.display import silenced
from geofact.pages.report import Report
from geofact.store import to_jsonable


class UngluedReport(Report):
    """A report of another reading: its numbers are kept, never glued into the page's prose (they would
    overwrite the stop's), and nothing saves it."""

    def number(self, name: str, value: Any, glue: bool = True) -> None:
        self.numbers[name] = to_jsonable(value)


READING_WORDS = {"stop": "at the stop rule", "best": "best state before any spike", "last": "end of the budget"}


def read_at_points(report: Report, judge: Callable[[Report, Any], None], values_at: dict[str, Any]) -> str:
    """`judge` on `values_at[reading]` for each reading but "stop", whose verdicts are `report`'s (judged
    already, on `values_at["stop"]`); a reading whose value is None has no states (the runs were not
    trained past their stop). Records on each claim of `report` that `judge` judges its verdict and
    estimate at every reading, and whether any reading's verdict differs from the stop's; returns the
    side-by-side table as Markdown."""
    if set(values_at) != set(READINGS):
        raise ValueError(f"values_at must give every reading {READINGS} (None: no states there), got {sorted(values_at)}")
    at: dict[str, Report | None] = {}
    for reading in READINGS[1:]:
        if values_at[reading] is None:
            at[reading] = None
            continue
        shadow = UngluedReport(report.notebook)
        with silenced(), contextlib.redirect_stdout(io.StringIO()):
            judge(shadow, values_at[reading])
        at[reading] = shadow
    judged = [cid for cid in report.claims if any(r is not None and cid in r.claims for r in at.values())]
    for cid in judged:
        entry = report.claims[cid]
        entry["readings"] = {reading: ({"verdict": r.claims[cid]["verdict"], "estimate": r.claims[cid].get("estimate")}
                                       if r is not None and cid in r.claims else None) for reading, r in at.items()}
        entry["reading_sensitive"] = any(v is not None and v["verdict"] != entry["verdict"] for v in entry["readings"].values())
    if not judged:
        return ("*Read at other points*: none; the runs were not trained past their stop "
                "(`read_past_stop` is off in this profile's grid), so only the stop rule's verdicts exist.")
    lines = ["| Claim | " + " | ".join(READING_WORDS[r] for r in READINGS) + " |", "|---|" + "---|" * len(READINGS)]
    for cid in judged:
        entry = report.claims[cid]
        cells = [f"{entry['verdict']}, {estimate_words(entry)}".rstrip(", ")]
        for reading in READINGS[1:]:
            other = entry["readings"][reading]
            if other is None:
                cells.append("not read")
                continue
            moved = " **(differs)**" if other["verdict"] != entry["verdict"] else ""
            cells.append(f"{other['verdict']}{moved}, {estimate_words(other)}".rstrip(", "))
        lines.append(f"| `{cid}` | " + " | ".join(cells) + " |")
    sensitive = [cid for cid in judged if report.claims[cid]["reading_sensitive"]]
    lines += ["", (f"{len(sensitive)} of {len(judged)} verdicts move with where training is read: "
                   + ", ".join(f"`{c}`" for c in sensitive) + ".") if sensitive else
              f"None of the {len(judged)} verdicts moves with where training is read."]
    return "\n".join(lines)
