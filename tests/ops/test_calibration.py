"""geofact.ops.calibration: what a card's stored calibration keeps."""

from geofact.ops.calibration import H100_SPEC, Calibration


def test_a_refit_of_the_rates_drops_the_analyses_factors_fitted_against_the_old_ones(capsys):
    from geofact.ops.calibration import without_analysis_factors

    stored = {"bench": {"device": "cuda (x)"}, "analysis_states": {"readouts": 4}, "analyses_refitted_at": "abc",
              "calibration": {**H100_SPEC.as_dict(), "analysis_factors": {"readouts": 2.0}}}
    kept = without_analysis_factors(stored)
    assert Calibration.from_dict(kept["calibration"]).analysis_factors is None and kept["bench"] == stored["bench"]
    assert "analysis_states" not in kept and "analyses_refitted_at" not in kept
    assert "run bench/calibrate_analyses.py again" in capsys.readouterr().out
    assert stored["calibration"]["analysis_factors"] == {"readouts": 2.0}  # the file read is not changed in place
    without_analysis_factors(kept)
    assert capsys.readouterr().out == ""  # nothing to drop, nothing said
