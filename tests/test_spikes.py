"""geofact.spikes: the rule finds planted rebounds, ignores noise and unmemorised runs, and
counts the GPU lease's records as issue 46 reports them."""

import json
import math
import random
import tarfile
from pathlib import Path

import pytest

from geofact.spikes import FirstSpikeWatch, RunSpikes, SpikeRule, after_stop, count, find_spikes, sensitivity, spike_rows

# the archive of the first two GPU leases, as issue 46 counted it (later leases' archives replace it under
# results/paper/records/ and train some of its runs again, so the test keeps its own copy)
LEASE = Path(__file__).resolve().parent / "data" / "lease-2026-11-26-h200.tar.gz"


def descent(steps: int = 50, start: float = 6.0, end: float = 1e-4, every: int = 100) -> list[tuple[int, float]]:
    """A loss falling geometrically from `start` to `end` over `steps` logged points."""
    return [(i * every, start * (end / start) ** (i / (steps - 1))) for i in range(steps)]


def then(curve: list[tuple[int, float]], losses: list[float], every: int = 100) -> list[tuple[int, float]]:
    last = curve[-1][0]
    return curve + [(last + every * (i + 1), loss) for i, loss in enumerate(losses)]


def test_a_planted_rebound_is_found_with_its_start_peak_and_end():
    curve = then(descent(), [1.2e-4, 0.05, 4.0, 0.3, 9e-4, 2e-4])
    (spike,) = find_spikes(curve)
    base_step = curve[49][0]
    assert spike.start == base_step + 200 and spike.peak_step == base_step + 300 and spike.peak == 4.0
    assert spike.base == pytest.approx(1e-4) and spike.height == pytest.approx(4e4)
    assert spike.end == base_step + 500 and spike.recovered  # 9e-4 <= 10 x 1e-4


def test_noise_below_the_factor_and_a_run_that_never_memorised_have_no_spikes():
    rng = random.Random(0)
    noisy = then(descent(), [1e-4 * rng.uniform(0.5, 4.5) for _ in range(200)])  # at most 9x its own minimum
    assert find_spikes(noisy) == []
    assert len(find_spikes(noisy, SpikeRule(factor=3.0))) > 0
    not_memorised = then(descent(end=1e-2), [1e-2 * rng.uniform(0.5, 500.0) for _ in range(50)])
    assert find_spikes(not_memorised) == []  # large swings, but the minimum never fell below the floor
    assert not RunSpikes.of({"loss_curve": not_memorised}).memorised


def test_two_spikes_an_unrecovered_end_and_a_nan_count():
    curve = then(descent(), [3.0, 1e-4, 5e-5, 0.2, 0.1])
    first, second = find_spikes(curve)
    assert first.recovered and first.height == pytest.approx(3e4)
    assert second.base == pytest.approx(5e-5)  # the minimum after the first spike
    assert not second.recovered and second.end is None and second.peak == 0.2
    (diverged,) = find_spikes(then(descent(), [math.nan, math.nan]))
    assert diverged.peak == math.inf and not diverged.recovered


def test_the_counts_move_monotonically_with_the_rule():
    rng = random.Random(1)
    records = [{"loss_curve": then(descent(end=10 ** rng.uniform(-5, -2)),
                                   [10 ** rng.uniform(-5, 1) for _ in range(rng.randint(0, 5))])} for _ in range(60)]
    counts = {(c.floor, c.factor): c for c in sensitivity(records, floors=(3e-4, 1e-3), factors=(3.0, 10.0, 100.0))}
    for floor in (3e-4, 1e-3):
        assert counts[floor, 3.0].spiked >= counts[floor, 10.0].spiked >= counts[floor, 100.0].spiked
    for factor in (3.0, 10.0, 100.0):  # a higher floor admits more runs as memorised
        assert counts[1e-3, factor].memorised >= counts[3e-4, factor].memorised
    assert counts[3e-4, 10.0].spiked > 0 and counts[3e-4, 100.0].spiked < counts[3e-4, 3.0].spiked


def test_rows_name_the_run_and_the_stop_rule():
    records = {("learned", 4, 32, 0): {"loss_curve": then(descent(), [2.0, 1e-4]), "stopped_early": False, "steps": 15000},
               ("learned", 4, 32, 1): {"loss_curve": descent(), "stopped_early": True, "steps": 4900}}
    (row,) = spike_rows(records)
    assert row["run"] == ("learned", 4, 32, 0) and row["recovered"] and not row["stopped_early"] and row["steps"] == 15000


@pytest.mark.parametrize("kwargs, name", [({"floor": 0.0}, "floor"), ({"floor": math.inf}, "floor"), ({"factor": 1.0}, "factor"),
                                          ({"factor": math.nan}, "factor")])
def test_bad_rules_name_the_parameter(kwargs, name):
    with pytest.raises(ValueError, match=name):
        SpikeRule(**kwargs)


def test_bad_curves_are_refused():
    with pytest.raises(ValueError, match="steps must increase"):
        find_spikes([(0, 1.0), (100, 0.5), (100, 0.4)])
    with pytest.raises(ValueError, match="loss_curve"):
        RunSpikes.of({"accuracy": 1.0})


