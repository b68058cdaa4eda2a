"""Where a stacked step's device time goes, op by op, against the bytes each op was counted to move (issue 47).

`geofact plan` prices a step by its count (geofact.training.traffic: each non-view op's bytes and FLOPs on fake
`meta` tensors) at rates fitted to a card's timed steps. On the H100 and H200 those rates come out at 43-50% of the
cards' memory bandwidth (1.46 and 2.41 TB/s against 3.35 and 4.8), and geofact's kernels at 34 us a launch, which no
measurement has placed on a kernel: the same counted work at the data-sheet peaks is 40.9 minutes on the H100, not
87.1 (`geofact plan`'s last lines). A whole step's time cannot say which ops run below the card's rates.

`profile_step` trains one stack at a shape for a few steps eagerly (each kernel launched by the op that computes
it) under torch's profiler and sums each op's own device time a step (its kernels; on a CPU its own CPU time),
beside the bytes the count gives that op and so the rate it moved them at, and times the same stack's step as a
CUDA graph replays it (geofact.training.graphs; `step_ab.block_seconds`): what the kernels take together
against what the step takes is the time between them. bench/profile_step.py runs it; a lease's first command
writes its rows (book/leases.md).
"""

from __future__ import annotations

import gc
from typing import Iterator

import torch
from torch.profiler import ProfilerActivity, profile

from geofact.host import as_device
from geofact.ops.step_ab import WARM_STEPS, block_seconds, timed_stack
from geofact.training import graphs
from geofact.training.config import TrainConfig
from geofact.training.stack import start_group
from geofact.training.trainer import FactGroup, train_block
from geofact.training.traffic import step_traffic

KERNELS_KEPT = 40  # a row's kernels, longest first (names of templated kernels run to hundreds of characters: cut)
UNATTRIBUTED = "(outside any op)"  # the ops' row of kernel time no op was given (by the profiler, or by `_op_name`)


def _op_name(event) -> str:
    """The op an event's own kernels belong to: its name, or where it is a runtime call (a kernel launch, a
    `cudaLaunchKernel` with no '::'), the nearest enclosing op's."""
    while event is not None and "::" not in event.name:
        event = event.cpu_parent
    return UNATTRIBUTED if event is None else event.name


def _own_times(prof, on_device: bool) -> dict[str, tuple[float, int]]:
    """{op name: (its own microseconds, calls)} over the profiled steps: its kernels' device time where `on_device`,
    else its own CPU time. (torch gives a kernel to the op it was launched under, never to the runtime call that
    launched it: `_op_name` is for an attribution that does.)"""
    totals: dict[str, list[float]] = {}
    for event in prof.events():
        if event.device_type != torch.autograd.DeviceType.CPU:  # a kernel's own event: counted with its op
            continue
        own = event.self_device_time_total if on_device else event.self_cpu_time_total
        name = _op_name(event)
        entry = totals.setdefault(name, [0.0, 0])
        entry[0] += own
        if name == event.name:
            entry[1] += 1
    return {name: (us, calls) for name, (us, calls) in totals.items() if us > 0}


# device events that are not kernels of the step: spans of waiting (with sync events on) around the profiled block
SYNC_SPANS = ("Context Sync", "Stream Sync", "Event Sync", "Stream Wait Event")


def _kernel_times(prof) -> dict[str, tuple[float, int]]:
    """{kernel name: (device microseconds, launches)} over the profiled steps, whichever op launched them (none on a
    CPU): which kernels the time is in, however the profiler attributes them to ops. A GPU-side span of a
    `record_function` (a user annotation, which spans the kernels inside it) and waits are not kernels."""
    totals: dict[str, list[float]] = {}
    for event in prof.events():
        if (event.device_type != torch.autograd.DeviceType.CUDA or getattr(event, "is_user_annotation", False)
                or event.name in SYNC_SPANS):
            continue
        entry = totals.setdefault(event.name, [0.0, 0])
        entry[0] += event.device_time_total
        entry[1] += 1
    return {name: (us, launches) for name, (us, launches) in totals.items()}


