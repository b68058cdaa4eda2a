"""The stacked step with each of its output layers, timed in one process (issue 47, item 6).

geofact.training.step computes whole logits off the CPU through torch's log-softmax kernel (7 passes
over them) and on the CPU through the written-out softmax (17 passes; what every GPU lease ran before
2026-11-27). Fewer bytes need not mean faster on every card, so the next GPU lease times both, at the
paper's shapes and each precision, before it spends its minutes on scale (bench/bench_output_layer.py):
a change that loses on the GPU is reverted there.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Iterator

import torch

from geofact.device import resolve_device
from geofact.training import step as step_module
from geofact.training.config import TrainConfig
from geofact.training.trainer import train_group
from geofact.training.traffic import paper_shape

WAYS = ("log-softmax kernel", "written-out softmax")


@contextmanager
def output_layer(way: str, device: torch.device) -> Iterator[None]:
    """Steps made inside compute whole logits `way` on `device` (one of WAYS)."""
    if way not in WAYS:
        raise ValueError(f"way must be one of {WAYS}, got {way!r}")
    before = step_module.WRITTEN_OUT_SOFTMAX
    others = tuple(t for t in before if t != device.type)
    step_module.WRITTEN_OUT_SOFTMAX = others if way == WAYS[0] else (*others, device.type)
    try:
        yield
    finally:
        step_module.WRITTEN_OUT_SOFTMAX = before


def time_step(configs: list[TrainConfig], device: torch.device, way: str) -> tuple[float, list[float]]:
    """(seconds a step, each run's last batch loss) of `configs` trained as one stack for their step
    budget, after a warm-up of the same (a CUDA graph's capture, kernels chosen)."""
    with output_layer(way, device):
        train_group(configs, device=device, evaluate=False, log_every=10**9)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        results = train_group(configs, device=device, evaluate=False, log_every=10**9)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        seconds = time.perf_counter() - start
    return seconds / configs[0].max_steps, [r.final_loss for r in results]


def compare(device: str | torch.device = "cpu", ds=(32, 128, 768), runs: int = 42, N: int = 4096, steps: int = 20,
            precisions=("tf32", "bf16")) -> list[dict]:
    """Per (d, precision): ms a step each way, their ratio (written-out / kernel: above 1, the kernel is
    faster) and the largest difference of the runs' last losses between the two (rounding only)."""
    device = resolve_device(device)
    rows = []
    for precision in precisions:
        for d in ds:
            configs = [TrainConfig(**{**c.as_dict(), "max_steps": steps, "loss_threshold": 0.0})
                       for c in paper_shape(N, d, runs, precision)]
            (kernel, losses_k), (written, losses_w) = (time_step(configs, device, way) for way in WAYS)
            rows.append({"N": N, "d": d, "runs": runs, "precision": precision, "steps": steps,
                         "ms_kernel": 1e3 * kernel, "ms_written": 1e3 * written, "ratio": written / kernel,
                         "loss_difference": max(abs(a - b) for a, b in zip(losses_k, losses_w))})
    return rows
