"""Run-steps per second of the spike study's stacked recipe variants against the plain one-run loop, in one run.

Run: python bench/bench_variants.py [--seeds 4] [--steps 200] [--N 128] [--R 2] [--d 96] [--batch 128] [--out FILE]
Trains the study's seven recipes (exp-capacity, "What causes them") x `seeds` at one cell both ways:
geofact.training.variants.train_variants (one stack, torch's fused AdamW per set of hyperparameters)
and train_variant run by run (nn.Module, torch.optim.AdamW, the yardstick), each for `steps` steps
without the stop rule, on the threads this process has. Prints both rates, their ratio and the stack's
fraction of the float32 matmul peak measured here.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import torch

from geofact.device import configure_cpu, describe_device
from geofact.ops.benchmark import matmul_peak
from geofact.ops.calibration import step_flops
from geofact.training.config import TrainConfig
from geofact.training.variants import Recipe, train_variant, train_variants

RECIPES = [Recipe(), Recipe("eps 1e-6", eps=1e-6), Recipe("eps 1e-12", eps=1e-12), Recipe("beta2 0.95", beta2=0.95),
           Recipe("wd 0", weight_decay=0.0), Recipe("lr/10 after", lr_after_memorised=0.1), Recipe("no clip", grad_clip=math.inf)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--N", type=int, default=128)
    parser.add_argument("--R", type=int, default=2)
    parser.add_argument("--d", type=int, default=96)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--out", type=Path, default=None, help="also write the result here as JSON")
    args = parser.parse_args()
    configure_cpu()
    jobs = [(TrainConfig(N=args.N, R=args.R, d=args.d, batch_size=args.batch, max_steps=args.steps, lr=1e-3, seed=s), r)
            for r in RECIPES for s in range(args.seeds)]
    started = time.perf_counter()
    train_variants([c for c, _ in jobs], [r for _, r in jobs], show_progress=False)
    stacked = len(jobs) * args.steps / (time.perf_counter() - started)
    plain_jobs = jobs[:: max(1, len(jobs) // 4)]  # a few runs time the loop: it is the same per run
    started = time.perf_counter()
    for config, recipe in plain_jobs:
        train_variant(config, recipe, stop_rule=False)
    plain = len(plain_jobs) * args.steps / (time.perf_counter() - started)
    flops = step_flops(jobs[0][0])  # one run's training step
    peak = matmul_peak(torch.device("cpu"))
    result = {"device": describe_device("cpu"), "threads": torch.get_num_threads(), "runs": len(jobs), "steps": args.steps,
              "cell": {"N": args.N, "R": args.R, "d": args.d, "batch": args.batch},
              "stacked_run_steps_per_s": stacked, "plain_run_steps_per_s": plain, "ratio": stacked / plain,
              "stacked_fraction_of_peak": stacked * flops / peak, "matmul_peak_flops": peak}
    print(f"{result['device']}, {result['threads']} threads, {len(jobs)} runs at N={args.N}, R={args.R}, d={args.d}, "
          f"batch {args.batch}: stacked {stacked:.0f} run-steps/s, plain loop {plain:.0f} ({stacked / plain:.2f}x); "
          f"the stack at {result['stacked_fraction_of_peak']:.1%} of the {peak / 1e9:.0f}-GFLOP/s float32 matmul peak")
    if args.out:
        args.out.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
