import json

import numpy as np
import pytest

from geofact.evidence import FAILS, HOLDS, NOT_IN_REGIME
from geofact.pages.report import Report
from geofact.regime import claim_in_regime, mark_not_in_regime, regime


def rec(accuracy: float, stopped: bool, steps: int = 100, loss: float = 1e-5) -> dict:
    return {"accuracy": accuracy, "stopped_early": stopped, "steps": steps, "final_loss": loss}


def test_converged_fraction_counts_only_runs_that_memorise():
    runs = [rec(1.0, True), rec(1.0, True), rec(0.995, False, 500, 3e-3), rec(0.4, False, 500, 2.0)]
    r = regime(runs, headroom=[1.0, 2.0, 8.0, np.nan])
    assert (r.runs, r.memorised, r.converged) == (4, 3, 2) and r.converged_fraction == pytest.approx(2 / 3)
    assert r.headroom_max == 8.0 and r.max_steps_taken == 500 and r.max_final_loss == 2.0
    assert not r.ok and any("2 of 3 memorising runs met the stop rule" in why for why in r.reasons)


def test_headroom_below_the_paper_grid_is_out_of_regime():
    r = regime([rec(1.0, True)] * 10, headroom=[1.0, 2.7])
    assert r.converged_fraction == 1.0 and not r.ok and r.reasons == ["largest judged headroom d/d_min = 2.7 < 6"]
    assert regime([rec(1.0, True)] * 10, headroom=[6.0]).ok


def test_a_verdict_out_of_regime_is_recorded_as_such_never_as_does_not_hold():
    report = Report("nb")
    claim_in_regime(report, "c-out", holds=False, measured="0.5", regime=regime([rec(1.0, False)], [8.0]))
    claim_in_regime(report, "c-in", holds=False, measured="0.5", regime=regime([rec(1.0, True)], [8.0]))
    out, inside = report.claims["c-out"], report.claims["c-in"]
    assert out["verdict"] == NOT_IN_REGIME and "the rule alone gives 'does not hold'" in out["note"]
    assert inside["verdict"] == "does not hold" and inside["regime"]["ok"] is True
    json.dumps(report.as_dict(), allow_nan=False)  # NaN-free JSON


def test_regime_needs_runs():
    with pytest.raises(ValueError, match="at least one run record"):
        regime([], [])


def test_a_test_against_an_alternative_out_of_regime_is_not_in_regime():
    import math

    from geofact.evidence import Contrast, Estimate, Range
    from geofact.regime import judge_in_regime

    contrast = Contrast(Estimate("beta", 1.0, 0.8, 1.2, 0.95, "t", 4), Range(0.75, 1.25, "linear"), Range(-math.inf, 0.25, "flat"))
    report = Report("nb")
    judge_in_regime(report, "in", contrast, measured="m", population={"p": 1}, regime=regime([rec(1.0, True)], [8.0]))
    judge_in_regime(report, "out", contrast, measured="m", population={"p": 1}, regime=regime([rec(1.0, False)], [8.0]))
    assert report.claims["in"]["verdict"] == "holds" and report.claims["in"]["population"] == {"p": 1}
    assert report.claims["out"]["verdict"] == NOT_IN_REGIME and "the rule alone gives 'holds'" in report.claims["out"]["note"]


def test_a_claim_out_of_the_papers_regime_keeps_what_the_rule_alone_gives():
    entry = {"verdict": HOLDS, "measured": "alpha 0.5", "note": "alpha ~ 0.5 within 0.1"}
    mark_not_in_regime(entry, "runs ended at the step budget", "the curve never passes d = 64")
    assert entry["verdict"] == NOT_IN_REGIME
    assert entry["note"] == ("runs ended at the step budget; the curve never passes d = 64; the rule alone gives 'holds'; "
                             "alpha ~ 0.5 within 0.1")
    bare = {"verdict": FAILS, "measured": "x", "note": ""}
    mark_not_in_regime(bare, "unconverged")
    assert bare["note"] == "unconverged; the rule alone gives 'does not hold'"