def _with_unattributed(own: dict[str, tuple[float, int]], kernel_times: dict[str, tuple[float, int]]
                       ) -> dict[str, tuple[float, int]]:
    """`own` (`_own_times`) with the kernels' time no op was given (`_kernel_times`' total less the ops') added to
    the UNATTRIBUTED row, where it is more than a thousandth of it: the ops then account for every kernel."""
    total = sum(us for us, _ in kernel_times.values())
    missing = total - sum(us for us, _ in own.values())
    if missing <= 1e-3 * total:
        return own
    us, calls = own.get(UNATTRIBUTED, (0.0, 0))
    return {**own, UNATTRIBUTED: (us + missing, calls)}


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def profile_step(configs: list[TrainConfig], device: str | torch.device = "cpu", steps: int = 10,
                 graphed_steps: int = 50) -> dict:
    """One stack's step, op by op (see the module docstring): {"N", "d", "runs", "precision", "device", "steps",
    "step_ms" (a step as training runs it), "ops_ms" (the ops' own time a step, summed; on a GPU "kernels_ms",
    every kernel's time a step, the ops' row UNATTRIBUTED holding the kernels the profiler gave no op: Triton 3
    launches through cuLaunchKernelEx, which no lease has yet profiled), "counted_bytes" (a step),
    "ops": [{"op", "calls" (a step), "us" (a step), "bytes" (counted a
    step; None where the count has no op of that name), "GBps"}], largest time first; "kernels": [{"kernel",
    "launches" (a step), "us" (a step)}], the KERNELS_KEPT longest, on a GPU}."""
    if steps < 1 or graphed_steps < 1:
        raise ValueError(f"steps and graphed_steps must be >= 1, got {steps} and {graphed_steps}")
    device = start_group(configs, as_device(device), "profile_step")
    counted = step_traffic(configs)
    step_seconds, _ = block_seconds(configs, graphed_steps, device)  # as training runs it: a CUDA graph on CUDA
    with graphs.eager_steps():
        group = FactGroup(configs, device, torch.float32, None, None)
        train_block(group, range(WARM_STEPS), set(), None)
        _synchronize(device)
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
        with profile(activities=activities) as prof:
            train_block(group, range(WARM_STEPS, WARM_STEPS + steps), set(), None)
            _synchronize(device)
    del group
    gc.collect()
    kernel_times = _kernel_times(prof)
    own = _with_unattributed(_own_times(prof, device.type == "cuda"), kernel_times)
    ops = []
    for name, (us, calls) in sorted(own.items(), key=lambda item: -item[1][0]):
        moved = counted.bytes_by_op.get(name.split("::")[-1])
        us_a_step = us / steps
        ops.append({"op": name, "calls": calls / steps, "us": us_a_step, "bytes": moved,
                    "GBps": moved / (us_a_step * 1e-6) / 1e9 if moved else None})
    kernels = [{"kernel": name[:200], "launches": launches / steps, "us": us / steps}
               for name, (us, launches) in sorted(kernel_times.items(), key=lambda item: -item[1][0])][:KERNELS_KEPT]
    first = configs[0]
    return {"N": first.N, "d": first.d, "runs": len(configs), "precision": first.precision, "device": str(device),
            "steps": steps, "step_ms": 1e3 * step_seconds, "ops_ms": sum(op["us"] for op in ops) / 1e3,
            "kernels_ms": sum(us for us, _ in kernel_times.values()) / steps / 1e3,
            "counted_bytes": counted.bytes, "ops": ops, "kernels": kernels}


def rows(device: str | torch.device = "cpu", ds=(32, 768), runs: int = 42, N: int = 4096, precision: str = "tf32",
         steps: int = 10) -> Iterator[dict]:
    """`profile_step` of the paper's stack (`step_ab.timed_stack`) at each d."""
    for d in ds:
        yield profile_step(timed_stack(N, d, runs, precision), device, steps)
