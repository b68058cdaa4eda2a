"""The shards a GPU lease runs its CUDA tests in (tools/lease.sh, GEOFACT_TEST_SHARD in tests/conftest.py): n pytest
processes at once, which together run every test once."""

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FILE = "tests/test_intervals.py"  # any file of several tests: collecting it is quick


def _collected(shard: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("GEOFACT_TEST_SHARD", "PYTEST_XDIST_WORKER")}
    if shard is not None:
        env["GEOFACT_TEST_SHARD"] = shard
    return subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", FILE],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=120)


def _ids(done: subprocess.CompletedProcess) -> list[str]:
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return [line for line in done.stdout.splitlines() if "::" in line]


def test_three_shards_run_every_test_once():
    everything = _ids(_collected(None))
    shards = [_ids(_collected(f"{i}/3")) for i in range(3)]
    assert len(everything) >= 6 and all(shards)
    assert sorted(sum(shards, [])) == sorted(everything)  # each test in exactly one shard


def test_a_bad_shard_names_the_variable_and_the_range():
    done = _collected("3/3")
    assert done.returncode != 0 and "GEOFACT_TEST_SHARD must be 'i/n' with 0 <= i < n, got '3/3'" in done.stdout + done.stderr
