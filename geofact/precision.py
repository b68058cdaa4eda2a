"""The precision policy of training: how the matmuls of a step are computed, one field of every run's
config (`TrainConfig.precision`, `MultiHopConfig.precision`), so it keys the cached record.

    fp32  every matmul in full float32 (TF32 off): the CPU's only float32, and the reference
    tf32  float32 tensors, matmuls on CUDA's TF32 tensor cores (10-bit mantissa products, float32
          accumulation): several times the float32 rate on an H100, the default of `--device cuda`
    bf16  the forward under torch.autocast(bfloat16) (matmuls in bfloat16, float32 accumulation),
          weights, gradients and optimiser state in float32; single-hop stacks with uniform attention take
          the same casts with the backward written out (geofact.training.step_bf16), the rest autograd

Whatever the policy, the loss and the stop rule are computed in float32 (the logits are cast up
before the cross-entropy), and so are the mechanism analyses, which read the float32 weights. The
paper trains in neither mode it names; the exp-capacity page measures what bf16 does to the
capacity thresholds on the CPU. Records made before the policy existed were all fp32: an fp32
config keeps the key it had (`geofact.training.config`). torch is imported where a policy is applied,
so that the CLI can resolve one without it.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING, Iterator, Literal

if TYPE_CHECKING:
    import torch

Precision = Literal["fp32", "tf32", "bf16"]
PRECISIONS: dict[str, str] = {
    "fp32": "float32 matmuls (TF32 off)",
    "tf32": "float32 tensors, TF32 tensor-core matmuls (CUDA only)",
    "bf16": "bfloat16 autocast forward, float32 weights, loss and stop rule",
}


def _device_type(device: str | torch.device) -> str:
    return str(device).split(":")[0]


def default_precision(device: str | torch.device) -> str:
    """The policy a device gets unless asked otherwise: tf32 on CUDA, fp32 elsewhere."""
    return "tf32" if _device_type(device) == "cuda" else "fp32"


def check_precision(precision: str, device: str | torch.device | None = None) -> str:
    """`precision` if it is a policy (and, given a device, one that device can run); else a clear error."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {sorted(PRECISIONS)}, got {precision!r}")
    if device is not None and precision == "tf32" and _device_type(device) not in ("cuda", "meta"):
        raise ValueError(f"precision='tf32' needs a CUDA device (got device {str(device)!r}, which has no TF32): "
                         "use 'fp32' or 'bf16'")
    return precision


@contextmanager
def computing_in(precision: str, device: torch.device) -> Iterator[None]:
    """The policy in force for the block of code inside (torch's global float32 matmul setting is put back).
    The fake `meta` device of the tests has no autocast: there bf16 checks placement alone."""
    import torch

    check_precision(precision, device)
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high" if precision == "tf32" else "highest")
    try:
        if precision == "bf16" and device.type != "meta":
            # no cast cache: a CUDA graph's capture must not keep casts made outside it (torch's advice)
            with torch.autocast(device.type, dtype=torch.bfloat16, cache_enabled=False):
                yield
        else:
            yield
    finally:
        torch.set_float32_matmul_precision(before)


def at_least_fp32(logits: torch.Tensor) -> torch.Tensor:
    """Logits cast up to float32 for the loss (a bf16 forward's), float32 and float64 ones as they are."""
    import torch

    return logits.to(torch.promote_types(logits.dtype, torch.float32))
