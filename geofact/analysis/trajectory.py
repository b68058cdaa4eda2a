"""The mechanism analyses along training: every run of a capacity grid, at each kept checkpoint and at
its stop (Section 5.1 takes them once, after training; the trajectory shows whether the structure is
there before, and from when).

    records = train_grid(grid, cache)                     # trains what is missing, keeps the checkpoints
    points = analyse_grid(grid, records, cache, fn, "name", params)  # fn(TrainedModel) -> {metric: value}
    finals = final_values(grid, points, "s")              # {regime: (R, d, seed)} at the stop rule
    at = analyse_readings(grid, records, cache, fn, "name", params, keys)  # {reading: {key: values}} (READINGS)
    curve = value_at_steps(points[key], "s", steps)       # one run's metric at given steps (geofact.pages.curves)

A run that met the stop rule before a checkpoint step has no checkpoint there: its state from then on
is its final one, so `value_at_steps` carries the final value forward.

Each state's analysis is cached as a JSON record (`analysis_path`) under the analysis' name, its
parameters and a hash of the code it reads (geofact.code_hash.analysis_code_hash), so that a page executes from records alone (without the
weights, which stay on the machine that trained them: `geofact pack`), and a change of parameters or
code computes afresh. A record computed since 2026-11-30 also holds its wall seconds (`seconds`: loading the
weights, the analysis, and whether the process had analysed a state of that shape before), which `geofact plan
--check` sets against the plan's price of the same state (geofact.ops.costs.analysis_errors). A checkpoint's accuracy,
which every analysis of it records, is since 2026-11-30 a record of its own ("accuracy", `state_accuracy`): computed by
the first analysis of the state and read by the others (until then, each mechanism page computed it again).
"""

from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from geofact.analysis.trained import TrainedModel
from geofact.code_hash import analysis_code_hash, analysis_modules
from geofact.host import as_device
from geofact.progress import progress
from geofact.settings import past_deadline
from geofact.store import read_record, record_key, to_jsonable, write_json
from geofact.training.grid import CapacityGrid
from geofact.training.resume import BudgetSpent
from geofact.training.sweep import load_weights, provenance, run_sweep, weights_path

SCHEMA = "geofact.analysis.state/1"

Key = tuple[str, int, int, int]  # (regime, R, d, seed)


@dataclass(frozen=True)
class Point:
    """One state of one run: a checkpoint, or the run's final weights."""

    step: int  # updates so far
    loss: float  # training loss of that step's batch
    accuracy: float  # over all N R facts
    final: bool  # the state at the stop rule (or the step budget)
    values: dict[str, Any]  # the analysis' metrics (numbers, or JSON-able data such as a sweep)

    def get(self, metric: str) -> float:
        """A metric of the analysis, or the state's own "loss" / "accuracy"."""
        return getattr(self, metric) if metric in ("loss", "accuracy") else self.values[metric]


def train_grid(grid: CapacityGrid, cache_dir: Path, device: str = "cpu") -> dict[Key, dict]:
    """{key: run record} of every run of the grid, training (with the grid's checkpoints) what is missing."""
    return train_grids([grid], cache_dir, device)[0]


def train_grids(grids: list[CapacityGrid], cache_dir: Path, device: str = "cpu") -> list[dict[Key, dict]]:
    """`train_grid` of each grid, trained as one sweep: runs of one shape in different grids (a second
    grid's ladders, one per R, at a shared d) then stack into one group, and the workers share one queue.
    Grids with different checkpoints are swept apart (a sweep saves one set)."""
    by_checkpoints: dict[tuple[int, ...], list[int]] = {}
    for i, grid in enumerate(grids):
        by_checkpoints.setdefault(tuple(grid.checkpoints), []).append(i)
    out: list[dict[Key, dict]] = [{} for _ in grids]
    for checkpoints, members in by_checkpoints.items():
        configs = [(i, key, config) for i in members for key, config in grids[i].configs().items()]
        records = run_sweep([config for _, _, config in configs], cache_dir, device=device, checkpoints=checkpoints)
        for (i, key, _), record in zip(configs, records):
            out[i][key] = record
    return out


