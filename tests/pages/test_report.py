import json

import numpy as np
import pytest

from geofact.pages.report import Report
from geofact.settings import RESULTS_PATH_ENV
from geofact.store import to_jsonable


def test_report_writes_json_where_the_runner_says(tmp_path, monkeypatch):
    out = tmp_path / "r.json"
    monkeypatch.setenv(RESULTS_PATH_ENV, str(out))
    r = Report("nb")
    r.number("x", np.float64(0.25), glue=False)
    r.claim("c1", holds=False, measured="0.25")
    r.save()
    data = json.loads(out.read_text())
    assert data == {"notebook": "nb", "numbers": {"x": 0.25}, "claims": {"c1": {"verdict": "does not hold", "measured": "0.25", "note": ""}}}


def test_interactive_save_writes_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv(RESULTS_PATH_ENV, raising=False)
    Report("nb").save()
    assert "not saved" in capsys.readouterr().out


def test_claims_are_reported_once():
    r = Report("nb")
    r.claim("c", holds=True, measured="m")
    with pytest.raises(ValueError, match="twice"):
        r.claim("c", holds=True, measured="m")


def test_to_jsonable():
    assert to_jsonable({"a": np.arange(3), "b": (np.int64(2), float("inf"))}) == {"a": [0, 1, 2], "b": [2, "inf"]}


def test_a_claim_not_run_is_recorded_with_why_and_only_once():
    report = Report("exp-real-lm-probing")
    report.not_run("exp-real-lm-layer0", "no model could be loaded")
    assert report.claims["exp-real-lm-layer0"] == {"verdict": "not run", "measured": "nothing", "note": "no model could be loaded"}
    with pytest.raises(ValueError, match="reported twice"):
        report.claim("exp-real-lm-layer0", holds=True, measured="x")


def test_a_report_records_the_scale_its_verdicts_were_taken_at():
    r = Report("nb")
    assert "scale" not in r.as_dict()  # a page that states none records none
    r.scale("N = 128 (paper 4096),\n  3 seeds")
    assert r.as_dict()["scale"] == "N = 128 (paper 4096), 3 seeds"
    with pytest.raises(ValueError, match="scale needs a description"):
        r.scale("  ")
