"""Sweeps of training runs with a per-run cache: config -> JSON (+ weights as NPZ).

`run_sweep(configs, cache_dir)` trains only the runs whose result is not already in `cache_dir`,
stacking compatible runs (`shape_key()`) in groups of at most `group_size`, and writes
each group's results as soon as it finishes; an interrupted sweep loses at most the group in
flight and a rerun resumes from the cache. Each JSON holds the config, the result, the code
version and the device; the NPZ holds the trained weights under their parameter names.
Single-hop runs (TrainConfig) train with `trainer.train_group`, multi-hop runs (MultiHopConfig) with
`multihop_trainer.train_multihop`; one sweep may hold both.
"""

from __future__ import annotations

import ctypes
import json
import math
import multiprocessing
import os
import signal
import sys
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import torch

from geofact.device import describe_device, resolve_device
import geofact
from geofact.provenance import git_commit
from geofact.training.config import MultiHopConfig, TrainConfig
from geofact.training.model import n_params
from geofact.training.multihop_trainer import train_multihop
from geofact.training.trainer import THREADS_ENV, RunResult, train_group

Config = TrainConfig | MultiHopConfig


def _trainer(config: Config) -> Callable[..., list]:
    return train_group if isinstance(config, TrainConfig) else train_multihop


def result_path(cache_dir: Path, config: Config) -> Path:
    return Path(cache_dir) / f"{config.key()}.json"


def provenance(device: torch.device) -> dict:
    """Code version and device recorded with every run."""
    root = Path(geofact.__file__).resolve().parents[1]
    return {"geofact": geofact.__version__, "git_commit": git_commit(root), "device": describe_device(device),
            "torch": torch.__version__}


def checkpoint_file(config: Config, step: int) -> str:
    return f"{config.key()}-step{step}.npz"


def save_result(cache_dir: Path, result: RunResult, origin: dict, save_weights: bool, group_size: int = 1) -> None:
    cache_dir = Path(cache_dir)
    cache_dir.mkdir(parents=True, exist_ok=True)
    key = result.config.key()
    kept = getattr(result, "checkpoints", {})  # multi-hop runs keep none
    if save_weights:
        for name, weights in [(f"{key}.npz", result.params), *((checkpoint_file(result.config, t), w) for t, w in kept.items())]:
            np.savez_compressed(cache_dir / name, **{k: v.float().numpy() for k, v in weights.items()})
    checkpoints = [{"step": step, "loss": loss, "weights": checkpoint_file(result.config, step) if save_weights else None}
                   for step, loss in sorted(getattr(result, "checkpoint_losses", {}).items())]
    record = {
        "schema": result.config.schema,
        "config": result.config.as_dict(),
        **result.record(),
        "group_seconds": result.seconds,  # wall time of the stacked group this run trained in
        "group_size": group_size,  # runs in that group: group_seconds / group_size is this run's share
        "weights": f"{key}.npz" if save_weights else None,
        **({"checkpoints": checkpoints} if checkpoints else {}),
        "provenance": origin,
    }
    write_json(result_path(cache_dir, result.config), record)