def test_the_lease_records_count_as_issue_46_reports():
    """Issue 46: of the 293 lease runs with loss curves, 94 reached a loss below 3e-4, 36 of them later
    rebounded more than 10x and 23 more than 1000x; 14 of the 36 at d = 256."""
    with tarfile.open(LEASE) as archive:
        records = [json.load(archive.extractfile(m)) for m in archive.getmembers()
                   if m.isfile() and m.name.endswith(".json") and "/runs/" in m.name and m.name.count("/") == 2]
    records = [r for r in records if "loss_curve" in r]
    assert len(records) == 293
    ten, thousand = count(records, SpikeRule(3e-4, 10.0)), count(records, SpikeRule(3e-4, 1000.0))
    assert (ten.memorised, ten.spiked, thousand.spiked) == (94, 36, 23)
    rows = spike_rows({i: r for i, r in enumerate(records)})
    assert sum(records[row["run"]]["config"]["d"] == 256 for row in rows) == 14


def test_a_rise_just_after_a_spike_ended_is_its_tail():
    curve = then(descent(every=1), [4.0, 0.01, 9e-4, 1.1e-3, 2e-4] + [1e-4] * 200 + [0.5, 1e-4], every=1)
    tail, later = find_spikes(curve)  # 1.1e-3 three steps after 9e-4 ended it: the same spike; 0.5 much later: another
    assert tail.peak == 4.0 and tail.end == curve[54][0]
    assert later.peak == 0.5
    assert len(find_spikes(curve, SpikeRule(merge_within=0))) == 3
    with pytest.raises(ValueError, match="merge_within"):
        SpikeRule(merge_within=-1)


def test_the_reading_points_are_found_online_where_the_rule_finds_the_first_spike():
    curve = then(descent(every=1), [2e-4, 9e-5, 3e-4, 0.05, 4.0, 0.3, 9e-4, 2e-4, 5e-5, 1.0, 2e-5], every=1)
    watch = FirstSpikeWatch(SpikeRule(), threshold=1e-4)
    for step, loss in curve:
        watch.see(step, loss)
    losses = dict(curve)
    (first, *_) = find_spikes(curve, SpikeRule(merge_within=0))
    p = watch.points
    assert p["before_spike"] == first.start - 1 and losses[first.start] == 0.05
    assert losses[p["best"]] == 9e-5 and p["best"] < first.start  # the lowest loss before it, not the 2e-5 after
    assert losses[p["spike_peak"]] == 4.0
    assert losses[p["recovered"]] == 2e-4 and p["recovered"] > p["spike_peak"]  # back under the floor, not the stop
    assert losses[p["stop"]] == 9e-5  # the first loss under the threshold: before the spike here
    assert p["last"] is None  # the trainer sets it


def test_a_run_that_never_spikes_has_no_spike_points():
    watch = FirstSpikeWatch(SpikeRule(), threshold=1e-4)
    for step, loss in descent(every=1, end=2e-4):
        watch.see(step, loss)
    assert watch.points["best"] == 49 and watch.points["stop"] is None
    assert watch.points["before_spike"] is watch.points["spike_peak"] is watch.points["recovered"] is None


def test_spikes_after_the_stop_are_counted_on_the_curve_past_it():
    before = [(t, 1e-5 if t >= 100 else 1.0) for t in range(0, 310, 10)]  # memorised, stops at step 300
    jumps = {"twice": {400: 5e-3}, "huge": {400: 0.5}, "stuck": {t: 0.5 for t in range(400, 600, 10)}}
    records = [{"loss_curve": before, "stopped_early": True, "steps": 300,
                "past_stop": {"loss_curve": [(t, jump.get(t, 1e-5)) for t in range(310, 600, 10)]}}
               for jump in [{}, *jumps.values()]]
    records += [{"loss_curve": before, "stopped_early": True, "steps": 300},  # not read past its stop: left out
                {"loss_curve": before, "stopped_early": False, "steps": 300, "past_stop": {"loss_curve": []}}]
    counted = after_stop(records)
    assert (counted.stopped, counted.spiked, counted.over_1000, counted.not_back) == (4, 3, 2, 1)
    assert counted.text().startswith("3 of the 4 runs that met the stop rule spiked after it")


def test_a_run_decided_by_its_accuracy_has_not_met_the_loss_rule():
    from geofact.spikes import met_loss_rule

    config = {"loss_threshold": 1e-4, "stop_accuracy": [0.95, 250]}
    assert met_loss_rule({"stopped_early": True, "final_loss": 5e-5, "config": config})
    assert not met_loss_rule({"stopped_early": True, "final_loss": 0.2, "config": config})  # stopped at its crossing
    assert not met_loss_rule({"stopped_early": False, "final_loss": 5e-5, "config": config})
    assert met_loss_rule({"stopped_early": True, "final_loss": 0.2, "config": {"loss_threshold": 1e-4}})  # no accuracy stop
    assert met_loss_rule({"stopped_early": True})  # a record without its config
