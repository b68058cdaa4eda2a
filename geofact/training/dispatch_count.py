"""The bytes a sequence of torch ops reads and writes, counted as they are dispatched (issue 47, item 1).

Only torch and numpy are imported here, so that `count_step` can count the training step of an older
checkout of geofact as well as this one's: bench/count_lease_steps.py loads this file by its path beside
the code a GPU lease ran, and the plan's cost model is then fitted to what those steps moved
(geofact.ops.calibration). geofact.training.traffic counts this checkout's step with it, and says what
is counted.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Callable

import numpy as np
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import FlopCounterMode

# op -> which argument says how many elements of the indexed tensor (argument 0) it touches
INDEXED = {"gather": 2, "scatter_add_": 2, "scatter_": 2, "index_add_": 3, "index_put_": 2, "index_select": None,
           "embedding": None, "index": None}  # None: as many as the output has
WRITTEN = {"copy_", "fill_", "zero_", "normal_", "uniform_", "bernoulli_", "random_"}
SHAPED = {"zeros_like", "ones_like", "full_like", "new_zeros", "new_ones", "new_full"}
# no kernel, nothing read or written: allocations, and `_unsafe_view`, a view its schema does not call one (a reshape
# that had to copy is a `clone`, counted, then this); until the ninth session (2026-11-29) `empty_like`, `new_empty`
# and `_unsafe_view` counted as moving their tensors
NO_KERNEL = {"empty", "empty_like", "new_empty", "empty_strided", "_unsafe_view"}


# Namespaces of ops whose mutable arguments are outputs they write without reading (geofact.training.fused_ce's kernels)
WRITE_ONLY = {"geofact"}
# An argument by which an op of those namespaces states the bytes it moves, taken as its count (a kernel that touches
# only some entries of its tensors: geofact.training.fused_adamw, a run's trained columns)
STATED = "traffic"


def _nbytes(t: torch.Tensor, elements: int | None = None) -> int:
    """Bytes of t's distinct elements (an expanded tensor's repeats, stride 0, are the same memory), or of `elements`
    of them. Until the ninth session (2026-11-29) an expanded tensor counted every repeat."""
    distinct = math.prod(size for size, stride in zip(t.shape, t.stride()) if stride != 0) if t.numel() else 0
    return (distinct if elements is None else min(elements, distinct)) * t.element_size()


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
        self.kernel_ops = 0  # of the ops, launches of geofact's own kernels (torch.ops.geofact.*)
        self.paused = False  # inside an op counted as one kernel (OneKernel)
        self.by_op: Counter[str] = Counter()  # bytes per op name: where the traffic goes

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        # metadata queries (a fake tensor's device, `prim`) launch no kernel and read nothing: until the ninth session
        # (2026-11-29) they were counted as ops, as geofact.ops.benchmark.OpCounter counts them, half the ops of a
        # step (98 of 200 at d = 128)
        if func.is_view or self.paused or func.namespace == "prim" or func.overloadpacket.__name__ in NO_KERNEL:
            return out
        self.ops += 1
        self.kernel_ops += func.namespace == "geofact"
        name = func.overloadpacket.__name__
        outputs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        if name in SHAPED:
            self._add(name, sum(_nbytes(t) for t in outputs))
            return out
        if func.namespace in WRITE_ONLY and any(a.name == STATED for a in func._schema.arguments):
            at = next(i for i, a in enumerate(func._schema.arguments) if a.name == STATED)
            self._add(name, int(args[at] if at < len(args) else kwargs[STATED]))
            return out
        read_args = args if func.namespace not in WRITE_ONLY else [
            a for a, argument in zip(args, func._schema.arguments) if argument.alias_info is None or not argument.alias_info.is_write]
        inputs = [t for t in tree_flatten((read_args, {k: v for k, v in kwargs.items() if k != "out"}))[0]
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


# Composite ops that a GPU runs as one kernel but that dispatch as the ops of their definition on `meta` tensors,
# where torch registers no kernel of theirs: counted as that kernel, their inputs read and outputs written once
# (torch's fused RMSNorm forward on `meta`: pow, mean, add, rsqrt, mul, five passes where CUDA's kernel makes two;
# every count before the ninth session (2026-11-29) counted those five)
ONE_KERNEL = {"_fused_rms_norm"}


class OneKernel(TorchFunctionMode):
    """The ops of ONE_KERNEL counted in `traffic` as one kernel each, the ops they dispatch to not counted."""

    def __init__(self, traffic: TrafficCounter) -> None:
        super().__init__()
        self.traffic = traffic

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        packet = getattr(func, "overloadpacket", func)
        if getattr(packet, "__name__", None) not in ONE_KERNEL or self.traffic.paused:
            return func(*args, **kwargs)
        self.traffic.paused = True
        try:
            out = func(*args, **kwargs)
        finally:
            self.traffic.paused = False
        inputs = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        outputs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        self.traffic.ops += 1
        self.traffic._add(packet.__name__, sum(_nbytes(t) for t in inputs + outputs))
        return out


def fake_read(tensors):
    """`to_host` under fake tensors: losses 0.5 (no run meets the stop rule), stop steps past any budget."""
    return tuple(np.zeros(tuple(t.shape), dtype=bool) if t.dtype == torch.bool
                 else np.full(tuple(t.shape), 0.5) if t.dtype.is_floating_point
                 else np.full(tuple(t.shape), 2**40, dtype=np.int64) for t in tensors)


def kernel_flops(counter: FlopCounterMode) -> int:
    """The FLOPs `counter` counted in geofact's own kernels (torch.ops.geofact.*: the fused output layer's Triton
    matmuls, geofact.training.fused_ce), which a card runs at another rate than cuBLAS's (a calibration prices
    them apart: geofact.ops.calibration.CountedRates.kernel_flops)."""
    return sum(n for op, n in counter.get_flop_counts().get("Global", {}).items() if str(op).startswith("geofact."))


def count_step(train: Callable[[int], object], block_steps: int) -> dict:
    """Per step of `train(max_steps)` (a stacked trainer run for that many steps on the `meta` device, its host
    reads answered by `fake_read`): ops, bytes, FLOPs (of which `kernel_ops` and `kernel_flops` in geofact's
    kernels) and bytes by op, the difference between two blocks of `block_steps` steps and one, so that set-up and final bookkeeping
    cancel."""

    def count(blocks: int) -> tuple[TrafficCounter, int, int]:
        with FakeTensorMode(allow_non_fake_inputs=True):
            with TrafficCounter() as traffic, OneKernel(traffic), FlopCounterMode(display=False) as flops:
                train(blocks * block_steps)
        return traffic, flops.get_total_flops(), kernel_flops(flops)

    (one, flops_one, kernel_one), (two, flops_two, kernel_two) = count(1), count(2)
    by_op = {k: (two.by_op[k] - one.by_op[k]) / block_steps for k in two.by_op}
    return {"ops": (two.ops - one.ops) / block_steps, "bytes": (two.bytes - one.bytes) / block_steps,
            "flops": (flops_two - flops_one) / block_steps, "kernel_flops": (kernel_two - kernel_one) / block_steps,
            "kernel_ops": (two.kernel_ops - one.kernel_ops) / block_steps,
            "bytes_by_op": dict(sorted(((k, v) for k, v in by_op.items() if v > 0), key=lambda kv: -kv[1]))}
