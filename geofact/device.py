"""Device selection: explicit, validated, never hard-coded; and the CPU settings training runs under."""

from __future__ import annotations

import ctypes
import os

import torch

from geofact.processes import usable_cores


def resolve_device(device: str | torch.device) -> torch.device:
    """Turn 'cpu', 'cuda', 'cuda:1' or 'mps' into a torch.device, failing clearly when it is absent."""
    dev = torch.device(device)
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError(f"device={str(device)!r} was requested but CUDA is not available on this machine (use device='cpu')")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise RuntimeError(f"device={str(device)!r}: only {torch.cuda.device_count()} CUDA device(s) present")
    elif dev.type == "mps":
        if not torch.backends.mps.is_available():
            raise RuntimeError(f"device={str(device)!r} was requested but MPS is not available on this machine")
    elif dev.type != "cpu":
        raise ValueError(f"device must be 'cpu', 'cuda[:i]' or 'mps', got {str(device)!r}")
    return dev


def describe_device(device: str | torch.device) -> str:
    """Human-readable device name for provenance, e.g. 'cpu' or 'cuda (NVIDIA H100 80GB HBM3)'."""
    dev = resolve_device(device)
    if dev.type == "cuda":
        return f"cuda ({torch.cuda.get_device_name(dev)})"
    return dev.type


_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc mallopt parameters


def _keep_freed_memory() -> None:
    """Ask glibc malloc to reuse freed blocks instead of returning them to the OS.

    Each step allocates and frees (batch x N) logits and gradients (16 MiB at N = 4096); above
    glibc's mmap threshold every such allocation is a fresh mapping whose pages fault in on first
    touch, which bench/bench_trainer.py measured at ~30% of a d = 32 step. Without glibc (macOS,
    musl) this does nothing.
    """
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (AttributeError, OSError):
        return
    mallopt(_M_MMAP_THRESHOLD, 1 << 30)
    mallopt(_M_TRIM_THRESHOLD, 1 << 30)


THREADS_ENV = "GEOFACT_THREADS"  # set by sweep workers: each process trains on this many threads


def configure_cpu(threads: int | None = None) -> None:
    """Flush denormals to zero (weight decay drives weights denormal, ~10x slower steps), keep freed
    memory for reuse (see _keep_freed_memory) and use the cores this process may run on (or
    $GEOFACT_THREADS of them)."""
    torch.set_flush_denormal(True)
    _keep_freed_memory()
    torch.set_num_threads(threads or int(os.environ.get(THREADS_ENV, 0)) or usable_cores())
