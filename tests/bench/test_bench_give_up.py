"""bench/bench_give_up.py: the hopeless rule replayed on the run cache's trials at other factors and margins."""

import dataclasses
import json

import pytest

from geofact.training.config import TrainConfig
from tests.bench import script

TRIAL = TrainConfig(N=64, R=4, d=8, batch_size=64, max_steps=1000, stop_accuracy=(0.9, 100), give_up=2.0)  # 231 of 256


def write(cache, config: TrainConfig, counts: list[int], steps: int, **extra) -> None:
    curve = [(100 * (i + 1), c / 256) for i, c in enumerate(counts)]
    record = {"schema": "geofact.training.run/1", "config": config.as_dict(), "accuracy": counts[-1] / 256, "steps": steps, "accuracy_curve": curve, **extra}
    (cache / f"{config.key()}.json").write_text(json.dumps(record))


def test_the_replay_counts_stops_savings_and_the_false_stops_of_a_looser_rule(tmp_path):
    give_up = script("bench_give_up")
    plateau = dataclasses.replace(TRIAL, seed=0)  # gave up at its fifth check, the middle of its budget; its audit never crosses
    write(tmp_path, plateau, [20, 80, 80, 80, 80], 500, gave_up=True)
    write(tmp_path, dataclasses.replace(plateau, give_up=None), [20, 80, 80, 80, 80, 81, 81, 82, 82], 1000)
    late = dataclasses.replace(TRIAL, seed=1)  # slows down, then speeds up again and crosses at check 9
    write(tmp_path, late, [40, 100, 105, 110, 125, 150, 180, 210, 235], 900, gave_up=False)
    write(tmp_path, dataclasses.replace(TRIAL, seed=2), [20, 80, 80, 80, 80], 500, gave_up=True)  # no audit: left out
    trials, missing = give_up.whole_curves(tmp_path)
    assert missing == 1 and sorted((t[0].seed, t[2], t[3]) for t in trials) == [(0, False, 1000), (1, True, 900)]
    page = give_up.replay(trials, 2.0, 2.0)
    assert page["stopped"] == 1 and page["false stops"] == [] and page["saved"] == pytest.approx(500 / 1900)
    loose = give_up.replay(trials, 2.0, 0.0)  # without the margin the late one gives up at check 5 (208 < 231)
    assert loose["stopped"] == 2 and [f["seed"] for f in loose["false stops"]] == [1]
    assert loose["saved"] == pytest.approx((500 + 400) / 1900)
    early = give_up.replay(trials, 2.0, 0.0, start=4)  # from the fourth check both stop at 400
    assert early["start"] == 4 and early["saved"] == pytest.approx((600 + 500) / 1900) and len(early["false stops"]) == 1
