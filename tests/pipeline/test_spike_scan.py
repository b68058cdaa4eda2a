"""geofact spikes: reads run caches and pack archives, prints the rule's counts and every spiking run."""

import json
import tarfile

from geofact.spikes import SpikeRule
from geofact.pipeline.cli import main
from geofact.ops.pack import read_run_records
from geofact.pipeline.spike_scan import report

CONFIG = {"N": 128, "R": 2, "d": 96, "frozen_embeddings": False, "attention": "uniform", "lr": 1e-3, "batch_size": 128,
          "precision": "fp32"}


def record(seed: int, tail: list[float]) -> dict:
    curve = [[i * 100, 6.0 * (1e-4 / 6.0) ** (i / 39)] for i in range(40)]
    curve += [[4000 + 100 * (i + 1), loss] for i, loss in enumerate(tail)]
    return {"config": {**CONFIG, "seed": seed}, "loss_curve": curve, "stopped_early": False, "steps": curve[-1][0],
            "accuracy": 1.0}


def write_cache(folder):
    folder.mkdir(parents=True)
    (folder / "a.json").write_text(json.dumps(record(0, [2.0, 1e-4])))  # spikes, comes back
    (folder / "b.json").write_text(json.dumps(record(1, [1.5e-4, 2e-4])))  # quiet
    (folder / "c.json").write_text(json.dumps({"config": CONFIG}))  # an analysis record: no loss curve
    return folder


def test_a_cache_and_an_archive_of_it_read_the_same(tmp_path):
    cache = write_cache(tmp_path / "node" / ".geofact" / "runs")
    archive = tmp_path / "lease.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(cache, arcname=".geofact/runs")
    assert len(read_run_records(cache)) == 2
    assert read_run_records(archive) == read_run_records(cache)


def test_the_report_names_the_spiking_run_and_the_rule(tmp_path, capsys):
    cache = write_cache(tmp_path / "runs")
    text = report([cache], SpikeRule())
    assert "2 runs with a loss curve" in text and "spiking runs at floor 0.0003, factor 10 (1):" in text
    (row,) = [line for line in text.splitlines() if line.startswith("  128 2 96")]
    assert " 0 | 1  4100  " in row and "yes  no" in row  # seed 0: one spike at step 4100, back, did not meet the stop rule
    assert main(["--root", str(tmp_path), "spikes", str(cache), "--factor", "1e5"]) == 0
    assert "factor 100000 (0)" in capsys.readouterr().out


def test_nothing_to_read_and_a_bad_rule_are_errors(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert main(["--root", str(tmp_path), "spikes", str(tmp_path / "empty")]) == 1
    assert "no run records" in capsys.readouterr().err
    assert main(["--root", str(tmp_path), "spikes", str(write_cache(tmp_path / "runs")), "--factor", "0.5"]) == 1
    assert "factor must be" in capsys.readouterr().err
