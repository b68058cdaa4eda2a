"""Model-steps per second of the stacked trainer against the plain one-run-at-a-time loop.

`benchmark()` trains `runs` runs for `steps` steps at each d (no early stopping), four ways, in one
process so that the ratios compare like with like:

    plain, torch defaults    plain_loop.train_single before configure_cpu() (what a plain script gets)
    plain                    plain_loop.train_single after configure_cpu()
    stacked                  all runs as one train_group
    default policy           train_group in stacks of sweep.default_group_size (what run_sweep does)

and reports model-steps/s, ratios to the plain loop, and the matmul FLOP/s achieved as a fraction of
the device's float32 matmul peak measured here. bench/bench_trainer.py is its command line; the
exp-capacity page runs it on the device that trained the page (`recorded_benchmark`).
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from geofact.device import configure_cpu, describe_device
from geofact.host import as_device, host_reads
from geofact.ops.calibration import step_flops
from geofact.processes import PAGES_AT_ONCE_ENV
from geofact.settings import records_only
from geofact.store import (
    read_record,
    record_key,
    refuse_in_records_only,
    to_jsonable,
    write_json,
)
from geofact.training.config import TrainConfig
from geofact.training.graphs import eager_steps, graphs_wanted
from geofact.training.plain_loop import train_single
from geofact.precision import default_precision
from geofact.training.sweep import default_group_size, provenance
from geofact.training.trainer import DEFAULT_BLOCK_STEPS, train_group


@dataclass(frozen=True)
class BenchRow:
    d: int
    runs: int
    steps: int
    group_size: int  # runs per stack under the default policy
    plain_untuned: float  # model-steps/s of the plain loop with torch's defaults
    plain: float  # ... of the plain loop in the tuned process
    stacked: float  # ... all runs as one stack
    policy: float  # ... stacks of group_size
    flop_per_step: float


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def matmul_peak(device: torch.device, n: int = 2048, repeats: int = 5) -> float:
    """float32 FLOP/s of an n x n matmul: the yardstick for 'fraction of peak'."""
    a, b = torch.randn(n, n, device=device), torch.randn(n, n, device=device)
    a @ b
    _sync(device)
    start = time.perf_counter()
    for _ in range(repeats):
        a @ b
    _sync(device)
    return 2 * n**3 * repeats / (time.perf_counter() - start)


def _rate(fn, model_steps: int, device: torch.device) -> float:
    _sync(device)
    start = time.perf_counter()
    fn()
    _sync(device)
    return model_steps / (time.perf_counter() - start)


def benchmark(device: str | torch.device = "cpu", runs: int = 4, steps: int = 20, ds: tuple[int, ...] = (32, 128, 512),
              N: int = 4096, R: int = 8, batch_size: int = 1024) -> dict:
    """Rates at the paper's shapes (N = 4096, batch 1024, R = 8 by default). Returns a JSON-able dict."""
    if runs < 1 or steps < 1:
        raise ValueError(f"runs and steps must be >= 1, got runs={runs}, steps={steps}")
    device = as_device(device)

    def configs(d: int, n_steps: int) -> list[TrainConfig]:
        return [TrainConfig(N=N, R=R, d=d, batch_size=batch_size, max_steps=n_steps, lr=1e-3, loss_threshold=0.0, seed=s)
                for s in range(runs)]

    def plain(cs: list[TrainConfig]) -> None:
        for c in cs:
            train_single(c, device=device)

    train_single(configs(ds[0], 2)[0], device=device)  # first-call costs (thread pools, allocator) out of the timings
    untuned = {d: _rate(lambda d=d: plain(configs(d, steps)), runs * steps, device) for d in ds}
    if device.type == "cpu":
        configure_cpu()
    peak = matmul_peak(device)
    train_group(configs(ds[0], 2)[:1], device=device, evaluate=False)
    rows = []
    for d in ds:
        cs = configs(d, steps)
        size = default_group_size(cs[0], device)
        rows.append(BenchRow(
            d=d, runs=runs, steps=steps, group_size=size, plain_untuned=untuned[d],
            plain=_rate(lambda: plain(cs), runs * steps, device),
            stacked=_rate(lambda: train_group(cs, device=device, log_every=10**9, evaluate=False), runs * steps, device),
            policy=_rate(lambda: [train_group(cs[i : i + size], device=device, log_every=10**9, evaluate=False)
                                  for i in range(0, runs, size)], runs * steps, device),
            flop_per_step=step_flops(cs[0]),
        ))
    return {"device": describe_device(device), "threads": torch.get_num_threads(), "matmul_peak_flops": peak,
            "pages_at_once": int(os.environ.get(PAGES_AT_ONCE_ENV, 1)),
            "N": N, "R": R, "batch_size": batch_size, "rows": [asdict(r) for r in rows]}


