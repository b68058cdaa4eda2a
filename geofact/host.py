"""Where a computation's tensors live, and the one way the trainers read device values on the host.

A host read (`.item()`, `.tolist()`, `bool(t)`, a copy to the CPU) waits for the device to finish
everything queued before it: read every step, it leaves a GPU idle between steps. The trainers read
once per block of steps, through `to_host`; nothing else in a block touches a device value.

The tests check this on a CPU with torch's FakeTensorMode, whose tensors carry no data: there any host
read raises `DataDependentOutputException` and an op mixing two devices raises. `as_device` accepts the
data-less 'meta' device there, as the stand-in for a GPU, and `host_reads` answers `to_host` with
values of the test's choosing (tests/training/test_fake_device.py). What the host knows without asking
the device (seeds, task tables, subject splits) is computed `on_host`: real CPU tensors even there.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np
import torch

from geofact.device import resolve_device

HostReader = Callable[[tuple[torch.Tensor, ...]], tuple[np.ndarray, ...]]
_reader: HostReader | None = None


def as_device(device: str | torch.device) -> torch.device:
    """The device a computation runs on. A `torch.device` was resolved where it entered (a sweep's workers,
    the trainers and the analyses below it take it as it is); a name ('cpu', 'cuda', a library function
    called directly) is resolved here by `geofact.device.resolve_device`, and under torch's FakeTensorMode
    'meta' is accepted as the tests' GPU."""
    if isinstance(device, torch.device):
        return device
    if torch.device(device).type == "meta":
        if torch._guards.detect_fake_mode() is None:
            raise ValueError("device='meta' is the tests' data-less stand-in for a GPU and needs torch's FakeTensorMode; "
                             "use 'cpu', 'cuda[:i]' or 'mps'")
        return torch.device(device)
    return resolve_device(device)


def to_host(*tensors: torch.Tensor) -> tuple[np.ndarray, ...]:
    """Copy device values to the host, as numpy arrays (once per block of steps in the trainers)."""
    if _reader is not None:
        return _reader(tensors)
    return tuple(t.detach().cpu().numpy() for t in tensors)


@contextmanager
def on_host() -> Iterator[None]:
    """Compute host-known data (drawn from seeds, task tables, index sets) as real CPU tensors: a no-op,
    except under the tests' FakeTensorMode, which it suspends so that such data keeps its values."""
    if torch._guards.detect_fake_mode() is None:
        yield
        return
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    with unset_fake_temporarily():
        yield


@contextmanager
def host_reads(reader: HostReader) -> Iterator[None]:
    """Answer `to_host` with `reader` for a while: under fake tensors there are no values to read, so
    the tests answer with values of their choosing and count the reads."""
    global _reader
    previous, _reader = _reader, reader
    try:
        yield
    finally:
        _reader = previous
