"""Device selection: explicit, validated, never hard-coded."""

from __future__ import annotations

import torch


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