CALIBRATION_SHAPES = ((64, 64, 8, 1), (128, 128, 8, 24), (128, 128, 32, 24), (128, 128, 96, 24), (512, 256, 32, 8))  # N, B, d, runs
# On an accelerator also the paper grid's own stacks, where its per-run cost shows: the H100 of 2026-11-26
# took 8.8 ms a step for 42 runs at d = 32, and the benchmark's four-run rows said nothing of it.
ACCELERATOR_SHAPES = ((4096, 1024, 64, 42), (4096, 1024, 256, 16))


def step_timings(device: str | torch.device = "cpu", steps: int = 200, shapes=None) -> list[tuple[TrainConfig, int, float]]:
    """(config, runs, seconds a step) of stacks at small shapes (a laptop grid's, and a tiny one: where a
    step's fixed cost shows) and, on an accelerator, at the paper grid's, each timed after a warm-up
    call, in the device's default precision: for geofact plan's calibration (geofact.ops.calibration.fit).
    On CUDA each timed call captures its step as a graph again; its `steps` amortise that."""
    device = as_device(device)
    if shapes is None:
        shapes = CALIBRATION_SHAPES + (ACCELERATOR_SHAPES if device.type != "cpu" else ())
    precision = default_precision(device)
    out = []
    for N, B, d, runs in shapes:
        configs = [TrainConfig(N=N, R=R, d=d, batch_size=B, max_steps=steps, lr=1e-3, loss_threshold=0.0, seed=s,
                               precision=precision)
                   for s, R in zip(range(runs), [2, 4, 8, 16] * runs)]
        train_group(configs, device=device, evaluate=False, log_every=10**9)  # warm-up: kernels chosen, memory held
        rate = _rate(lambda: train_group(configs, device=device, evaluate=False, log_every=10**9), steps, device)
        out.append((max(configs, key=lambda c: c.R), runs, 1 / rate))
    return out


DATA_DEPENDENT = {"_local_scalar_dense", "nonzero", "_unique2", "unique_consecutive", "masked_select"}  # ops that read values on the host


