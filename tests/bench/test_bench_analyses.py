"""bench/bench_analyses.py: one state's analyses timed beside the plan's price of it."""

import json
import math
import subprocess
import sys

from tests.bench import ROOT


def test_a_row_per_analysis_and_d_with_its_seconds_and_the_plans_price_on_a_cpu():
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_analyses.py"), "--device", "cpu", "--N", "64",
                           "--R", "4", "--d", "8", "16", "--steps", "20", "--repeats", "1", "--json"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    names = ["interventions", "readouts", "zero-shot-transfer", "accuracy"]
    assert [(r["d"], r["analysis"]) for r in rows] == [(d, name) for d in (8, 16) for name in names]
    assert all(r["seconds"] > 0 and r["steps"] == 20 and r["device"].startswith("cpu") for r in rows)
    # priced at the CPU's stored calibration (bench/calibration/cpu.json), the plan's per-state work
    assert all(r["predicted_seconds"] > 0 and math.isfinite(r["error"]) and r["calibration"] == "cpu" for r in rows)
    assert rows[4]["predicted_seconds"] > rows[0]["predicted_seconds"]  # a sweep at d = 16 costs more than at 8
    bad = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_analyses.py"), "--device", "cpu", "--R", "2"],
                         capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert bad.returncode != 0 and "--R >= 3" in bad.stderr
