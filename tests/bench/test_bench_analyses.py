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
    names = ["load", "interventions", "readouts", "zero-shot-transfer", "accuracy"]
    assert [(r["d"], r["analysis"]) for r in rows] == [(d, name) for d in (8, 16) for name in names]
    assert all(r["seconds"] > 0 and r["steps"] == 20 and r["device"].startswith("cpu") for r in rows)
    assert all(0 <= r["state_accuracy"] <= 1 for r in rows)
    # priced at the CPU's stored calibration (bench/calibration/cpu.json), the plan's per-state work
    assert all(r["predicted_seconds"] > 0 and math.isfinite(r["error"]) and r["calibration"] == "cpu" for r in rows)
    assert rows[6]["predicted_seconds"] > rows[1]["predicted_seconds"]  # a sweep at d = 16 costs more than at 8
    assert rows[5]["predicted_seconds"] > rows[0]["predicted_seconds"]  # and so does loading the state
    for wrong in (["--R", "1"], ["--N", "64", "--R", "65"]):
        bad = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_analyses.py"), "--device", "cpu", *wrong],
                             capture_output=True, text=True, timeout=300, cwd=ROOT)
        assert bad.returncode != 0 and "--R in [2, N]" in bad.stderr


def test_the_state_is_analysed_on_the_device_it_trained_on_as_a_gpu_would(monkeypatch):
    """On the fake 'meta' device that stands in for a GPU (tests/analysis/test_fake_device.py): the trained state is
    moved to the device (a RunResult's weights are the host's copies) and every analysis runs there through the TF32
    path, reading its values back only through `to_host`."""
    import numpy as np
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    from geofact import fast_paths
    from geofact.host import host_reads
    from geofact.training.config import TrainConfig
    from tests.bench import script

    bench = script("bench_analyses")
    monkeypatch.setattr(fast_paths, "FAST_DEVICES", ("meta",))
    reads = []

    def answer(tensors):
        reads.append([t.device.type for t in tensors])
        return tuple(np.zeros(tuple(t.shape), dtype=bool) if t.dtype == torch.bool
                     else np.full(tuple(t.shape), 0.5) if t.dtype.is_floating_point
                     else np.full(tuple(t.shape), 10**6 if t.ndim else 0, dtype=np.int64) for t in tensors)

    config = TrainConfig(N=64, R=4, d=16, batch_size=64, max_steps=5, lr=1e-3, loss_threshold=0.0)
    with FakeTensorMode(allow_non_fake_inputs=True), host_reads(answer):
        model = bench.trained(config, torch.device("meta"))
        assert model.device.type == "meta" and all(v.device.type == "meta" for v in model.weights.values())
        for name, fn in bench.analyses(model).items():
            fn()
    assert reads and all(kind == "meta" for call in reads for kind in call)


def test_it_runs_where_a_gpu_lease_runs_without_the_jupyter_packages(tmp_path):
    import os

    from tests.pipeline.test_pipeline import node_python

    python = node_python(tmp_path / "node")
    done = subprocess.run([str(python), str(ROOT / "bench" / "bench_analyses.py"), "--device", "cpu", "--N", "64",
                           "--R", "4", "--d", "8", "--steps", "5", "--repeats", "1", "--json"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert len(done.stdout.splitlines()) == 5
