"""This checkout's training step counted per stack, for the plan (issue 47, items 1 and 5).

`geofact plan` prices a single-hop group by what its step moves and computes as this checkout's code
runs it (geofact.training.traffic.step_traffic: bytes, FLOPs and ops on fake `meta` tensors) at the rates
its card was fitted to (geofact.ops.calibration.CountedRates), so a change to the step moves the plan
before any GPU has timed it. A count takes about a second a stack; they are kept in
`.geofact/traffic/<code version>.json`, where the code version hashes the trainer's sources (`code_version`):
a change to the step counts again, a change to a page or an analysis reads the kept counts.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch

from geofact.store import write_json
from geofact.training.config import TrainConfig
from geofact.training.traffic import step_traffic


def code_version() -> str:
    """A hash of torch's version and the sources a count runs: geofact/training/ and geofact's top-level modules
    (the trainer imports geofact.host, .store, .task and others there; a change to any of them counts again)."""
    package = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256(torch.__version__.encode())
    for path in sorted([*package.glob("*.py"), *package.glob("training/*.py")]):
        digest.update(str(path.relative_to(package)).encode() + path.read_bytes())
    return digest.hexdigest()[:16]


def stack_key(configs: list[TrainConfig]) -> str:
    """What a stack's count depends on: its runs' configs, their seeds, budgets and loss thresholds aside."""
    runs = sorted(json.dumps({**c.as_dict(), "seed": 0, "max_steps": 0, "loss_threshold": 0.0}, sort_keys=True) for c in configs)
    return hashlib.sha256(json.dumps(runs).encode()).hexdigest()[:24]


class StepCounts:
    """Counted steps {"flops", "bytes", "ops"} by stack, kept under `root`/.geofact/traffic (none: in memory only)."""

    def __init__(self, root: Path | None = None) -> None:
        self.path = None if root is None else Path(root) / ".geofact" / "traffic" / f"{code_version()}.json"
        self.counts: dict[str, dict] = json.loads(self.path.read_text()) if self.path and self.path.exists() else {}

    def __call__(self, configs: list[TrainConfig]) -> dict:
        key = stack_key(configs)
        if key not in self.counts:
            traffic = step_traffic(configs)
            self.counts[key] = {"flops": traffic.flops, "bytes": traffic.bytes, "ops": traffic.ops}
            if self.path is not None:
                write_json(self.path, self.counts)
        return self.counts[key]
