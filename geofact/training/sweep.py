"""Sweeps of training runs with a per-run cache: config -> JSON (+ weights as NPZ).

`run_sweep(configs, cache_dir)` trains only the runs whose result is not already in `cache_dir`,
stacking compatible runs (`shape_key()`) in groups of at most `group_size`, and writes
each group's results as soon as it finishes; a rerun resumes from the cache. A group in
flight also writes its state every `checkpoint_every` seconds (geofact.training.resume), so an
interrupted sweep loses at most the steps since then, and a time budget ($GEOFACT_DEADLINE, set by
`geofact run --budget`) stops it cleanly: no group starts past the deadline, and the groups in flight
checkpoint and raise `BudgetSpent`. Each JSON holds the config, the result, the code
version and the device; the NPZ holds the trained weights under their parameter names.
Single-hop runs (TrainConfig) train with `trainer.train_group`, multi-hop runs (MultiHopConfig) with
`hop_trainer.train_multihop`; one sweep may hold both.
"""

from __future__ import annotations

import json
import math
import multiprocessing
import os
import time
from collections import defaultdict
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from pathlib import Path
from typing import Any, Callable

import torch

import geofact
from geofact.device import THREADS_ENV, describe_device
from geofact.host import as_device
from geofact.processes import PAGES_AT_ONCE_ENV, die_with_parent, usable_cores
from geofact.progress import progress
from geofact.provenance import git_commit
from geofact.settings import deadline, past_deadline, records_only
from geofact.store import (
    read_record,
    refuse_in_records_only,
    write_arrays,
    write_json,
)
from geofact.ops.cluster import executor_from_env
from geofact.training.config import MultiHopConfig, TrainConfig
from geofact.training.grid import restricted_run
from geofact.training.model import n_params
from geofact.training.hop_trainer import train_multihop
from geofact.training.weights_file import read_weights
from geofact.training.resume import (
    DEFAULT_EVERY_S,
    BudgetSpent,
    GroupCheckpoint,
    pending_groups,
)
from geofact.training.trainer import RunResult, train_group

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
    past = getattr(result, "past_stop", None)  # a run read past its stop: its best and last states, by step
    past_weights = getattr(result, "past_weights", {})
    past_files = {name: checkpoint_file(result.config, past["points"][name]) for name in past_weights}
    if save_weights:
        for name, weights in [(f"{key}.npz", result.params), *((checkpoint_file(result.config, t), w) for t, w in kept.items()),
                              *((past_files[n], w) for n, w in past_weights.items())]:
            # uncompressed: zlib saves 7% on trained float32 weights at 1/36 of the speed (16 against 590 MB/s
            # on this project's CPU); a GPU lease's d = 256 column (3 GB of kept weights) spent 151 s of its
            # 322 outside its 171 s of training
            write_arrays(cache_dir / name, {k: v.float().numpy() for k, v in weights.items()}, compress=False)
    checkpoints = [{"step": step, "loss": loss, "weights": checkpoint_file(result.config, step) if save_weights else None}
                   for step, loss in sorted(getattr(result, "checkpoint_losses", {}).items())]
    record = {
        "schema": result.config.schema,
        "config": result.config.as_dict(),
        "precision": result.config.precision,  # stated even where the key leaves fp32 implicit
        **result.record(),
        **({"past_stop": {**past, "weights": past_files if save_weights else None}} if past is not None else {}),
        "group_seconds": result.seconds,  # wall time of the stacked group this run trained in
        "group_size": group_size,  # runs in that group: group_seconds / group_size is this run's share
        "weights": f"{key}.npz" if save_weights else None,
        **({"checkpoints": checkpoints} if checkpoints else {}),
        "provenance": origin,
    }
    write_json(result_path(cache_dir, result.config), record)


def load_result(cache_dir: Path, config: Config) -> dict | None:
    return read_record(result_path(cache_dir, config), config.schema, config.as_dict())


def written_config(cache_dir: Path, key: str) -> Config | None:
    """The config of the run whose record is cached under `key`, or None when there is none."""
    path = Path(cache_dir) / f"{key}.json"
    if not path.exists():
        return None
    record = json.loads(path.read_text())
    kind = {TrainConfig.schema: TrainConfig, MultiHopConfig.schema: MultiHopConfig}.get(record.get("schema"))
    config = kind(**record["config"]) if kind is not None else None
    return config if config is not None and config.key() == key else None


def weights_path(cache_dir: Path, config: Config, step: int | None = None) -> Path:
    """Where a cached run's weights are: final, or at checkpoint `step`."""
    return Path(cache_dir) / (f"{config.key()}.npz" if step is None else checkpoint_file(config, step))


