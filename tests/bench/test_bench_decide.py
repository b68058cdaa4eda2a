"""bench/bench_decide.py: the recheck's decisions through whole logits against the fused kernel."""

import json
import subprocess
import sys

from tests.bench import ROOT


def test_a_row_per_d_with_torchs_time_and_rates_on_a_cpu():
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_decide.py"), "--device", "cpu", "--N", "256",
                           "--d", "16", "48", "--rows", "512", "--repeats", "2", "--json"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert [r["d"] for r in rows] == [16, 48] and all(r["rows"] == 512 and r["device"] == "cpu" for r in rows)
    assert all(r["torch_ms"] > 0 and r["torch_gbps"] > 0 and "kernel_ms" not in r for r in rows)  # no kernel on a CPU
    bad = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_decide.py"), "--device", "cpu", "--d", "0"],
                         capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert bad.returncode != 0 and "--d" in bad.stderr
