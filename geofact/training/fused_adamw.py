"""AdamW for every run of a stack in one Triton kernel: seven passes over the weights a step (issue 47, item 2).

geofact.training.optim.StackedAdamW steps a stack through torch's fused AdamW. Stepped together (one call per
learning rate) a stopped run's weights must be copied out of the buffer and the clipping must scale the
gradient first, five more passes over the (M, P) weights; stepped per run (the GPU's way from a million
weights a run) those fold into each call's `grad_scale` and `found_inf`, at a launch a run, and the kernel then
stores the unscaled gradient back, an eighth pass. This kernel takes every run in one launch: each run's
learning rate, clipping divisor, skip flag and trained column ranges are read from small (M, ...) tensors, and
each trained weight is read once with its gradient and moments and written once with its moments: seven passes,
whatever the stack.

The update is torch's (aten/src/ATen/native/cuda/fused_adam_utils.cuh, ADAMW mode), in float32 (float64 for
float64 buffers):

    g = grad / divisor;  p -= lr wd p;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
    p -= (lr / (1 - b1^t)) m / (sqrt(v) / sqrt(1 - b2^t) + eps)

tests/training/test_fused_adamw.py checks it against torch's kernel, in Triton's interpreter, in float64; as a
custom op it states its own traffic (`traffic`, the trained entries' seven passes: dispatch_count.STATED).
"""

from __future__ import annotations  # the kernel's `tl.constexpr` annotations stay strings: no Triton at import

import torch

from geofact.training.fused_ce import build

BLOCK = 1024  # weights a program


def _adamw_kernel(flat, grad, m, v, step_size, bias2_sqrt, lr, divisors, skip, ranges, P, s_rm, s_rk,
                  weight_decay: tl.constexpr, beta1: tl.constexpr, beta2: tl.constexpr, eps: tl.constexpr,
                  BLOCK: tl.constexpr, K: tl.constexpr):
    """Program (column block, run): the trained entries of one run's row among `BLOCK` columns. The float
    hyperparameters are compile-time constants: as run-time arguments a GPU would take them in float32, and
    float64 buffers would step with float32's betas (1 - b2 to 7 digits)."""
    cols = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    run = tl.program_id(1)
    trained = cols < 0
    for k in tl.static_range(K):
        a = tl.load(ranges + run * s_rm + k * s_rk)
        b = tl.load(ranges + run * s_rm + k * s_rk + 1)
        trained |= (cols >= a) & (cols < b)
    limit = tl.where(tl.load(skip + run) == 0, P, 0)  # a skipped run: no column (as a bound, not a mask: scalars)
    ok = trained & (cols < limit)
    at = run.to(tl.int64) * P + cols
    p = tl.load(flat + at, mask=ok, other=0.0)
    g = tl.load(grad + at, mask=ok, other=0.0) / tl.load(divisors + run)
    exp_avg = tl.load(m + at, mask=ok, other=0.0)
    exp_avg_sq = tl.load(v + at, mask=ok, other=0.0)
    p -= tl.load(lr + run) * weight_decay * p
    exp_avg = beta1 * exp_avg + (1 - beta1) * g
    exp_avg_sq = beta2 * exp_avg_sq + (1 - beta2) * g * g
    denom = tl.sqrt(exp_avg_sq) / tl.load(bias2_sqrt + run) + eps
    p -= tl.load(step_size + run) * exp_avg / denom
    tl.store(flat + at, p, mask=ok)
    tl.store(m + at, exp_avg, mask=ok)
    tl.store(v + at, exp_avg_sq, mask=ok)


@torch.library.custom_op("geofact::adamw_", mutates_args=("flat", "m", "v"))
def adamw_(flat: torch.Tensor, grad: torch.Tensor, m: torch.Tensor, v: torch.Tensor, step_size: torch.Tensor,
           bias2_sqrt: torch.Tensor, lr: torch.Tensor, divisors: torch.Tensor, skip: torch.Tensor, ranges: torch.Tensor,
           weight_decay: float, beta1: float, beta2: float, eps: float, traffic: int) -> None:
    """One AdamW step of the runs of contiguous (M, P) buffers `flat` (weights), `grad`, `m`, `v` (moments): run i's
    entries in its column `ranges[i]` (M, K, 2) [a, b) (empty where a = b), unless skip[i] != 0, with its
    step_size[i] = lr / (1 - b1^t), bias2_sqrt[i] = sqrt(1 - b2^t), lr[i], and gradient divided by divisors[i].
    `traffic`: the bytes it moves, stated for the count (dispatch_count.STATED)."""
    M, P = flat.shape
    build(_adamw_kernel, flat.device)[(-(-P // BLOCK), M)](
        flat, grad, m, v, step_size, bias2_sqrt, lr, divisors, skip, ranges, P, ranges.stride(0), ranges.stride(1),
        weight_decay, beta1, beta2, eps, BLOCK=BLOCK, K=ranges.shape[1])


@adamw_.register_fake
def _(flat, grad, m, v, step_size, bias2_sqrt, lr, divisors, skip, ranges, weight_decay, beta1, beta2, eps, traffic):
    return None


def range_table(ranges: list[list[tuple[int, int]]], device: torch.device) -> torch.Tensor:
    """(M, K, 2) int64: each run's column ranges, padded with empty ones to the most any run has."""
    K = max(1, max(len(r) for r in ranges))
    return torch.tensor([list(r) + [(0, 0)] * (K - len(r)) for r in ranges], dtype=torch.long, device=device)
