"""A page's verdicts read at three points of training (geofact.pages.readings)."""

import numpy as np
import pytest

from geofact.evidence import Contrast, Range, t_interval
from geofact.pages import display as display_module
from geofact.pages.readings import read_at_points
from geofact.pages.report import Report


def judge(report: Report, values: np.ndarray) -> None:
    """A page's verdict code: one claim on a mean, with a table it shows and a number it glues."""
    display_module.display("a table the page shows once")
    print("a line the page prints once")
    report.number("mean", float(np.mean(values)))
    estimate = t_interval(values, "mean", 0.95, unit="cells")
    report.claims["c-high"] = {"verdict": Contrast(estimate, Range(0.8, 1.0, "high"), Range(0.0, 0.8, "low")).verdict,
                               "estimate": estimate.as_dict(), "measured": ""}


def test_the_other_points_are_judged_quietly_into_reports_never_glued_and_recorded_beside_the_stop(monkeypatch, capsys):
    import myst_nb

    shown, glued = [], []
    monkeypatch.setattr(display_module, "_show", lambda *objs, **kw: shown.append(objs))
    monkeypatch.setattr(myst_nb, "glue", lambda name, value, display=True: glued.append((name, value)))
    report = Report("nb")
    stop = np.array([0.9, 0.92, 0.95])
    judge(report, stop)
    assert len(shown) == 1 and glued == [("mean", pytest.approx(stop.mean()))]
    table = read_at_points(report, judge, {"stop": stop, "best": np.array([0.9, 0.93, 0.94]),
                                           "last": np.array([0.2, 0.3, 0.25])})
    assert len(shown) == 1 and len(glued) == 1  # nothing shown or glued again
    assert capsys.readouterr().out.count("prints once") == 1
    entry = report.claims["c-high"]
    assert entry["verdict"] == "holds" and entry["reading_sensitive"]
    assert entry["readings"]["best"]["verdict"] == "holds" and entry["readings"]["last"]["verdict"] == "does not hold"
    assert entry["readings"]["last"]["estimate"]["value"] == pytest.approx(0.25)
    assert "| `c-high` | holds, 0.923 [" in table and "does not hold **(differs)**, 0.25 [" in table
    assert "1 of 1 verdicts move" in table
    assert report.numbers["mean"] == pytest.approx(stop.mean())  # the other points' numbers stay in their own reports


def test_without_states_past_the_stop_only_the_stop_is_read():
    report = Report("nb")
    judge(report, np.array([0.9, 0.92, 0.95]))
    table = read_at_points(report, judge, {"stop": None, "best": None, "last": None})
    assert "only the stop rule's verdicts exist" in table and "readings" not in report.claims["c-high"]
    with pytest.raises(ValueError, match="every reading"):
        read_at_points(report, judge, {"stop": None, "best": None})
