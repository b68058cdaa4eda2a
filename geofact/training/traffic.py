"""A training step's memory traffic and arithmetic, counted on the CPU (issue 47, item 1).

At the paper's shapes the GPU step is bound by the bytes its kernels move, not by its FLOPs, so the
yardstick between GPU leases is a count: `step_traffic` runs the stacked trainer (geofact.training.trainer)
on data-less `meta` tensors under torch's FakeTensorMode, each step's kernels launched one by one
(`eager_steps`), and counts per step

- **ops**: dispatcher ops that launch a kernel (views apart);
- **bytes**: for each such op, the bytes of its tensor inputs and outputs (an `out=` argument counted as
  written only). Every op reads its inputs from device memory and writes its outputs there, so this is
  the traffic of the step without fusion: an upper bound on what a fused or cached kernel moves. An
  argument the op's schema says it writes and that it does not return (torch's fused AdamW updates its
  weights and moments in place and returns nothing) counts as written too. Three
  kinds of op touch less than their tensors, and are counted for what they touch: a gather, scatter or
  indexed add reads (and writes) only the indexed elements of the tensor it indexes (`INDEXED`); a copy
  or fill writes its first argument without reading it (`WRITTEN`); `zeros_like` and its kin read no
  input at all (`SHAPED`);
- **flops**: torch's own count (`torch.utils.flop_counter.FlopCounterMode`: matmuls and convolutions,
  forward and backward), the arithmetic the tensor cores do.

Counts are differences between two and one blocks of steps, so set-up and final bookkeeping cancel.
`roofline_ms` turns them into the shortest time a device could take: the bytes at its memory bandwidth
or the FLOPs at its matmul peak, whichever is longer (the step can do no better; geofact.ops.costs
prices what it does do).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field

import numpy as np
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import FlopCounterMode

from geofact.host import host_reads
from geofact.training.config import TrainConfig
from geofact.training.graphs import eager_steps
from geofact.training.grid import PAPER_GRID, CapacityGrid
from geofact.training.trainer import train_group

# H100 SXM data sheet: HBM3 bandwidth and dense tensor-core peaks (TF32 for the fp32 policy on CUDA)
H100_BANDWIDTH = 3.35e12  # bytes/s
H100_PEAK = {"fp32": 495e12, "tf32": 495e12, "bf16": 990e12}  # FLOP/s


# op -> which argument says how many elements of the indexed tensor (argument 0) it touches
INDEXED = {"gather": 2, "scatter_add_": 2, "scatter_": 2, "index_add_": 3, "index_put_": 2, "index_select": None,
           "embedding": None, "index": None}  # None: as many as the output has
WRITTEN = {"copy_", "fill_", "zero_", "normal_", "uniform_", "bernoulli_", "random_"}
SHAPED = {"zeros_like", "ones_like", "empty_like", "full_like", "new_zeros", "new_ones", "new_empty", "new_full"}


def _nbytes(t: torch.Tensor, elements: int | None = None) -> int:
    return (t.numel() if elements is None else min(elements, t.numel())) * t.element_size()


# Mutable arguments a kernel writes only in some calls: torch's fused Adam and AdamW store the gradients back only
# when they unscale them by a grad_scale (aten/src/ATen/native/cuda/fused_adam_utils.cuh), though the schema marks them
WRITTEN_IF = {"_fused_adamw_": {"grads": "grad_scale"}, "_fused_adam_": {"grads": "grad_scale"}}


def _mutated_unreturned(func, args, kwargs, outputs: list[torch.Tensor]) -> int:
    """Bytes of the tensors an op writes in place (its schema's mutable arguments) and does not return."""
    returned = {id(t) for t in outputs}
    conditions = WRITTEN_IF.get(func.overloadpacket.__name__, {})
    moved = 0
    for i, argument in enumerate(func._schema.arguments):
        if argument.alias_info is None or not argument.alias_info.is_write:
            continue
        if argument.name in conditions and kwargs.get(conditions[argument.name]) is None:
            continue
        value = args[i] if i < len(args) else kwargs.get(argument.name)
        tensors = value if isinstance(value, (list, tuple)) else [value]
        moved += sum(_nbytes(t) for t in tensors if isinstance(t, torch.Tensor) and id(t) not in returned)
    return moved


class TrafficCounter(TorchDispatchMode):
    """Ops (views apart) and the bytes they read and write, as they are dispatched (the module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops, self.bytes = 0, 0
        self.by_op: Counter[str] = Counter()  # bytes per op name: where the traffic goes

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func.is_view:
            return out
        self.ops += 1  # as geofact.ops.benchmark.OpCounter counts them
        if func.namespace == "prim":  # metadata queries (a tensor's device): no kernel reads anything
            return out
        name = func.overloadpacket.__name__
        outputs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        if name in SHAPED:
            self._add(name, sum(_nbytes(t) for t in outputs))
            return out
        inputs = [t for t in tree_flatten((args, {k: v for k, v in kwargs.items() if k != "out"}))[0]
                  if isinstance(t, torch.Tensor)]
        read = sum(_nbytes(t) for t in inputs)
        written = sum(_nbytes(t) for t in outputs) + _mutated_unreturned(func, args, kwargs, outputs)
        first = args[0] if args and isinstance(args[0], torch.Tensor) else None
        if first is not None and name in INDEXED:
            which = INDEXED[name]
            index = args[which] if which is not None and len(args) > which else None
            if isinstance(index, (list, tuple)):  # index_put_'s indices: one tensor per indexed dimension
                index = next((i for i in index if isinstance(i, torch.Tensor)), None)
            touched = index.numel() if isinstance(index, torch.Tensor) else sum(t.numel() for t in outputs)
            read -= _nbytes(first) - _nbytes(first, touched)
            if name.endswith("_"):  # in place: it writes only the indexed elements back
                written -= _nbytes(first) - _nbytes(first, touched)
        elif first is not None and name in WRITTEN:
            read -= _nbytes(first)
        self._add(name, read + written)
        return out

    def _add(self, name: str, moved: int) -> None:
        self.bytes += moved
        self.by_op[name] += moved


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
    bytes_by_op: dict[str, float] = field(default_factory=dict)  # op name -> bytes a step, largest first

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

    def count(blocks: int) -> tuple[TrafficCounter, int]:
        runs = [TrainConfig(**{**c.as_dict(), "max_steps": blocks * block_steps, "loss_threshold": 0.0}) for c in configs]
        with FakeTensorMode(allow_non_fake_inputs=True), host_reads(_fake_read), eager_steps():
            with TrafficCounter() as traffic, FlopCounterMode(display=False) as flops:
                train_group(runs, device="meta", evaluate=False, log_every=10**9, block_steps=block_steps)
        return traffic, flops.get_total_flops()

    (one, flops_one), (two, flops_two) = count(1), count(2)
    by_op = {k: (two.by_op[k] - one.by_op[k]) / block_steps for k in two.by_op}
    by_op = dict(sorted(((k, v) for k, v in by_op.items() if v > 0), key=lambda kv: -kv[1]))
    shape = max(configs, key=lambda c: c.R)
    return StepTraffic(len(configs), shape.N, shape.d, shape.batch_size, shape.precision, (two.ops - one.ops) / block_steps,
                       (two.bytes - one.bytes) / block_steps, (flops_two - flops_one) / block_steps, by_op)


PAPER_SHAPES = ((4096, 32, 42), (4096, 128, 42), (4096, 768, 42), (32768, 640, 4))  # (N, d, runs) issue 47 counts


def paper_shape(N: int, d: int, runs: int, precision: str = "fp32") -> list[TrainConfig]:
    """`runs` runs at the paper's batch (1024): the capacity grid's column at N = 4096 (42 runs: every R,
    seed and regime), else exp-scaling's R = 8 trials (learned and frozen, seeds in turn)."""
    if N == 4096 and runs == 42:
        return grid_column(d, precision=precision)
    return [TrainConfig(N=N, R=8, d=d, batch_size=min(1024, 8 * N), frozen_embeddings=bool(i % 2), seed=i // 2, lr=1e-3,
                        max_steps=15000, precision=precision) for i in range(runs)]


def grid_column(d: int, precision: str = "fp32") -> list[TrainConfig]:
    """The paper's capacity grid (geofact.training.grid.PAPER_GRID) at one d: every R, seed and regime, 42
    runs, as one stack."""
    grid = CapacityGrid(**{**PAPER_GRID.as_dict(), "d_values": (d,), "checkpoints": (), "precision": precision})
    return list(grid.configs().values())