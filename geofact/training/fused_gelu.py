"""The MLP's GELU backward and its first bias's gradient in one Triton kernel (issue 47, item 2).

Backward through z = GELU(z1), z1 = h W_1 + b_1, the hand-written step (geofact.training.step.head_loss_and_grads)
computes d_z1 = GELU'(z1) d_z with torch's kernel (a read of d_z and z1, a write of d_z1) and then b_1's gradient,
the sum of d_z1 over the batch (another read): four passes over the MLP's (M, B, 4d) hidden states, the largest
activation of a step. `gelu_backward` makes three: it writes d_z1 and, per program, the partial sum of its rows
(M, programs, 4d; at most 1/16 of them, geofact.training.fused_norm.LEAST_ROWS), which torch sums in a fixed order.
At 42 runs, N = 4096, batch 1024 it took the count (geofact.training.traffic) from 4.43 to 4.34 GB a step at d = 128.

It runs where geofact.training.fused_norm's kernels run (`fused_norm.used`), with their tiling; GELU is the exact
one (erf), as torch's `F.gelu` default:

    d_z1 = d_z (Phi(z1) + z1 phi(z1)),   Phi(x) = (1 + erf(x / sqrt 2)) / 2,   phi(x) = exp(-x^2 / 2) / sqrt(2 pi)

tests/training/test_fused_norm.py checks it against autograd in float64, in Triton's interpreter.
"""

from __future__ import annotations  # the kernel's `tl.constexpr` annotations stay strings: no Triton at import

import torch

from geofact.training import fused_ce
from geofact.training.fused_norm import _accumulator, _tiling, _warps


def _kernel(d_z, z1, d_z1, partial, rows, W, span, s_gm, s_gb, s_gw, s_zm, s_zb, s_zw, s_om, s_ob, s_ow, s_pm, s_pp, s_pw,
            ROWS: tl.constexpr, BLOCK_W: tl.constexpr, ACC: tl.constexpr):
    """Program (row span, run): d_z1 of its rows, ROWS at a time, and their sum into partial[run, program]."""
    run = tl.program_id(1).to(tl.int64)  # 64-bit: runs x a run's stride can pass 2^31
    ws = tl.arange(0, BLOCK_W)
    w_ok = ws < W
    total = tl.zeros((BLOCK_W,), ACC)
    start = tl.program_id(0) * span
    for r0 in range(start, tl.minimum(start + span, rows), ROWS):
        i = r0 + tl.arange(0, ROWS)
        both = (i < rows)[:, None] & w_ok[None, :]
        g = tl.load(d_z + run * s_gm + i[:, None] * s_gb + ws[None, :] * s_gw, mask=both, other=0.0)
        x = tl.load(z1 + run * s_zm + i[:, None] * s_zb + ws[None, :] * s_zw, mask=both, other=0.0)
        cdf = 0.5 * (1.0 + tl.math.erf(x * 0.7071067811865476))
        pdf = 0.3989422804014327 * tl.exp(-0.5 * x * x)
        d = g * (cdf + x * pdf)
        total += tl.sum(d, 0)
        tl.store(d_z1 + run * s_om + i[:, None] * s_ob + ws[None, :] * s_ow, d, mask=both)
    tl.store(partial + run * s_pm + tl.program_id(0) * s_pp + ws * s_pw, total, mask=w_ok)


@torch.library.custom_op("geofact::gelu_backward_rows", mutates_args=())
def gelu_backward_rows(d_z: torch.Tensor, z1: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(d_z1, partial): GELU's backward of d_z at z1, both (M, B, w) (any strides), and per run and program the sum
    of its rows of d_z1 (M, programs, w), whose sum over programs is the bias's gradient (`gelu_backward`)."""
    if z1.dim() != 3 or d_z.shape != z1.shape:
        raise ValueError(f"d_z and z1 must be (runs, batch, width) of one shape, got {tuple(d_z.shape)} and {tuple(z1.shape)}")
    M, rows, W = z1.shape
    d_z1 = torch.empty(z1.shape, dtype=z1.dtype, device=z1.device)
    block_w, rows_at_once, programs, span = _tiling(M, rows, W)
    partial = z1.new_empty(M, programs, W)
    if programs == 0:
        return d_z1, partial
    fused_ce.build(_kernel, z1.device)[(programs, M)](
        d_z, z1, d_z1, partial, rows, W, span, *d_z.stride(), *z1.stride(), *d_z1.stride(), *partial.stride(),
        ROWS=rows_at_once, BLOCK_W=block_w, ACC=_accumulator(z1), num_warps=_warps(block_w))
    return d_z1, partial


@gelu_backward_rows.register_fake
def _(d_z, z1):
    M, rows, W = z1.shape
    return torch.empty(z1.shape, dtype=z1.dtype, device=z1.device), z1.new_empty(M, _tiling(M, rows, W)[2], W)


def gelu_backward(d_z: torch.Tensor, z1: torch.Tensor, out: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(d_z1 (M, B, w), d_b1 (M, w)): through z = GELU(z1 = h W_1 + b_1) from d_z; d_b1 written into `out` if given."""
    d_z1, partial = gelu_backward_rows(d_z, z1)
    return d_z1, torch.sum(partial, 1, out=out)
