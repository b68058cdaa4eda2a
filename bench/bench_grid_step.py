"""One step of the laptop capacity grid's stacks, part by part, in one run: where a CPU step's time goes.

Run: python bench/bench_grid_step.py [--d 8 24 96] [--steps 200] [--threads 1] [--out FILE]

The stack is the one exp-capacity trains at each d of the laptop grid: N = 128, batch 128, R in
{2, 4, 8, 16}, learned and frozen embeddings, 3 seeds (24 runs, relation tables padded to R = 16).
Timed on `--threads` threads (a sweep worker has one):

    step        a whole train_group step (no stop rule in reach), in model-steps/s and as the
                matmul FLOP/s it achieves against the float32 matmul peak measured here
    sampler     the batches of one step (drawn a block of DEFAULT_BLOCK_STEPS steps at a time, as the trainer does)
    optimiser   StackedAdamW.step (torch's fused kernel on each run's trained columns) against the
                same update as a loop of one torch.optim.AdamW per run (the plain loop's optimiser)
    keep        the stop rule's bookkeeping a step takes twice in a stack read past its stop (a run's state
                at its stop, its best state): torch.where over the whole (runs, weights) buffer, as
                StopRuleStep does on an accelerator, against its CPU path, copying only the rows that
                change (`copy_rows_`; one run here)

The grid reads its runs past their stop (`read_past_stop`), and so does the stack timed here.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch
from bench_sweep_workers import cpu_model  # this folder is on sys.path when a script in it runs

from geofact.device import THREADS_ENV, configure_cpu
from geofact.ops.benchmark import matmul_peak
from geofact.ops.calibration import step_flops
from geofact.training.config import TrainConfig
from geofact.training.data import FactSampler, facts
from geofact.training.stack import StackedUpdates, stack_params
from geofact.training.trainer import DEFAULT_BLOCK_STEPS, copy_rows_, train_group

R_VALUES = (2, 4, 8, 16)

SEEDS = (0, 1, 2)


def grid_stack(d: int, steps: int) -> list[TrainConfig]:
    return [TrainConfig(N=128, R=R, d=d, frozen_embeddings=frozen, seed=s, lr=1e-3, batch_size=128,
                        max_steps=steps, loss_threshold=0.0, read_past_stop=True)
            for R in R_VALUES for frozen in (False, True) for s in SEEDS]


def seconds(fn, repeats: int) -> float:
    fn()  # first-call costs out of the timing
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - start) / repeats


def sampler_seconds(configs: list[TrainConfig]) -> float:
    """Per step: one block of DEFAULT_BLOCK_STEPS steps' batches for the whole stack, divided by the block."""
    n_facts = [len(facts(c.N, c.R, c.bijection_seed)) for c in configs]
    sampler = FactSampler([c.seed for c in configs], n_facts, configs[0].batch_size, max(n_facts))
    block = range(0, DEFAULT_BLOCK_STEPS)
    return seconds(lambda: sampler(block), 5) / DEFAULT_BLOCK_STEPS


def optimiser_seconds(configs: list[TrainConfig]) -> tuple[float, float]:
    """(stacked, per-run loop) seconds of one AdamW step of every run, on random weights and gradients."""
    update = StackedUpdates(stack_params(configs, torch.float32), configs, torch.device("cpu"))
    opt = update.opt
    opt.grad.normal_()
    stacked = seconds(opt.step, 50)

    rows = [torch.nn.Parameter(opt.stack.flat[m].clone()) for m in range(len(configs))]
    for row, grad in zip(rows, opt.grad):
        row.grad = grad.clone()
    plain = [torch.optim.AdamW([row], lr=c.lr, weight_decay=c.weight_decay, foreach=False) for row, c in zip(rows, configs)]
    loop = seconds(lambda: [o.step() for o in plain], 50)
    return stacked, loop


def keep_seconds(configs: list[TrainConfig]) -> tuple[float, float]:
    """(torch.where, row copy) seconds of keeping one run's row of the stack's (M, P) buffer in another."""
    flat = StackedUpdates(stack_params(configs, torch.float32), configs, torch.device("cpu")).stack.flat
    kept = torch.zeros_like(flat)
    rows = torch.zeros(len(configs), dtype=torch.bool)
    rows[0] = True
    where = seconds(lambda: torch.where(rows[:, None], flat, kept, out=kept), 50)
    return where, seconds(lambda: copy_rows_(rows, flat, kept), 50)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--d", type=int, nargs="+", default=[8, 24, 96])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, help="also write the result as JSON")
    args = parser.parse_args()
    os.environ[THREADS_ENV] = str(args.threads)  # train_group sets the threads from it, as in a sweep worker
    configure_cpu()
    peak = matmul_peak(torch.device("cpu"))
    rows = []
    for d in args.d:
        configs = grid_stack(d, args.steps)
        train_group(grid_stack(d, 2), evaluate=False)
        step = seconds(lambda: train_group(configs, evaluate=False, log_every=10**9), 1) / args.steps
        model_steps = len(configs) / step
        stacked, loop = optimiser_seconds(configs)
        where, copy = keep_seconds(configs)
        rows.append({"d": d, "runs": len(configs), "step_ms": 1e3 * step, "model_steps_per_s": model_steps,
                     "peak_fraction": model_steps * step_flops(configs[0]) / peak,
                     "sampler_ms": 1e3 * sampler_seconds(configs), "optimiser_ms": 1e3 * stacked,
                     "optimiser_loop_ms": 1e3 * loop, "keep_where_ms": 1e3 * where, "keep_copy_ms": 1e3 * copy})
    result = {"device": cpu_model(), "threads": torch.get_num_threads(),
              "matmul_peak_flops": peak, "rows": rows}
    print(f"{result['device']}, {result['threads']} thread(s), matmul peak {peak / 1e9:.1f} GFLOP/s (float32)")
    for r in rows:
        print(f"d={r['d']:>3} x{r['runs']}: step {r['step_ms']:6.1f} ms = {r['model_steps_per_s']:7.0f} model-steps/s "
              f"({r['peak_fraction']:5.1%} of peak); sampler {r['sampler_ms']:.2f} ms; optimiser {r['optimiser_ms']:.2f} ms "
              f"against {r['optimiser_loop_ms']:.2f} ms for a per-run AdamW loop ({r['optimiser_loop_ms'] / r['optimiser_ms']:.1f}x); "
              f"keep {r['keep_where_ms']:.2f} ms by torch.where, {r['keep_copy_ms']:.2f} ms by row copy")
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
