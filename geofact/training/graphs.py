"""A training step replayed as one CUDA graph where CUDA is (the lease issue's item 5).

A stacked step of a small model is about a hundred kernels of microseconds each; launched one by one
from Python, the launches, not the arithmetic, set the pace on a GPU. A CUDA graph records the
step's kernels once and replays them with one launch. What a graph can replay is pure device work on
tensors that outlive it: the trainers' step bodies read their inputs (a batch, the step number) from
buffers the host fills before each call and write their outputs (the losses, the stop rule's state)
into buffers allocated before the capture, and read nothing on the host (geofact.host: checked on a
CPU under fake tensors, tests/training/test_graphs.py).

`GraphedStep` runs such a body eagerly a few times on a side stream (torch's recipe: cuBLAS and the
allocator warm up outside the capture; these are real steps), then captures it (recording runs no
kernel) and from then on replays it. A stack that changes (runs leave it, a state is restored) needs
a new one. Where capture fails, the step goes on eagerly with a warning saying why: the results are
the same, only slower. Off CUDA, and with GEOFACT_CUDA_GRAPHS=0 in the environment, the body simply
runs.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Protocol

import torch

WARMUP_STEPS = 2  # eager steps before the capture (torch's examples use a few)
ENV = "GEOFACT_CUDA_GRAPHS"  # "0": never capture (an escape hatch for a lease; results do not change)
_eager = False  # set by `eager_steps`


def graphs_wanted(device: torch.device) -> bool:
    """Whether steps on `device` are captured: on CUDA, unless GEOFACT_CUDA_GRAPHS=0 or inside `eager_steps`."""
    setting = os.environ.get(ENV, "1")
    if setting not in ("0", "1"):
        raise ValueError(f"{ENV} must be '0' (eager steps) or '1' (CUDA graphs on CUDA), got {setting!r}")
    return device.type == "cuda" and setting == "1" and not _eager


@contextmanager
def eager_steps() -> Iterator[None]:
    """Steps made inside run eagerly, each kernel launched by itself (the benchmark counts them so)."""
    global _eager
    previous, _eager = _eager, True
    try:
        yield
    finally:
        _eager = previous


class Backend(Protocol):
    """How a body is warmed up and captured: `CudaGraphs` on a GPU; the tests put in their own."""

    def warm(self, body: Callable[[], None]) -> None: ...

    def capture(self, body: Callable[[], None]) -> Callable[[], None]: ...


class CudaGraphs:
    """torch.cuda's graphs: warm-up on a side stream, capture into a CUDAGraph, replay."""

    def warm(self, body: Callable[[], None]) -> None:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            body()
        torch.cuda.current_stream().wait_stream(side)

    def capture(self, body: Callable[[], None]) -> Callable[[], None]:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            body()  # records the kernels; runs none of them
        return graph.replay


class GraphedStep:
    """Call `body` once per step: eagerly, or (on CUDA) as a CUDA graph after `warmup` eager calls.

    `body` must be pure device work on tensors allocated before the first call, as the module
    docstring says; everything it computes must land in such tensors to be seen after a replay.
    """

    def __init__(self, body: Callable[[], None], device: torch.device, warmup: int = WARMUP_STEPS,
                 backend: Backend | None = None) -> None:
        if not isinstance(warmup, int) or warmup < 0:
            raise ValueError(f"warmup must be an integer >= 0, got {warmup!r}")
        self.body, self.warmup = body, warmup
        self.backend = backend if backend is not None else (CudaGraphs() if graphs_wanted(device) else None)
        self.replay: Callable[[], None] | None = None

    @property
    def captured(self) -> bool:
        return self.replay is not None

    def __call__(self) -> None:
        if self.backend is None:
            self.body()
        elif self.replay is not None:
            self.replay()
        elif self.warmup > 0:
            self.warmup -= 1
            self.backend.warm(self.body)
        else:
            try:
                self.replay = self.backend.capture(self.body)
            except Exception as error:  # noqa: BLE001 - any failure to capture means: go on eagerly
                warnings.warn(f"CUDA graph capture of the training step failed ({type(error).__name__}: {error}); "
                              f"training goes on eagerly, each kernel launched by itself: the same results, "
                              f"more slowly (set {ENV}=0 to skip the attempt)", RuntimeWarning, stacklevel=2)
                self.backend = None
                self.body()
                return
            self.replay()  # the capture ran nothing: this call's step runs now