def analysis_path(cache_dir: Path, name: str, config, step: int | None, params: dict, code: str) -> Path:
    """Where one state's analysis record lives: by analysis, run, state and (parameters, code)."""
    digest = record_key({"params": params, "code": code})
    state = "final" if step is None else f"step{step}"
    return Path(cache_dir) / "analyses" / name / f"{config.key()}-{state}-{digest}.json"


# (analysis, N, R, d) this process has computed a state of: the first such state's seconds hold the process's
# warm-up for that shape (on a GPU the libraries' handles, the allocator's growth, Triton's compiles per shape), which
# `geofact plan --check` leaves out (geofact.ops.costs.analysis_errors)
_SHAPES_TIMED: set[tuple] = set()


class Stamp:
    """What a batch of states' analyses are keyed and recorded with, made once for the batch: the hash of the code
    `analyse` reads (0.6 ms) and, when a state is computed, the provenance (git, about 3 ms), which a grid's 3,000
    states a page each paid until 2026-11-30 (about 10 s of a GPU lease's host time a mechanism page)."""

    def __init__(self, analyse: Callable[[TrainedModel], dict[str, Any]], device: str | torch.device) -> None:
        self.modules = analysis_modules(analyse)  # recorded, so that an unpacked record says what keyed it
        self.code = analysis_code_hash(analyse, self.modules)
        self.device = as_device(device)
        self._origin: dict | None = None

    def origin(self) -> dict:
        if self._origin is None:
            self._origin = provenance(self.device)
        return self._origin


def _cell(config) -> tuple[int, int, int]:
    """The order a batch of states is analysed in: cell by cell, (N, R, d), in their order within a cell. What an
    analysis draws on the host from its task and seeds is drawn once per cell or run and kept for a few (the task's
    table, a sweep's edits, a readout's baselines: 0.33 s at N = 4096, R = 16, d = 768 on a CPU, 4 kept); in the
    grid's order (every run's checkpoints, then every run's final state, each regime apart) a cell's states came
    four times apart."""
    return config.N, config.R, config.d


def analyse_state(cache_dir: Path, config, step: int | None, analyse: Callable[[TrainedModel], dict[str, Any]],
                  name: str, params: dict, final_accuracy: float | None = None, device: str | torch.device = "cpu",
                  stamp: Stamp | None = None, reader: Prefetch | None = None) -> dict:
    """One state's analysis record (see the module docstring): cached, or computed from the run's weights
    (final when `step` is None, whose accuracy the run record gives as `final_accuracy`) on `device` and cached.
    `stamp`: the batch's (`Stamp`), made here when not given; `reader`: the batch's (`Prefetch`), which may have read
    the weights already. Past a time budget's deadline a state not yet cached raises `BudgetSpent` instead."""
    stamp = Stamp(analyse, device) if stamp is None else stamp
    path = analysis_path(cache_dir, name, config, step, params, stamp.code)
    record = read_record(path, SCHEMA, config.as_dict())
    if record is None:
        if past_deadline():  # a lease's analyses stop with its budget, like its training: the states done are cached
            raise BudgetSpent(f"time budget spent before the {name} analysis of run {config.key()} at "
                              f"{'its stop' if step is None else f'step {step}'}; the states analysed so far are cached")
        shape = (name, config.N, config.R, config.d)
        start = time.perf_counter()
        weights, read, ahead = (*_timed_read(cache_dir, config, step), False) if reader is None else \
            reader.weights(config, step)
        on_host = time.perf_counter()
        model = TrainedModel(config, {k: v.to(stamp.device) for k, v in weights.items()}, step)  # TrainedModel.load's
        loaded = time.perf_counter()
        accuracy = final_accuracy if step is None and final_accuracy is not None else \
            _shared_accuracy(cache_dir, model)["accuracy"]
        measured = time.perf_counter()
        # an analysis returns numbers read back to the host (it must: they are written as JSON), so the device's work
        # is done when it returns
        values = to_jsonable(analyse(model))
        # "load": what the analysing thread spent on the weights; a state read ahead (`Prefetch`) waited for part of
        # its "read" at most, and its whole loading is the read and the copy to the device
        seconds = {"load": loaded - start, "read": read, "copy": loaded - on_host, "ahead": ahead, "accuracy": None,
                   "analysis": time.perf_counter() - measured, "warm": shape in _SHAPES_TIMED}
        _SHAPES_TIMED.add(shape)
        record = _written(path, stamp, config, name, params, step, accuracy, values, seconds)
    return record


