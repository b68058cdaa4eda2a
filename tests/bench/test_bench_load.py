"""bench/bench_load.py: a state's weights read by geofact's reader against np.load's, and loaded to the device."""

import json
import subprocess
import sys

from tests.bench import ROOT


def test_a_row_per_d_with_both_readers_timed_and_bad_input_named():
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_load.py"), "--N", "256", "--R", "4", "--d", "8",
                           "32", "--repeats", "3", "--json"], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert [r["d"] for r in rows] == [8, 32] and rows[1]["MB"] > rows[0]["MB"] > 0
    assert all(r["np_load_ms"] > 0 and r["read_ms"] > 0 and r["load_ms"] > 0 and r["ratio"] > 0 for r in rows)
    assert all(r["device"].startswith("cpu") for r in rows)
    overlap = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_load.py"), "--N", "64", "--R", "2", "--d", "8",
                              "--repeats", "1", "--overlap", "3", "--wait-ms", "1", "--json"],
                             capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert overlap.returncode == 0, overlap.stderr[-2000:]
    batch = [json.loads(line) for line in overlap.stdout.splitlines()][1]  # after the d's reading row
    assert batch["states"] == 3 and batch["when_asked_s"] >= batch["waits_s"] and batch["read_ahead_s"] >= batch["waits_s"]
    bad = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_load.py"), "--d", "0"], capture_output=True,
                         text=True, timeout=300, cwd=ROOT)
    assert bad.returncode != 0 and "--d must be at least 1, got 0" in bad.stderr