class OpCounter(TorchDispatchMode):
    """Counts the dispatcher ops a computation runs (views apart: they launch no kernel) and the ops whose
    output depends on tensor values, which on a GPU wait for the device (`.item()`, `nonzero`, ...)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops, self.views, self.data_dependent = 0, 0, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.is_view:
            self.views += 1
        else:
            self.ops += 1
        self.data_dependent += func.overloadpacket.__name__ in DATA_DEPENDENT
        return func(*args, **(kwargs or {}))


def step_ops(device: str | torch.device = "cpu", runs: int = 4, N: int = 512, R: int = 4, d: int = 32,
             batch_size: int = 1024, block_steps: int = DEFAULT_BLOCK_STEPS) -> dict:
    """Dispatcher ops, views and host reads per step of a single-hop stack (no stop rule in reach),
    counted over two blocks of steps minus one (set-up and the final bookkeeping cancel). A host read
    is a `to_host` call of the trainer or, off the CPU, a data-dependent op (`DATA_DEPENDENT`): on the CPU
    such an op waits for no device (the stop rule's row copy takes one, geofact.training.trainer.copy_rows_)."""
    device = as_device(device)
    reads = []

    def counting_read(tensors):
        reads.append(len(tensors))
        return tuple(t.detach().cpu().numpy() for t in tensors)

    def count(blocks: int) -> tuple[OpCounter, int]:
        configs = [TrainConfig(N=N, R=R, d=d, batch_size=batch_size, max_steps=blocks * block_steps, lr=1e-3,
                               loss_threshold=0.0, seed=s) for s in range(runs)]
        reads.clear()
        with host_reads(counting_read), OpCounter() as counter:
            train_group(configs, device=device, evaluate=False, log_every=10**9, block_steps=block_steps)
        return counter, len(reads)

    with eager_steps():  # the step's kernels, each launched by itself
        (one, reads_one), (two, reads_two) = count(1), count(2)
    ops = (two.ops - one.ops) / block_steps
    syncs = reads_two - reads_one
    if device.type != "cpu":  # a data-dependent op reads the host only where the data is not already there
        syncs += two.data_dependent - one.data_dependent
    result = {"runs": runs, "N": N, "R": R, "d": d, "batch_size": batch_size, "block_steps": block_steps,
              "ops_per_step": ops, "views_per_step": (two.views - one.views) / block_steps,
              "syncs_per_step": syncs / block_steps,
              "launches_per_step": ops, "cuda_graphs": graphs_wanted(device)}
    if result["cuda_graphs"]:  # a replayed graph runs the step's kernels on one call, which the dispatcher does not see
        (one, _), (two, _) = count(1), count(2)
        result["launches_per_step"] = (two.ops - one.ops) / block_steps
    return result


def peak_fraction(result: dict, row: dict, rate: float) -> float:
    """Matmul FLOP/s achieved at `rate` model-steps/s as a fraction of the device's measured peak."""
    return rate * row["flop_per_step"] / result["matmul_peak_flops"]


def format_rows(result: dict) -> list[str]:
    """One line per d: rates, ratios to the plain loop and fractions of peak."""
    peak = result["matmul_peak_flops"]
    lines = [f"device {result['device']}, {result['threads']} threads, matmul peak {peak / 1e9:.1f} GFLOP/s (float32)"]
    for r in result["rows"]:
        lines.append(
            f"d={r['d']:>4}: plain {r['plain']:8.2f} model-steps/s ({peak_fraction(result, r, r['plain']):5.1%} of peak; "
            f"untuned {r['plain_untuned']:.2f}), stacked x{r['runs']} {r['stacked']:8.2f} ({r['stacked'] / r['plain']:.2f}x), "
            f"default stacks of {r['group_size']} {r['policy']:8.2f} ({r['policy'] / r['plain']:.2f}x, {peak_fraction(result, r, r['policy']):5.1%} of peak)"
        )
    return lines


RECORD_SCHEMA = "geofact.ops.benchmark/1"


def recorded_benchmark(cache_dir: Path, device: str | torch.device = "cpu", **shapes) -> dict:
    """`benchmark(device, **shapes)`, also kept as a record in `cache_dir`/bench/, so that a page executed
    from records alone (`geofact run --records-only`, after `geofact unpack`) shows the timing of the
    machine that trained, not of the one rendering; there it reads the record instead of measuring."""
    config = to_jsonable(shapes)
    digest = record_key(config)
    path = Path(cache_dir) / "bench" / f"{digest}.json"
    if records_only():
        record = read_record(path, RECORD_SCHEMA, config)
        if record is None:
            refuse_in_records_only(f"the benchmark at {config}")
        return record["result"]
    result = benchmark(device, **shapes)
    write_json(path, {"schema": RECORD_SCHEMA, "config": config, "result": result, "provenance": provenance(as_device(device))})
    return result
