"""A training step's memory traffic and arithmetic, counted on the CPU (issue 47, item 1).

At the paper's shapes the GPU step is bound by the bytes its kernels move, not by its FLOPs, so the
yardstick between GPU leases is a count: `step_traffic` runs the stacked trainer (geofact.training.trainer)
on data-less `meta` tensors under torch's FakeTensorMode, each step's kernels launched one by one
(`eager_steps`), and counts per step

- **ops**: dispatcher ops that launch a kernel (views apart);
- **bytes**: for each such op, the bytes of its tensor inputs and outputs (an `out=` argument counted as
  written only). Every op reads its inputs from device memory and writes its outputs there, so this is
  the traffic of the step without fusion: an upper bound on what a fused or cached kernel moves;
- **flops**: torch's own count (`torch.utils.flop_counter.FlopCounterMode`: matmuls and convolutions,
  forward and backward), the arithmetic the tensor cores do.

Counts are differences between two and one blocks of steps, so set-up and final bookkeeping cancel.
`roofline_ms` turns them into the shortest time a device could take: the bytes at its memory bandwidth
or the FLOPs at its matmul peak, whichever is longer (the step can do no better; geofact.training.plan
prices what it does do).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import FlopCounterMode

from geofact.host import host_reads
from geofact.training.config import TrainConfig
from geofact.training.graphs import eager_steps
from geofact.training.trainer import train_group

# H100 SXM data sheet: HBM3 bandwidth and dense tensor-core peaks (TF32 for the fp32 policy on CUDA)
H100_BANDWIDTH = 3.35e12  # bytes/s
H100_PEAK = {"fp32": 495e12, "tf32": 495e12, "bf16": 990e12}  # FLOP/s


class TrafficCounter(TorchDispatchMode):
    """Ops (views apart) and the bytes of their tensor inputs and outputs, as they are dispatched."""

    def __init__(self) -> None:
        super().__init__()
        self.ops, self.bytes = 0, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if not func.is_view:
            self.ops += 1
            read = [t for t in tree_flatten((args, {k: v for k, v in kwargs.items() if k != "out"}))[0]
                    if isinstance(t, torch.Tensor)]
            written = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
            self.bytes += sum(t.numel() * t.element_size() for t in read + written)
        return out


def _fake_read(tensors):
    """`to_host` under fake tensors: losses 0.5 (no run meets the stop rule), stop steps past any budget."""
    return tuple(np.zeros(tuple(t.shape), dtype=bool) if t.dtype == torch.bool
                 else np.full(tuple(t.shape), 0.5) if t.dtype.is_floating_point
                 else np.full(tuple(t.shape), 2**40, dtype=np.int64) for t in tensors)


@dataclass(frozen=True)
class StepTraffic:
    """One stacked step of `runs` runs shaped like `config` (the stack's largest R)."""

    runs: int
    N: int
    d: int
    batch_size: int
    precision: str
    ops: float
    bytes: float
    flops: float

    def roofline_ms(self, bandwidth: float = H100_BANDWIDTH, peak: dict[str, float] | None = None) -> float:
        """The shortest a step can take: its bytes at `bandwidth` or its FLOPs at the peak, the longer."""
        peak = H100_PEAK if peak is None else peak
        return 1e3 * max(self.bytes / bandwidth, self.flops / peak.get(self.precision, peak["fp32"]))

    def as_dict(self) -> dict:
        return {**asdict(self), "roofline_h100_ms": self.roofline_ms()}


def step_traffic(configs: list[TrainConfig], block_steps: int = 2) -> StepTraffic:
    """Ops, bytes and FLOPs of one step of `configs` trained as one stack (no stop rule in reach), counted
    on `meta` tensors: no memory is allocated and nothing is computed, so the paper's shapes count on a laptop."""
    if not configs:
        raise ValueError("step_traffic needs at least one run config")

    def count(blocks: int) -> tuple[int, int, int]:
        runs = [TrainConfig(**{**c.as_dict(), "max_steps": blocks * block_steps, "loss_threshold": 0.0}) for c in configs]
        with FakeTensorMode(allow_non_fake_inputs=True), host_reads(_fake_read), eager_steps():
            with TrafficCounter() as traffic, FlopCounterMode(display=False) as flops:
                train_group(runs, device="meta", evaluate=False, log_every=10**9, block_steps=block_steps)
        return traffic.ops, traffic.bytes, flops.get_total_flops()

    one, two = count(1), count(2)
    per_step = [(b - a) / block_steps for a, b in zip(one, two)]
    shape = max(configs, key=lambda c: c.R)
    return StepTraffic(len(configs), shape.N, shape.d, shape.batch_size, shape.precision, *per_step)


PAPER_SHAPES = ((4096, 32, 42), (4096, 128, 42), (4096, 768, 42), (32768, 640, 4))  # (N, d, runs) issue 47 counts


def paper_shape(N: int, d: int, runs: int, precision: str = "fp32") -> list[TrainConfig]:
    """`runs` runs at the paper's batch (1024): the capacity grid's column at N = 4096 (42 runs: every R,
    seed and regime), else exp-scaling's R = 8 trials (learned and frozen, seeds in turn)."""
    if N == 4096 and runs == 42:
        return grid_column(d, precision=precision)
    return [TrainConfig(N=N, R=8, d=d, batch_size=1024, frozen_embeddings=bool(i % 2), seed=i // 2, lr=1e-3,
                        max_steps=15000, precision=precision) for i in range(runs)]


def traffic_rows(shapes=PAPER_SHAPES, calibration=None, precision: str = "tf32") -> list[dict]:
    """`step_traffic` at each (N, d, runs), with what geofact.training.plan assumes for the same stack: its
    bytes (`plan_bytes`, the analytic `step_bytes`) and its calibrated milliseconds (`predicted_ms`), at
    `precision` (the paper profile's on CUDA: tf32; the count itself is of the float32 step's tensors)."""
    from geofact.training.plan import H100_SPEC, step_bytes

    calibration = H100_SPEC if calibration is None else calibration
    rows = []
    for N, d, runs in shapes:
        configs = paper_shape(N, d, runs, precision)
        traffic = step_traffic([TrainConfig(**{**c.as_dict(), "precision": "fp32"}) for c in configs])
        traffic = StepTraffic(**{**asdict(traffic), "precision": precision})
        shape = max(configs, key=lambda c: c.R)
        rows.append({**traffic.as_dict(), "bytes_per_step": traffic.bytes, "flops_per_step": traffic.flops,
                     "ops_per_step": traffic.ops, "plan_bytes": runs * step_bytes(shape),
                     "predicted_ms": 1e3 * calibration.step_seconds(shape, runs)})
    return rows


def grid_column(d: int, N: int = 4096, batch_size: int = 1024, R_values=(2, 4, 8, 10, 12, 14, 16), seeds=(0, 1, 2),
                precision: str = "fp32") -> list[TrainConfig]:
    """The capacity grid's runs at one d (every R, seed and regime: 42 at the paper's grid), as one stack."""
    return [TrainConfig(N=N, R=R, d=d, batch_size=batch_size, frozen_embeddings=frozen, seed=s, lr=1e-3,
                        max_steps=15000, precision=precision)
            for frozen in (False, True) for R in R_values for s in seeds]
