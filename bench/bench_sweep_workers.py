"""Model-steps per second of a CPU sweep: one process on every core against one process per core, in one run.

Run: python bench/bench_sweep_workers.py [--runs 8] [--steps 300] [--N 128] [--R 8] [--d 64] [--batch 128] [--out FILE]
Trains the same runs (seeds 0..runs-1, the laptop grid's shape by default) twice into fresh caches with
geofact.training.sweep.run_sweep: workers=1 (one process, torch on all cores) and workers=None (one
single-threaded process per core, each training a share of the stack). The step budget has no stop
rule in reach (loss threshold 0), so both train exactly runs * steps model-steps.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch

from geofact.device import describe_device
from geofact.training.config import TrainConfig
from geofact.training.sweep import cpu_workers, run_sweep


def cpu_model() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    lines = cpuinfo.read_text().splitlines() if cpuinfo.exists() else []
    return next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), "unknown")


def timed(configs: list[TrainConfig], workers: int | None) -> float:
    with tempfile.TemporaryDirectory() as cache:
        started = time.perf_counter()
        run_sweep(configs, Path(cache), "cpu", save_weights=False, progress=False, workers=workers)
        return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--N", type=int, default=128)
    parser.add_argument("--R", type=int, default=8)
    parser.add_argument("--d", type=int, default=64)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--out", type=Path, help="also write the result as JSON")
    args = parser.parse_args()
    configs = [TrainConfig(N=args.N, R=args.R, d=args.d, seed=s, batch_size=args.batch, max_steps=args.steps,
                           loss_threshold=0.0) for s in range(args.runs)]
    model_steps = args.runs * args.steps
    cpu = torch.device("cpu")
    cores = cpu_workers(cpu)
    one = timed(configs, workers=1)
    per_core = timed(configs, workers=None)
    result = {"shape": {"N": args.N, "R": args.R, "d": args.d, "batch": args.batch}, "runs": args.runs, "steps": args.steps,
              "cores": cores, "device": f"{describe_device(cpu)} ({cpu_model()})",
              "one_process_steps_per_s": model_steps / one, "process_per_core_steps_per_s": model_steps / per_core,
              "ratio": one / per_core}
    print(f"{args.runs} runs x {args.steps} steps at N={args.N}, R={args.R}, d={args.d}, batch {args.batch}, {cores} cores:")
    print(f"  one process, {cores} threads:      {result['one_process_steps_per_s']:8.1f} model-steps/s")
    print(f"  {cores} processes, one thread each: {result['process_per_core_steps_per_s']:8.1f} model-steps/s "
          f"({result['ratio']:.2f}x)")
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