def _written(path: Path, stamp: Stamp, config, name: str, params: dict, step: int | None, accuracy: float,
             values: Any, seconds: dict) -> dict:
    """A state's analysis record, written to `path`."""
    record = {"schema": SCHEMA, "config": config.as_dict(), "analysis": name, "params": params, "code": stamp.code,
              "modules": stamp.modules, "step": step, "accuracy": accuracy, "values": values, "seconds": seconds,
              "provenance": stamp.origin()}
    write_json(path, record)
    return record


class Prefetch:
    """A batch's states' weights, the next one read from the run cache on a thread while the current one is analysed
    (`analyse_states`). The read (geofact.training.weights_file) leaves the interpreter to the analysis, and on a GPU
    the analysis waits on the device: a mechanism page loads 28.6 GB at the paper profile, 0.55 of the H100's planned
    analysis minutes over the three pages (geofact.ops.costs.LOAD_BYTES_PER_SECOND, priced whole until a lease's
    records say how much of it this hides). One state ahead: 49 MB at most (N = 4096, d = 768)."""

    def __init__(self, cache_dir: Path) -> None:
        self.cache_dir = Path(cache_dir)
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="geofact-weights")
        self._ahead: dict[tuple[str, int | None], Future] = {}

    def read_ahead(self, config, step: int | None) -> None:
        """Start reading a state's weights (an error, a missing file say, is raised where they are asked for)."""
        if (config.key(), step) not in self._ahead:
            self._ahead[config.key(), step] = self._pool.submit(_timed_read, self.cache_dir, config, step)

    def weights(self, config, step: int | None) -> tuple[dict[str, torch.Tensor], float, bool]:
        """A state's weights on the host, the seconds their read took (on the reader's thread or this one), and whether
        they were read ahead."""
        future = self._ahead.pop((config.key(), step), None)
        return (*_timed_read(self.cache_dir, config, step), False) if future is None else (*future.result(), True)

    def close(self) -> None:
        """Drop what was read ahead and not asked for, once the read in flight ends."""
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._ahead.clear()


def _timed_read(cache_dir: Path, config, step: int | None) -> tuple[dict[str, torch.Tensor], float]:
    """A state's weights from the run cache (geofact.training.sweep.load_weights) and the seconds the read took."""
    start = time.perf_counter()
    weights = load_weights(cache_dir, config, step)
    return weights, time.perf_counter() - start


def analyse_states(cache_dir: Path, states: list[tuple[Any, int | None, float | None]],
                   analyse: Callable[[TrainedModel], dict[str, Any]], name: str, params: dict,
                   device: str | torch.device = "cpu", desc: str = "analyses") -> list[dict]:
    """`analyse_state` of each (config, step, the run record's accuracy) in order, under one `Stamp`, the weights of
    the next state not yet cached read while the one before is analysed (`Prefetch`)."""
    stamp = Stamp(analyse, device)
    uncached, seen = [], set()  # a state listed twice (two readings at one step) is read once
    for i, (config, step, _) in enumerate(states):
        if (config.key(), step) not in seen and not analysis_path(cache_dir, name, config, step, params, stamp.code).exists():
            uncached.append(i)
            seen.add((config.key(), step))
    after = dict(zip(uncached, uncached[1:]))  # an uncached state -> the next one
    reader = Prefetch(cache_dir)
    out = []
    try:
        for i, (config, step, accuracy) in enumerate(progress(states, desc=desc)):
            if i in after:
                reader.read_ahead(*states[after[i]][:2])
            out.append(analyse_state(cache_dir, config, step, analyse, name, params, accuracy, device, stamp, reader))
    finally:
        reader.close()
    return out


