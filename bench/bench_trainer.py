"""Model-steps per second: the stacked trainer against the plain one-run-at-a-time loop, in one run.

Run: python bench/bench_trainer.py [--device cpu] [--runs 4] [--steps 6] [--d 32 128 512]
At the paper's shapes (N = 4096, batch 1024, R = 8) it trains `runs` runs for `steps` steps both
ways (no early stopping) and prints model-steps/s, their ratio, and the achieved FLOP/s as a
fraction of the device's matmul peak, measured here with a large float32 matmul.
"""

from __future__ import annotations

import argparse
import time

import torch

from geofact.device import resolve_device
from geofact.training.config import TrainConfig
from geofact.training.reference import train_single
from geofact.training.sweep import default_group_size
from geofact.training.trainer import configure_cpu, train_group


def step_flops(c: TrainConfig) -> float:
    """Multiply-adds x 2 of one training step (forward + backward ~ 3 x forward), matmuls only."""
    B, d, w, N = c.batch_size, c.d, c.width, c.N
    forward = 2 * B * (2 * 2 * d * d + 2 * d * w + d * N)  # V and O at both positions, MLP, unembedding
    return 3.0 * forward


def matmul_peak(device: torch.device, n: int = 2048, repeats: int = 5) -> float:
    a, b = torch.randn(n, n, device=device), torch.randn(n, n, device=device)
    a @ b
    sync(device)
    start = time.perf_counter()
    for _ in range(repeats):
        a @ b
    sync(device)
    return 2 * n**3 * repeats / (time.perf_counter() - start)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--d", type=int, nargs="+", default=[32, 128, 512])
    args = parser.parse_args()
    device = resolve_device(args.device)
    if device.type == "cpu":
        configure_cpu()
    peak = matmul_peak(device)
    print(f"device {device}, matmul peak {peak / 1e9:.1f} GFLOP/s (float32, 2048^3)")
    warm = [TrainConfig(N=4096, R=8, d=32, batch_size=1024, max_steps=2, loss_threshold=0.0)]
    train_single(warm[0], device=device)
    train_group(warm, device=device, evaluate=False)  # first-call costs (allocator, thread pools) out of the timings
    for d in args.d:
        configs = [TrainConfig(N=4096, R=8, d=d, batch_size=1024, max_steps=args.steps, lr=1e-3, loss_threshold=0.0, seed=s)
                   for s in range(args.runs)]
        start = time.perf_counter()
        for c in configs:
            train_single(c, device=device)
        sync(device)
        plain = time.perf_counter() - start
        start = time.perf_counter()
        train_group(configs, device=device, log_every=10**9, evaluate=False)
        sync(device)
        stacked = time.perf_counter() - start
        size = default_group_size(configs[0], device)
        start = time.perf_counter()
        for i in range(0, len(configs), size):
            train_group(configs[i : i + size], device=device, log_every=10**9, evaluate=False)
        sync(device)
        policy = time.perf_counter() - start
        model_steps = args.runs * args.steps
        flops = step_flops(configs[0]) * model_steps
        print(f"d={d:>4}: plain {model_steps / plain:8.2f} model-steps/s ({flops / plain / peak:5.1%} of peak), "
              f"stacked x{len(configs)} {model_steps / stacked:8.2f} ({flops / stacked / peak:5.1%}), ratio {plain / stacked:.2f}x; "
              f"default stacks of {size}: {model_steps / policy:8.2f} ({flops / policy / peak:5.1%}), ratio {plain / policy:.2f}x")


if __name__ == "__main__":
    main()
