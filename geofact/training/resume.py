"""Time-budgeted, resumable training: a stacked group checkpoints in flight and resumes where it stopped.

A group of stacked runs (`trainer.train_group`, `hop_trainer.train_multihop`) can take many
minutes at the paper's scale, longer than a cluster job or a lent node may run. With a
`GroupCheckpoint` it writes its whole state (the stacked weights, AdamW moments and step counts, which
runs have stopped, the curves and kept checkpoints so far) every `every_s` seconds of training, at a
boundary between blocks of steps (single-hop) or at an accuracy check (multi-hop), and a later call
with the same runs starts from there. Batches are a function of (seed, step)
(`geofact.training.data.batch_indices`, `multihop.BatchSampler`) and the state is restored bit for bit, so a resumed group
produces the same records as one that was never interrupted (on the same device and thread count;
only its wall time differs). Files are written atomically, so a process killed at any moment (SIGKILL
included) loses at most the steps since the last checkpoint and never leaves a torn file.

The time budget: `geofact run --budget S` (or `GEOFACT_DEADLINE`, a Unix time, in the environment)
sets a deadline. Sweeps start no new group after it, and a group in flight checkpoints at its next
block boundary past it and raises `BudgetSpent`; running the same command again resumes.

Files live in `<cache_dir>/groups/`: `<digest>.json` names the group's runs (written before the
first state, so a sweep can re-form exactly that group) and `<digest>.npz` holds the latest state:
arrays under their names plus the scalar state as JSON bytes under `meta` (no pickles). Both are
deleted once the group's records are written.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from geofact.settings import past_deadline
from geofact.store import keyed, read_arrays, record_key, write_arrays, write_atomically

SCHEMA = "geofact.training.group-state/1"
DEFAULT_EVERY_S = 120.0  # a group's state is written at most this often (and at the deadline)
MAX_OVERHEAD = 0.05  # and no more often than keeps writing it under this fraction of the training time


class BudgetSpent(RuntimeError):
    """The time budget ran out; what was in flight is checkpointed and the same call again resumes it."""


@dataclass
class GroupState:
    """Everything a stacked trainer needs to continue a group at the start of step `step`."""

    step: int
    alive: list[int]  # runs (indices into the group's configs) still in the stack, in stack order
    tensors: dict[str, torch.Tensor]  # the stack and its AdamW state (`stack_state`), and the trainer's own
    meta: dict  # the trainer's JSON-able bookkeeping: curves, losses, stop reasons
    seconds: float  # training wall time behind this state
    weights: dict[str, dict[str, torch.Tensor]] = field(default_factory=dict)  # named weight sets (a run's final or kept weights)


def stack_state(update) -> dict[str, torch.Tensor]:
    """The stacked weights and AdamW state of a `stack.StackedUpdates`, to save."""
    return {"flat": update.stack.flat, "m": update.opt.m, "v": update.opt.v, "t": update.opt.t}


def restore_stack(update, tensors: dict[str, torch.Tensor]) -> None:
    """Put saved `stack_state` back into a StackedUpdates of the same shape (its views stay valid)."""
    for name, buffer in stack_state(update).items():
        buffer.copy_(tensors[name].to(buffer.device))


class GroupCheckpoint:
    """Where one group of runs (config keys `keys`, trained with `settings`) keeps its state."""

    def __init__(self, directory: Path, keys: list[str], settings: dict, every_s: float = DEFAULT_EVERY_S) -> None:
        if every_s < 0:
            raise ValueError(f"every_s must be >= 0 seconds, got {every_s}")
        self.directory, self.keys, self.settings, self.every_s = Path(directory), list(keys), dict(settings), every_s
        content = {"keys": self.keys, "settings": self.settings}
        key = record_key(content)
        self.index, self.state_path = (keyed(self.directory / f"{key}{suffix}", content) for suffix in (".json", ".npz"))
        self._last = time.monotonic()
        self._interval = every_s

    def load(self) -> GroupState | None:
        """The latest state written for this group, or None."""
        if not self.state_path.exists():
            return None
        arrays = read_arrays(self.state_path)
        meta = json.loads(bytes(arrays.pop("meta")).decode())
        if meta.get("schema") != SCHEMA or meta["keys"] != self.keys or meta["settings"] != self.settings:
            raise ValueError(f"{self.state_path} holds the state of another group; delete it to start that group afresh")
        arrays = {k: torch.from_numpy(v) for k, v in arrays.items()}
        weights: dict[str, dict[str, torch.Tensor]] = {}
        for name, value in arrays.items():
            if name.startswith("weights/"):
                group, param = name[len("weights/"):].rsplit("/", 1)
                weights.setdefault(group, {})[param] = value
        tensors = {k[len("state/"):]: v for k, v in arrays.items() if k.startswith("state/")}
        return GroupState(step=meta["step"], alive=meta["alive"], tensors=tensors, meta=meta["trainer"],
                          seconds=meta["seconds"], weights=weights)

    def due(self) -> bool:
        """Whether the state should be written now: `every_s` since the last write (longer when a write
        is slow: a paper-scale stack on a GPU is gigabytes), or past the deadline."""
        return time.monotonic() - self._last >= self._interval or past_deadline()

    def save(self, state: GroupState) -> None:
        started = time.monotonic()
        self.directory.mkdir(parents=True, exist_ok=True)
        if not self.index.exists():
            write_atomically(self.index, json.dumps({"schema": SCHEMA, "keys": self.keys, "settings": self.settings}).encode(),
                             sync=True)
        meta = {"schema": SCHEMA, "keys": self.keys, "settings": self.settings, "step": state.step, "alive": state.alive,
                "seconds": state.seconds, "trainer": state.meta}
        arrays = {f"state/{k}": v.detach().cpu().numpy() for k, v in state.tensors.items()}
        for group, weights in state.weights.items():
            arrays |= {f"weights/{group}/{k}": v.detach().cpu().numpy() for k, v in weights.items()}
        arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
        write_arrays(self.state_path, arrays, compress=False, sync=True)
        self._last = time.monotonic()
        if self.every_s > 0:
            self._interval = max(self.every_s, (self._last - started) / MAX_OVERHEAD)

    def save_or_stop(self, state: GroupState, max_steps: int, n_runs: int) -> None:
        """Write the group's state; past the deadline of a time budget, stop the group with BudgetSpent (the
        same call again resumes from what was written)."""
        self.save(state)
        if past_deadline():
            raise BudgetSpent(f"time budget spent at step {state.step} of {max_steps}; {len(state.alive)} of {n_runs} runs "
                              f"checkpointed in {self.state_path.parent}")

    def clear(self) -> None:
        """Forget the group (its records are written)."""
        self.state_path.unlink(missing_ok=True)
        self.index.unlink(missing_ok=True)


def pending_groups(directory: Path) -> list[tuple[list[str], dict]]:
    """(keys, settings) of every group with a state written in `directory`, to be re-formed and resumed."""
    out = []
    for index in sorted(Path(directory).glob("*.json")):
        if not index.with_suffix(".npz").exists():
            continue  # killed before its first state: nothing to resume
        meta = json.loads(index.read_text())
        if meta.get("schema") == SCHEMA:
            out.append((meta["keys"], meta["settings"]))
    return out
