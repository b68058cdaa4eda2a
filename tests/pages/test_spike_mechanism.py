"""geofact.pages.spike_mechanism: the effects around a spike, the drops by recipe and the call on what
drives an erosion, on planted runs."""

import math

import pytest

from geofact.pages.spike_mechanism import StudyRun, cause_words, erosion_state, reading_table, spike_reading
from geofact.spikes import READING_POINTS


def run(recipe: str, seed: int, values: list[float], at: dict[str, float], points: dict[str, int]) -> StudyRun:
    steps = [i * 1000 for i in range(len(values))]
    full_at = {p: at.get(p) for p in READING_POINTS}
    full_points = {p: points.get(p) for p in READING_POINTS}
    return StudyRun(recipe, seed, steps, values, full_at, full_points, [(0, 5.0), (1, 1e-4)])


def spiking(recipe: str, seed: int, fall: float, end: float) -> StudyRun:
    """Memorised at 0.9 by step 2000, a spike at 3000 that takes the metric down by `fall`, back at 4000
    to 0.9, then `end` at the end of the budget (step 5000)."""
    noise = 0.002 * seed
    values = [0.2, 0.6, 0.9 + noise, 0.9 - fall + noise, 0.9 + noise, end + noise]
    at = {"best": 0.9 + noise, "before_spike": 0.9 + noise, "spike_peak": 0.9 - fall + noise, "recovered": 0.9 + noise,
          "stop": 0.9 + noise, "last": end + noise}
    points = {"best": 2000, "before_spike": 2999, "spike_peak": 3000, "recovered": 4000, "stop": 4000, "last": 5000}
    return run(recipe, seed, values, at, points)


def steady(recipe: str, seed: int, end: float) -> StudyRun:
    noise = 0.002 * seed
    values = [0.2, 0.6, 0.9 + noise, 0.9 + noise, 0.9 + noise, end + noise]
    return run(recipe, seed, values, {"best": 0.9 + noise, "stop": 0.9 + noise, "last": end + noise},
               {"best": 2000, "stop": 2500, "last": 5000})


def test_a_spike_that_knocks_the_structure_down_and_back_is_measured_as_such():
    reading = spike_reading([spiking("paper", s, fall=0.4, end=0.9) for s in range(4)], "readout")
    spike, recovery = reading.effects["paper"]["spike"], reading.effects["paper"]["recovery"]
    assert spike.value == pytest.approx(-0.4) and spike.hi < 0  # an effect
    assert recovery.value == pytest.approx(0.0) and recovery.n == 4
    assert reading.spiked["paper"] == (4, 4)
    assert reading.drop_last["paper"].value == pytest.approx(0.0, abs=1e-9)


@pytest.mark.parametrize("paper_end, wd0, no_spikes, call", [
    (0.6, ("spiking", 0.6), ("steady", 0.9), "spike-driven"),
    (0.6, ("steady", 0.9), ("steady", 0.6), "weight-decay-driven"),
    (0.6, ("spiking", 0.6), ("steady", 0.6), "neither alone"),
    (0.6, ("steady", 0.9), ("steady", 0.9), "both"),
    (0.9, ("steady", 0.9), ("steady", 0.9), "no erosion"),
])
def test_the_cause_follows_the_recipes_that_keep_or_lose_the_erosion(paper_end, wd0, no_spikes, call):
    make = {"spiking": lambda r, s, e: spiking(r, s, 0.3, e), "steady": steady}
    runs = [spiking("paper", s, 0.3, paper_end) for s in range(4)]
    runs += [make[wd0[0]]("wd 0", s, wd0[1]) for s in range(4)]
    runs += [make[no_spikes[0]]("lr/10 after", s, no_spikes[1]) for s in range(4)]
    got, sentence = cause_words(spike_reading(runs, "readout"), tolerance=0.05)
    assert got == call, sentence


def test_a_drop_inside_the_tolerance_or_an_interval_across_it_is_not_called_erosion():
    reading = spike_reading([steady("paper", s, 0.9 - 0.01 * s) for s in range(3)], "readout")
    assert erosion_state(reading.drop_last["paper"], 0.05) == "does not"
    wide = spike_reading([steady("paper", s, e) for s, e in enumerate([0.9, 0.8, 0.6])], "readout")
    assert erosion_state(wide.drop_last["paper"], 0.05) == "cannot tell"
    assert cause_words(wide, 0.05)[0] == "inconclusive"  # an erosion that cannot be told is not "no erosion"


def test_the_table_names_every_recipe_and_point():
    runs = [spiking("paper", s, 0.4, 0.9) for s in range(2)] + [steady("wd 0", s, 0.9) for s in range(2)]
    table = reading_table(runs, spike_reading(runs, "readout"))
    assert "| paper | 2 of 2 |" in table and "| wd 0 | 0 of 2 |" in table
    assert "spike peak" in table and table.count("\n") == 3
    assert not math.isnan(spike_reading(runs, "readout").drop_stop["wd 0"].value)


def test_a_lease_on_other_cells_or_no_kept_states_measure_nothing_and_say_why(monkeypatch, tmp_path):
    from geofact.pages.spike_mechanism import spike_section
    from geofact.training.grid import CELLS_ENV, CapacityGrid

    class Numbers(dict):
        def number(self, name, value, glue=True):
            self[name] = value

    grid = CapacityGrid(N=16, R_values=(1, 2), d_values=(4, 8), seeds=(0,), lr=1e-2, batch_size=16, max_steps=20)
    args = (grid, 2, 8, [0], 20)
    rest = (tmp_path, None, "readouts", {}, "s", "readout", 0.05)
    report = Numbers()
    assert spike_section(report, *args, None, *rest) is None
    assert report["spike_erosion_cause_last"] == "not measured" and "spike_keep_every" in report["spike_erosion_why_last"]
    monkeypatch.setenv(CELLS_ENV, '{"d": [4]}')
    report = Numbers()
    assert spike_section(report, *args, 10, *rest) is None
    assert "lease" in report["spike_erosion_why_stop"]
    assert not list(tmp_path.iterdir())  # nothing trained


def test_the_second_n_study_reports_under_its_own_names_and_says_why_when_it_is_not_given(tmp_path):
    from geofact.pages.spike_mechanism import second_spike_section
    from geofact.training.grid import ladder_grids

    class Numbers(dict):
        def number(self, name, value, glue=True):
            self[name] = value

    grids = ladder_grids(dict(N=16, d_ladders=[{"R": 2, "d_values": [4, 8]}], seeds=[0], lr=1e-2, batch_size=16, max_steps=20))
    rest = (20, 10, tmp_path, None, "readouts", {}, "s", "readout", 0.05)
    for second, cell, words in [(grids, None, "spike_second is None"), ([], None, "no second grid")]:
        report = Numbers()
        assert second_spike_section(report, second, cell, *rest) is None
        assert report["spike_second_erosion_cause_stop"] == "not measured" and words in report["spike_second_erosion_why_last"]
        assert report["spike_second_mech_cell"] == "not measured" and not any(k.startswith("spike_mech") for k in report)
    with pytest.raises(ValueError, match="spike_second's R and d"):
        second_spike_section(Numbers(), grids, {"R": 2, "d": 6, "seeds": [0, 1]}, *rest)
    assert not list(tmp_path.iterdir())  # nothing trained