def write_json(path: Path, record: dict) -> None:
    """Write a JSON record atomically: a killed write never leaves a half file to be read as a result."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=1) + "\n")
    tmp.replace(path)


def read_json(path: Path, schema: str, config: dict) -> dict | None:
    """A cached record written by write_json (None when absent); an error if it holds another schema or config."""
    if not path.exists():
        return None
    record = json.loads(path.read_text())
    if record.get("schema") != schema or record["config"] != config:
        raise ValueError(f"{path} does not hold a {schema} record of this config; delete it to recompute")
    return record


def load_result(cache_dir: Path, config: Config) -> dict | None:
    return read_json(result_path(cache_dir, config), config.schema, config.as_dict())


def load_weights(cache_dir: Path, config: Config, step: int | None = None) -> dict[str, torch.Tensor]:
    """The trained weights of a cached run (saved with save_weights=True): final, or at checkpoint `step`."""
    name = f"{config.key()}.npz" if step is None else checkpoint_file(config, step)
    with np.load(Path(cache_dir) / name) as z:
        return {k: torch.from_numpy(z[k]) for k in z.files}


def missing_checkpoints(record: dict, checkpoints: tuple[int, ...]) -> list[int]:
    """Requested checkpoint steps a cached run should have (it had not stopped before them) but lacks."""
    have = {c["step"] for c in record.get("checkpoints", [])}
    return [t for t in checkpoints if t <= record["steps"] and t < record["config"]["max_steps"] and t not in have]


def training_seconds(records: list[dict]) -> float:
    """Training compute behind cached runs: each run's share of its stacked group's wall time."""
    return sum(r["group_seconds"] / r["group_size"] for r in records)


CPU_LOGITS_BUDGET = 2**24  # logits entries (runs x batch x N) per stacked group on a CPU: 64 MiB in float32
GPU_LOGITS_BUDGET = 2**30
GPU_PARAM_BUDGET = 2**29


def default_group_size(config: Config, device: torch.device) -> int:
    """How many runs to stack: as many as keep the step's logits (runs x batch x targets x N) within budget.

    bench/bench_trainer.py on a 2-core CPU (N = 4096, batch 1024): stacks of 4 run at 1.05-1.29x
    the plain loop's model-steps/s, stacks of 16 at 1.02-1.11x; at N = 512, batch 512 stacks of 32
    reach ~3x a single run. On a GPU, where one small run cannot fill the device, many more fit.
    """
    logits = config.step_logits
    if device.type == "cpu":
        return max(1, CPU_LOGITS_BUDGET // logits)
    return max(1, min(GPU_PARAM_BUDGET // n_params(config), GPU_LOGITS_BUDGET // logits))


def stack_chunks(items: list, key: Callable[[Any], Any], size: Callable[[Any], int], spread: int = 1) -> list[list]:
    """Items grouped by key(item) (what can train stacked), each group cut into chunks of at most
    size(its first item). With fewer groups than `spread` (workers), each group is also cut into at
    least `spread` chunks where it has that many items, so that every worker gets one; with more, a
    group stays whole, since one stack of 2m small runs costs far less than two stacks of m (the
    step's fixed overhead dominates small models)."""
    groups: dict[Any, list] = defaultdict(list)
    for item in items:
        groups[key(item)].append(item)
    share = spread if len(groups) < spread else 1
    chunks = []
    for group in groups.values():
        n = max(1, min(size(group[0]), math.ceil(len(group) / share)))
        chunks += [group[i : i + n] for i in range(0, len(group), n)]
    return chunks


def chunk_cost(chunk: list[Config]) -> float:
    """A chunk's training work, to schedule the longest first: steps x runs x parameters x batch."""
    c = chunk[0]
    return float(c.max_steps) * len(chunk) * n_params(c) * c.batch_size


def cpu_workers(device: torch.device) -> int:
    """Training processes for a sweep: one per core this process may use on a CPU, one on an accelerator."""
    if device.type != "cpu":
        return 1
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _train_chunk(job: tuple, progress=None) -> list[Config]:
    """Train one stacked chunk and write its records (in a worker process, or in this one)."""
    chunk, device, cache_dir, save_weights, checkpoints = job
    device = resolve_device(device)
    kept = {"checkpoints": checkpoints} if checkpoints else {}
    origin = provenance(device)
    for result in _trainer(chunk[0])(chunk, device=device, progress=progress, **kept):
        save_result(cache_dir, result, origin, save_weights, len(chunk))
    return chunk


def _init_worker(parent: int) -> None:
    """Worker initialiser: one thread, and (on Linux) die with the parent, so that a sweep killed from
    the terminal leaves no process training on (records are written atomically, so none is torn)."""
    os.environ[THREADS_ENV] = "1"
    if sys.platform.startswith("linux"):
        PR_SET_PDEATHSIG = 1
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the parent died while this worker started, before the signal was armed
        os._exit(1)


def _map_chunks(jobs: list[tuple], workers: int, bar) -> Iterator[list[Config]]:
    """Each job's chunk once trained, in the order they finish; with workers > 1 in a process pool
    (spawned, so no worker inherits a half-initialised thread pool), each process on one thread."""
    if workers == 1 or len(jobs) <= 1:
        for job in jobs:
            yield _train_chunk(job, bar)
        return
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=min(workers, len(jobs)), mp_context=context,
                             initializer=_init_worker, initargs=(os.getpid(),)) as pool:
        for future in as_completed([pool.submit(_train_chunk, job) for job in jobs]):
            yield future.result()


def run_sweep(configs: list[Config], cache_dir: Path, device: str | torch.device = "cpu",
              group_size: int | None = None, save_weights: bool = True, progress: bool = True,
              checkpoints: tuple[int, ...] = (), workers: int | None = None) -> list[dict]:
    """Results (cache records) of every config, in order, training the missing ones.

    group_size=None stacks `default_group_size` runs at a time. `checkpoints` (single-hop runs only)
    also keeps the weights after each of these numbers of updates (`load_weights(..., step=t)`); a
    cached run that lacks one it should have is trained again (the same run: batches are a function
    of seed and step).

    On a CPU with several cores, `workers` processes (None: one per core) train the chunks side by
    side, each on one thread. On an idle machine that is as fast as one process on every core
    (bench/bench_sweep_workers.py: 1.01x on 2 cores, less for sweeps short enough that spawning the
    workers, ~3 s, counts); on a busy one it keeps threads that wait on each other from spinning
    (a d = 32 step went from 7 ms to 480 ms).
    """
    if group_size is not None and group_size < 1:
        raise ValueError(f"group_size must be >= 1 (or None for the default), got {group_size}")
    if checkpoints and not all(isinstance(c, TrainConfig) for c in configs):
        raise ValueError("checkpoints are kept for single-hop runs (TrainConfig) only")
    device = resolve_device(device)

    def cached(c: Config) -> bool:
        record = load_result(cache_dir, c)
        return record is not None and not missing_checkpoints(record, checkpoints)

    missing = list({c.key(): c for c in configs if not cached(c)}.values())
    workers = cpu_workers(device) if workers is None else workers
    if workers < 1:
        raise ValueError(f"workers must be >= 1 (or None: one per CPU core), got {workers}")

    def size(c: Config) -> int:
        return group_size or default_group_size(c, device)

    chunks = stack_chunks(missing, lambda c: (type(c), c.shape_key()), size, spread=workers)
    bar = None
    if progress and chunks:
        from tqdm.auto import tqdm

        bar = tqdm(total=sum(c.max_steps for c in missing), desc=f"training {len(missing)} runs ({len(configs) - len(missing)} cached)", unit="run-step")
    # Longest first, so that no worker is left with one long stack while the others idle.
    jobs = [(chunk, str(device), cache_dir, save_weights, tuple(t for t in checkpoints if t < chunk[0].max_steps))
            for chunk in sorted(chunks, key=chunk_cost, reverse=True)]
    finished = 0
    for done in _map_chunks(jobs, workers, bar):
        finished += sum(c.max_steps for c in done)
        if bar is not None:  # runs that stopped early skip their remaining steps
            bar.n = finished
            bar.refresh()
    if bar is not None:
        bar.close()
    return [load_result(cache_dir, c) for c in configs]
