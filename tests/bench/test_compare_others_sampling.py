"""bench/compare_others_sampling.py: a rank sweep with C drawn from a few other relations against the full count."""

import json

import pytest

from tests.bench import script


def write(cache, name, R, step, others, sweep, modules="m1", alpha=1e-3):
    path = cache / "runs" / "x" / "analyses" / "interventions" / f"{name}-{others}-{modules}-{alpha}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    best = max(((f * c) ** 0.5 for _, f, c in sweep))
    path.write_text(json.dumps({"config": {"R": R, "d": 8}, "step": step, "analysis": "interventions",
                                "params": {"held_out": 0.2, "alpha": alpha, "rank_points": 4, "others_per_edit": others},
                                "modules": {"geofact.analysis.interventions": modules},
                                "values": {"selectivity": best, "sweep": sweep}}))


def test_the_sampled_sweeps_are_compared_state_by_state_where_they_draw(tmp_path):
    compare = script("compare_others_sampling")
    write(tmp_path, "a", 8, 100, None, [[1, 0.5, 1.0], [8, 1.0, 0.5]])
    write(tmp_path, "a", 8, 100, 1, [[1, 0.5, 0.9], [8, 1.0, 0.7]])
    write(tmp_path, "b", 2, 100, None, [[1, 0.5, 1.0]])  # R = 2: one other relation, the same count either way
    write(tmp_path, "b", 2, 100, 1, [[1, 0.5, 1.0]])
    write(tmp_path, "a", 8, 100, 1, [[1, 0.5, 0.1], [8, 1.0, 0.1]], modules="m2")  # other code: not paired with m1
    write(tmp_path, "a", 8, 100, 1, [[1, 0.5, 0.1], [8, 1.0, 0.1]], alpha=0.1)  # another parameter: neither
    out = compare.compare(compare.records(tmp_path), 1)
    assert out["states"] == 1 and out["unmatched_states"] == 2 and out["C_every_rank"]["n"] == 2
    assert out["C_every_rank"]["mean"] == pytest.approx(0.05) and out["C_every_rank"]["max_abs"] == pytest.approx(0.2)
    assert out["best_selectivity"]["mean"] == pytest.approx(0.7**0.5 - 0.5**0.5)
    with pytest.raises(ValueError, match="no state was swept both"):
        compare.compare(compare.records(tmp_path), 2)
