"""bench/calibrate_analyses.py: a card's analyses refitted to the states it timed, stored in its calibration."""

import json
import math
import shutil
import subprocess
import sys

from geofact.ops.calibration import load_calibration
from geofact.ops.costs import STATE_WORK, Analysis, _loaded
from geofact.training.config import TrainConfig
from tests.bench import ROOT, script

H100, H200 = "cuda (NVIDIA H100 80GB HBM3)", "cuda (NVIDIA H200)"
PARAMS = {"held_out": 0.25, "alpha": 1e-3, "rank_points": 4, "split_seed": 0, "others_per_edit": 1}


def run(root, *args):
    return subprocess.run([sys.executable, str(ROOT / "bench" / "calibrate_analyses.py"), "--root", str(root), *args],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)


def test_a_cards_timed_states_and_bench_rows_refit_its_analyses_alone(tmp_path):
    (tmp_path / "bench" / "calibration").mkdir(parents=True)
    for card in ("h100", "h200"):
        shutil.copy(ROOT / "bench" / "calibration" / f"cuda-{card}.json", tmp_path / "bench" / "calibration")
    plain = load_calibration(tmp_path, "cuda", "h100")
    config = TrainConfig(N=64, R=8, d=16, batch_size=64, max_steps=40)
    price = Analysis("", "interventions", 1, STATE_WORK["interventions"][0](config, PARAMS),
                     name="interventions").seconds(plain)
    folder = tmp_path / ".geofact" / "runs" / "analyses" / "interventions"
    folder.mkdir(parents=True)
    # two states (records alike are read once), and another card's, which refit nothing
    for i, (device, times) in enumerate([(H100, 2.0)] * 2 + [(H200, 9.0)] * 4):
        folder.joinpath(f"s{i}.json").write_text(json.dumps(
            {"schema": "geofact.analysis.state/1", "analysis": "interventions", "config": config.as_dict(), "params": PARAMS, "step": 10 + i,
             "seconds": {"analysis": times * price, "load": 0.01, "accuracy": None, "warm": True},
             "provenance": {"device": device}}))
    # the lease's benchmark: one state, its load and its sweep, both 2x the plan's price at its shape
    bench_config = TrainConfig(N=64, R=8, d=16, batch_size=64, max_steps=20, lr=1e-3, loss_threshold=0.0)
    bench_price = Analysis("", "interventions", 1, STATE_WORK["interventions"][0](bench_config, PARAMS),
                           name="interventions").seconds(plain)
    load_price = Analysis("", "", 1, _loaded(bench_config)).seconds(plain)
    shape = {"N": 64, "R": 8, "d": 16, "steps": 20, "device": H100}
    rows = [{**shape, "analysis": "load", "params": {}, "seconds": 2 * load_price},
            {**shape, "analysis": "interventions", "params": PARAMS, "seconds": 2 * bench_price},
            {**shape, "analysis": "accuracy", "params": {}, "seconds": 0.001}]
    bench = tmp_path / "analyses.jsonl"
    bench.write_text("".join(json.dumps(r) + "\n" for r in rows))
    before = (tmp_path / "bench" / "calibration" / "cuda-h100.json").read_text()
    dry = run(tmp_path, "--card", "h100", "--bench", str(bench), "--dry-run")
    assert dry.returncode == 0, dry.stdout + dry.stderr[-2000:]
    assert "interventions: 3 states" in dry.stdout and "factor 2.00" in dry.stdout
    assert (tmp_path / "bench" / "calibration" / "cuda-h100.json").read_text() == before  # nothing stored
    done = run(tmp_path, "--card", "h100", "--bench", str(bench))
    assert done.returncode == 0, done.stderr[-2000:]
    factors = load_calibration(tmp_path, "cuda", "h100").analysis_factors
    assert math.isclose(factors["interventions"], 2.0)
    again = run(tmp_path, "--card", "h100", "--bench", str(bench))  # a second refit finds the same: nothing compounds
    assert again.returncode == 0 and load_calibration(tmp_path, "cuda", "h100").analysis_factors == factors
    # the records' loads (0.01 s) and the bench's (2x its price) over their prices, as one ratio of sums
    loads = 2 * 0.01 + 2 * load_price
    priced = 2 * Analysis("", "", 1, _loaded(config)).seconds(plain) + load_price
    assert math.isclose(factors["load"], loads / priced) and "accuracy" not in factors  # one accuracy: too few
    assert load_calibration(tmp_path, "cuda", "h200").analysis_factors is None
    stored = json.loads((tmp_path / "bench" / "calibration" / "cuda-h100.json").read_text())
    assert stored["analysis_states"] == {"interventions": 3, "load": 3}
    bad = run(tmp_path, "--card", "h300")
    assert bad.returncode != 0 and "--card must be one of the calibrated cuda cards" in bad.stderr


def test_bench_rows_become_records_with_one_load_a_state():
    rows = [{"N": 8, "R": 2, "d": 4, "steps": 5, "device": H100, "analysis": a, "params": {}, "seconds": 0.1}
            for a in ("load", "readouts", "zero-shot-transfer", "accuracy")]
    records = script("calibrate_analyses").bench_records(rows)
    assert [r["analysis"] for r in records] == ["readouts", "zero-shot-transfer", "accuracy"]
    assert [r["seconds"]["load"] for r in records] == [0.1, None, None]