def state_accuracy(model: TrainedModel) -> dict[str, float]:
    """A state's accuracy over its N R facts (TrainedModel.accuracy), which every analysis of a checkpoint records."""
    return {"accuracy": model.accuracy()}


_ACCURACY_STAMPS: dict[torch.device, Stamp] = {}


def _shared_accuracy(cache_dir: Path, model: TrainedModel) -> dict:
    """The record of `state_accuracy` of a loaded state, cached as an analysis of its own ("accuracy"): each mechanism
    page analyses every state of the grid, and until 2026-11-30 each computed the state's accuracy again (a tenth of
    the analyses' planned minutes, geofact.ops.costs). Its `seconds` are the accuracy's ("analysis"; its weights were
    loaded by the analysis that asked, "load" 0). It is keyed by the weights file it was computed from (size and
    modification time, `params["weights"]`), so that a run trained again (a lease retrains the recorded runs for
    their weights) has its accuracy computed again from its own weights."""
    stamp = _ACCURACY_STAMPS.get(model.device)
    if stamp is None:
        stamp = _ACCURACY_STAMPS[model.device] = Stamp(state_accuracy, model.device)
    config, step = model.config, model.step
    made = weights_path(cache_dir, config, step).stat()
    params = {"weights": f"{made.st_size}-{made.st_mtime_ns}"}
    path = analysis_path(cache_dir, "accuracy", config, step, params, stamp.code)
    record = read_record(path, SCHEMA, config.as_dict())
    if record is None:
        shape = ("accuracy", config.N, config.R, config.d)
        start = time.perf_counter()
        values = state_accuracy(model)
        seconds = {"load": 0.0, "accuracy": None, "analysis": time.perf_counter() - start, "warm": shape in _SHAPES_TIMED}
        _SHAPES_TIMED.add(shape)
        record = _written(path, stamp, config, "accuracy", params, step, values["accuracy"], values, seconds)
    return record


def analyse_grid(grid: CapacityGrid, records: dict[Key, dict], cache_dir: Path,
                 analyse: Callable[[TrainedModel], dict[str, Any]], name: str, params: dict,
                 desc: str = "analyses", checkpoints: bool = True, keys: list[Key] | None = None,
                 device: str | torch.device = "cpu") -> dict[Key, list[Point]]:
    """`analyse` on every run's checkpoints and tail states (if `checkpoints`; TrainConfig.keep_tail) and final
    weights, on `device`; models load one at a time (a paper-scale grid does not fit in memory at once).
    `keys` restricts it to some runs.

    Results are cached per state as JSON records under `name` and `params` (every parameter the
    analysis reads besides the model: they key the cache, with a hash of the analysis code), so the
    values `analyse` returns must be JSON-able (numbers, lists, dicts)."""
    configs = grid.configs()
    keys = list(configs) if keys is None else keys
    def wanted(key: Key) -> set[int]:  # a run cached with more checkpoints shows only the grid's, and its tail
        return set(grid.checkpoints) | set(configs[key].tail_steps(records[key]["steps"])) if checkpoints else set()

    states = [(key, cp["step"], cp["loss"]) for key in keys for cp in records[key].get("checkpoints", [])
              if cp["step"] in wanted(key)]
    states += [(key, None, records[key]["final_loss"]) for key in keys]
    states.sort(key=lambda state: _cell(configs[state[0]]))
    out: dict[Key, list[Point]] = {key: [] for key in keys}
    analysed = analyse_states(cache_dir, [(configs[key], step, records[key]["accuracy"]) for key, step, _ in states],
                              analyse, name, params, device, desc)
    for (key, step, loss), record in zip(states, analysed):
        final = step is None
        out[key].append(Point(records[key]["steps"] if final else step, float(loss), record["accuracy"], final,
                              record["values"]))
    for points in out.values():
        points.sort(key=lambda p: (p.step, p.final))
    return out