def load_weights(cache_dir: Path, config: Config, step: int | None = None) -> dict[str, torch.Tensor]:
    """The trained weights of a cached run (saved with save_weights=True): final, or at checkpoint `step`."""
    path = weights_path(cache_dir, config, step)
    if not path.exists():
        refuse_in_records_only(f"the weights {path.name} of run {config.key()}")
    return {k: torch.from_numpy(v) for k, v in read_weights(path).items()}


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


def in_schedule_order(chunks: list[list[Config]], workers: int) -> list[list[Config]]:
    """Chunks in the order to train them. Longest first, so that no worker is left alone with a long
    stack at the end; but one worker under a time budget (a GPU lease, whose machine and the states of
    groups in flight go when it ends) trains the shortest first: the lease then ends with the most runs
    recorded, and only the records travel home."""
    shortest_first = workers == 1 and deadline() is not None
    return sorted(chunks, key=chunk_cost, reverse=not shortest_first)


def cpu_workers(device: torch.device) -> int:
    """Training processes for a sweep: one on an accelerator; on a CPU one per core this process may use,
    shared among the pages `geofact run --jobs` executes at once (geofact.pipeline.runner.Sharing)."""
    if device.type != "cpu":
        return 1
    return max(1, usable_cores() // int(os.environ.get(PAGES_AT_ONCE_ENV) or 1))


def groups_dir(cache_dir: Path) -> Path:
    """Where the states of groups in flight are kept (geofact.training.resume)."""
    return Path(cache_dir) / "groups"


def group_settings(config: Config, checkpoints: tuple[int, ...]) -> dict:
    """What, besides its runs, a group's training depends on: a state is resumed only with the same."""
    return {"trainer": "train_group" if isinstance(config, TrainConfig) else "train_multihop", "checkpoints": list(checkpoints)}


def _train_chunk(job: tuple, progress=None) -> list[Config]:
    """Train one stacked chunk and write its records (in a worker process, or in this one)."""
    chunk, device, cache_dir, save_weights, checkpoints, checkpoint_every = job  # a torch.device, resolved where the sweep began
    kept = {"checkpoints": checkpoints} if checkpoints else {}
    state = None
    if checkpoint_every is not None:
        state = GroupCheckpoint(groups_dir(cache_dir), [c.key() for c in chunk], group_settings(chunk[0], checkpoints),
                                checkpoint_every)
        kept["checkpoint"] = state
    origin = provenance(device)
    for result in _trainer(chunk[0])(chunk, device=device, progress=progress, **kept):
        save_result(cache_dir, result, origin, save_weights, len(chunk))
    if state is not None:
        state.clear()
    return chunk


def _init_worker(parent: int) -> None:
    """Worker initialiser: one thread, and die with the parent (die_with_parent)."""
    os.environ[THREADS_ENV] = "1"
    die_with_parent(parent)


class SweepPool:
    """Trains runs as they are submitted and hands back each run's cache record once it is trained.

    `submit([(tag, config), ...])` queues runs (a cached one is answered at once, a config already
    queued trains once and answers every tag); `completed()` waits until some are done and returns
    them as (tag, record). A queued run waits for a free worker, and the runs that queue meanwhile
    stack together, so a caller that decides its next runs from the last results (a d_min search,
    `search.find_d_min_streaming`) keeps every worker busy instead of waiting for a round to end.

    On a CPU, `workers` processes (None: one per core) train side by side, each on one thread, started
    the first time there is more than one chunk to train (until then a lone chunk trains in this
    process). On an idle machine that is as fast as one process on every core
    (bench/bench_sweep_workers.py: 1.01x on 2 cores, less for sweeps short enough that spawning the
    workers, ~3 s, counts); on a busy one it keeps threads that wait on each other from spinning (a
    d = 32 step went from 7 ms to 480 ms). Records are written as each chunk finishes, and
    chunks in flight write their state every `checkpoint_every` seconds (None: never), so a pool killed
    half-way loses only the steps since; a group found checkpointed is formed again and resumed first.
    Past the deadline of a time budget no chunk starts, and `completed()` raises `BudgetSpent`.

    With a submitit `executor` (geofact.ops.cluster; by default the one $GEOFACT_EXECUTOR names)
    every chunk is a job instead, all submitted at once, and the pool polls them every `poll_s` seconds.
    """

    def __init__(self, cache_dir: Path, device: str | torch.device = "cpu", group_size: int | None = None,
                 save_weights: bool = True, progress: bool = True, checkpoints: tuple[int, ...] = (),
                 workers: int | None = None, checkpoint_every: float | None = DEFAULT_EVERY_S,
                 executor: Any | None = None, poll_s: float = 2.0) -> None:
        if checkpoint_every is not None and checkpoint_every < 0:
            raise ValueError(f"checkpoint_every must be >= 0 seconds (or None: never), got {checkpoint_every}")
        if group_size is not None and group_size < 1:
            raise ValueError(f"group_size must be >= 1 (or None for the default), got {group_size}")
        self.device = as_device(device)
        self.workers = cpu_workers(self.device) if workers is None else workers
        if self.workers < 1:
            raise ValueError(f"workers must be >= 1 (or None: one per CPU core), got {workers}")
        self.cache_dir, self.group_size, self.save_weights = Path(cache_dir), group_size, save_weights
        self.checkpoints, self.progress, self.checkpoint_every = tuple(checkpoints), progress, checkpoint_every
        self.jobs = executor if executor is not None else executor_from_env(self.cache_dir / "jobs")
        self.poll_s = poll_s
        self._submitted: dict[Any, list[Config]] = {}  # submitit job -> its chunk
        self._tags: dict[str, list] = {}  # config key -> tags waiting for it (queued or in flight)
        self._queued: dict[str, Config] = {}
        self._in_flight: dict[Future, list[Config]] = {}
        self._ready: list[tuple[Any, dict]] = []
        self._executor: ProcessPoolExecutor | None = None
        self._bar = None
        self._trained_steps = 0
        self._n_training = self._n_cached = 0

    def __enter__(self) -> "SweepPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        for job in self._submitted:  # jobs of an abandoned sweep (an error, a budget): do not leave them queued
            if not job.done():
                job.cancel(check=False)
        self._submitted.clear()
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def cached(self, config: Config) -> dict | None:
        """The run's record when the cache holds it with every checkpoint this pool keeps. On a lease
        computing cells of the capacity grid (geofact.training.grid.restriction), which analyses their
        weights, a run of those cells whose weights are not on this machine (an earlier lease's) is
        trained again; any other run's record stands without its weights."""
        if self.checkpoints and not isinstance(config, TrainConfig):
            raise ValueError("checkpoints are kept for single-hop runs (TrainConfig) only")
        record = load_result(self.cache_dir, config)
        if record is None or missing_checkpoints(record, self.checkpoints):
            return None
        if self.save_weights and restricted_run(config) and not records_only():
            kept = [c["step"] for c in record.get("checkpoints", [])]
            files = [f"{config.key()}.npz", *(checkpoint_file(config, step) for step in kept)]
            if not all((self.cache_dir / name).exists() for name in files):
                return None
        return record

    def submit(self, tagged: list[tuple[Any, Config]]) -> None:
        new = []
        for tag, config in tagged:
            key = config.key()
            if key in self._tags:
                self._tags[key].append(tag)
            elif (record := self.cached(config)) is not None:
                self._ready.append((tag, record))
                self._n_cached += 1
            else:
                refuse_in_records_only(f"run {key} ({config.as_dict()})")
                self._tags[key], self._queued[key] = [tag], config
                new.append(config)
        if new and self.progress:
            self._n_training += len(new)
            total = sum(c.max_steps for c in new) + (self._bar.total if self._bar is not None else 0)
            if self._bar is None:
                self._bar = progress(None, total=total, unit="run-step")
            else:  # reset: a notebook widget's length is fixed at creation
                self._bar.reset(total=total)
                self._bar.update(self._trained_steps)
            self._bar.set_description(f"training {self._n_training} runs ({self._n_cached} cached)")

    def completed(self) -> list[tuple[Any, dict]]:
        """(tag, record) of every submitted run trained (or found cached) since the last call; waits
        for at least one when none is ready."""
        while not self._ready:
            if not self._queued and not self._in_flight and not self._submitted:
                raise RuntimeError("completed() called with no run submitted and outstanding")
            if self.jobs is not None:
                self._poll_jobs()
                continue
            if past_deadline() and not self._in_flight:
                raise BudgetSpent(f"time budget spent with {len(self._queued)} runs not started; "
                                  f"the same call again resumes from {self.cache_dir}")
            self._dispatch()
            if self._in_flight:
                finished, _ = wait(self._in_flight, return_when=FIRST_COMPLETED)
                for future in finished:
                    chunk = self._in_flight.pop(future)
                    if future.exception() is not None:  # a worker's exception surfaces here; the chunk is no longer owed
                        self._forget(chunk)
                        raise future.exception()
                    self._done(chunk)
        ready, self._ready = self._ready, []
        return ready

    def _chunks(self, spread: int) -> list[list[Config]]:
        """Groups checkpointed in flight by an earlier call, formed again exactly, then the other queued
        runs stacked, each in `in_schedule_order`."""
        resumed, taken = [], set()
        if self.checkpoint_every is not None:
            for keys, settings in pending_groups(groups_dir(self.cache_dir)):
                if any(k in taken for k in keys):
                    continue
                # a group killed while writing its records has some written: it is resumed whole (those
                # records are written again, the same), as a fresh stack of the others need not round alike
                written = {k: written_config(self.cache_dir, k) for k in keys if k not in self._queued}
                if None in written.values():
                    continue  # runs this call does not train: another call's group
                if not any(k in self._queued for k in keys):  # every record written, the state left behind
                    GroupCheckpoint(groups_dir(self.cache_dir), keys, settings).clear()
                    continue
                chunk = [self._queued.get(k) or written[k] for k in keys]
                kept = tuple(t for t in self.checkpoints if t < chunk[0].max_steps)
                if settings == group_settings(chunk[0], kept):
                    resumed.append(chunk)
                    taken.update(keys)
        size = lambda c: self.group_size or default_group_size(c, self.device)  # noqa: E731
        rest = [c for k, c in self._queued.items() if k not in taken]
        chunks = stack_chunks(rest, lambda c: (type(c), c.shape_key()), size, spread=spread)
        return in_schedule_order(resumed, self.workers) + in_schedule_order(chunks, self.workers)

    def _job(self, chunk: list[Config]) -> tuple:
        for c in chunk:
            self._queued.pop(c.key(), None)  # a resumed group may hold runs whose records were written
        kept = tuple(t for t in self.checkpoints if t < chunk[0].max_steps)
        return chunk, self.device, self.cache_dir, self.save_weights, kept, self.checkpoint_every

    def _dispatch(self) -> None:
        """Start the longest queued chunks on the free workers (or train a lone chunk here)."""
        free = self.workers - len(self._in_flight)
        if free < 1 or not self._queued or past_deadline():
            return
        chunks = self._chunks(spread=free)
        if self._executor is None and (self.workers == 1 or len(chunks) == 1):
            try:
                self._done(_train_chunk(self._job(chunks[0]), self._bar))
            except BaseException:
                self._forget(chunks[0])
                raise
            return
        if self._executor is None:
            self._executor = ProcessPoolExecutor(max_workers=self.workers, mp_context=multiprocessing.get_context("spawn"),
                                                 initializer=_init_worker, initargs=(os.getpid(),))
        for chunk in chunks[:free]:
            self._in_flight[self._executor.submit(_train_chunk, self._job(chunk))] = chunk

    def _poll_jobs(self) -> None:
        """Submit every queued chunk as a job, then wait until some job has finished and take its records."""
        if self._queued:
            if past_deadline():
                if not self._submitted:
                    raise BudgetSpent(f"time budget spent with {len(self._queued)} runs not submitted; "
                                      f"the same call again resumes from {self.cache_dir}")
            else:
                for chunk in self._chunks(spread=1):
                    self._submitted[self.jobs.submit(_train_chunk, self._job(chunk))] = chunk
        finished: list = []
        while self._submitted:
            finished = [job for job in self._submitted if job.done()]
            if finished:
                break
            time.sleep(self.poll_s)
        for job in finished:
            chunk = self._submitted.pop(job)
            try:
                job.result()  # a failed or killed job raises here (submitit names its logs)
            except BaseException:
                self._forget(chunk)
                raise
            self._done(chunk)

    def _forget(self, chunk: list[Config]) -> None:
        for c in chunk:
            self._tags.pop(c.key(), None)

    def _done(self, chunk: list[Config]) -> None:
        owed = [c for c in chunk if c.key() in self._tags]
        for c in owed:
            record = load_result(self.cache_dir, c)
            self._ready += [(tag, record) for tag in self._tags.pop(c.key())]
        self._trained_steps += sum(c.max_steps for c in owed)
        if self._bar is not None:  # runs that stopped early skip their remaining steps
            self._bar.n = self._trained_steps
            self._bar.refresh()


def run_sweep(configs: list[Config], cache_dir: Path, device: str | torch.device = "cpu",
              group_size: int | None = None, save_weights: bool = True, progress: bool = True,
              checkpoints: tuple[int, ...] = (), workers: int | None = None,
              checkpoint_every: float | None = DEFAULT_EVERY_S, executor: Any | None = None) -> list[dict]:
    """Results (cache records) of every config, in order, training the missing ones (see SweepPool).

    group_size=None stacks `default_group_size` runs at a time. `checkpoints` (single-hop runs only)
    also keeps the weights after each of these numbers of updates (`load_weights(..., step=t)`); a
    cached run that lacks one it should have is trained again (the same run: batches are a function
    of seed and step). `checkpoint_every` (seconds; None: never) is how often a group in flight
    writes its state, so that a killed sweep resumes it (geofact.training.resume). `executor` (a
    submitit executor, geofact.ops.cluster) trains each stacked group as a job.
    """
    records: dict[int, dict] = {}
    with SweepPool(cache_dir, device, group_size, save_weights, progress, checkpoints, workers, checkpoint_every,
                   executor) as pool:
        pool.submit(list(enumerate(configs)))
        while len(records) < len(configs):
            records.update(pool.completed())
    return [records[i] for i in range(len(configs))]