def final_values(grid: CapacityGrid, points: dict[Key, list[Point]], metric: str) -> dict[str, np.ndarray]:
    """{regime: (R, d, seed)} of a metric at each run's stop."""
    return grid.by_cell({key: pts[-1].get(metric) for key, pts in points.items()})


READINGS = ("stop", "best", "last")
"""Where a verdict reads a run (issue 46, item 4): at the paper's stop rule (what the pages read), at its
best state before any loss spike, and at the end of its step budget (step 15,000 in the paper's recipe).
The last two exist for runs trained past their stop (`TrainConfig.read_past_stop`); a run that never met
the stop rule is at the end of its budget when it stops, so its "stop" and "last" are one state."""


def reading_step(record: dict, reading: str) -> int | None | bool:
    """The state of a run (its record) to analyse at `reading`: a step (a state kept past its stop), None
    (the record's own final weights) or False (the run has no such state: it was not trained past its stop,
    or its loss was never finite, so it has no best state)."""
    if reading not in READINGS:
        raise ValueError(f"reading must be one of {READINGS}, got {reading!r}")
    if reading == "stop":
        return None
    past = record.get("past_stop")
    if past is None:
        return False
    if reading == "last" and not record["stopped_early"]:
        return None
    step = past["points"][reading]
    return False if step is None else step


def analyse_readings(grid: CapacityGrid, records: dict[Key, dict], cache_dir: Path,
                     analyse: Callable[[TrainedModel], dict[str, Any]], name: str, params: dict, keys: list[Key],
                     desc: str = "analyses at the reading points", device: str | torch.device = "cpu") -> dict[str, dict[Key, dict]]:
    """{reading: {key: the analysis' values}} of the runs `keys` at each of `READINGS` they have, cached as
    `analyse_state` caches a state (a state already analysed as a checkpoint or as the stop is not
    analysed again). A run without a state at a reading is absent from that reading's dict."""
    configs = grid.configs()
    states = [(reading, key, step) for key in keys for reading in READINGS
              if (step := reading_step(records[key], reading)) is not False]
    states.sort(key=lambda state: _cell(configs[state[1]]))
    out: dict[str, dict[Key, dict]] = {reading: {} for reading in READINGS}
    analysed = analyse_states(cache_dir, [(configs[key], step, records[key]["accuracy"]) for _, key, step in states],
                              analyse, name, params, device, desc)
    for (reading, key, _), record in zip(states, analysed):
        out[reading][key] = record["values"]
    return out


def reading_accuracies(grid: CapacityGrid, records: dict[Key, dict]) -> dict[str, dict[str, np.ndarray] | None]:
    """{reading: {regime: (R, d, seed)}} of every run's accuracy over its N R facts at each of `READINGS`, from the run
    records alone: at the stop the record's, at the others what training measured there (`past_stop["accuracy"]`,
    geofact.training.trainer.past_stop_results: the same count of facts answered by argmax as the stop's). None for
    a reading at which some run of the grid has no state: not trained past its stop (`reading_step`), its loss never
    finite (no best state), or its accuracy there not measured. A threshold needs every cell, so exp-capacity reads its
    verdicts at a point only where the whole grid has it."""
    out: dict[str, dict[str, np.ndarray] | None] = {"stop": grid.by_cell({k: records[k]["accuracy"] for k in grid.keys()})}
    for reading in READINGS[1:]:
        values = {}
        for key in grid.keys():
            record, step = records[key], reading_step(records[key], reading)
            values[key] = record["accuracy"] if step is None else \
                None if step is False else record["past_stop"].get("accuracy", {}).get(reading)
        out[reading] = None if any(v is None for v in values.values()) else grid.by_cell(values)
    return out


def reading_values(grid: CapacityGrid, values: dict[Key, dict], metric: str) -> dict[str, np.ndarray]:
    """{regime: (R, d, seed)} of a metric from one reading's values (`analyse_readings`), NaN for the runs
    it does not hold."""
    return grid.by_cell({key: values[key][metric] if key in values else np.nan for key in grid.keys()})
