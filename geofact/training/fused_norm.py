"""Each run's RMSNorm and its gain as Triton kernels, forward and backward (issue 47, item 2).

The hand-written steps (geofact.training.step, geofact.training.hop_step) normalise three tensors a step, the
embeddings x (M, B, L, d), the attention's output h and the MLP's h2 (M, B, d), each times its run's gain
g (M, d). Through torch's ops that is torch's fused RMSNorm (a read of x, a write of x^ and of 1 / rms), the gain's
multiply (a read, a write), and backward `dy * x^` and its sum over rows for the gain's gradient, `dy * g`,
and torch's fused backward (a read of dy g and x, a write of dx): thirteen passes over a tensor of x's size. torch's
kernels take one gain for all rows, so a stack's per-run gains cannot go into them. Here:

- `rms_norm`: a read of x, a write of y = x^ g and of 1 / rms (two passes);
- `rms_norm_backward`: a read of dy and x, a write of dx, and each program's partial sum of dy x^ over its rows,
  (M, programs, d), which torch sums into the gain's gradient (three passes, and the partial sums: a sum in a
  fixed order, so a GPU step gives the same gradient every time, which atomic additions would not).

At 42 runs, N = 4096, batch 1024 they took the count (geofact.training.traffic, ninth session of 2026-11-29) from 1.31 to 1.14 GB a
step at d = 32, 5.29 to 4.58 at d = 128 and 42.6 to 38.4 at d = 768.

They run where the output layer's kernels run (geofact.training.fused_ce: CUDA with Triton, not with
GEOFACT_FUSED_CE=0; a CPU in Triton's interpreter), for float32 and float64 stacks; a CPU's step keeps torch's ops,
which every laptop record was trained with. Each is a torch custom op whose fake implementation states its outputs,
so the count takes the kernel's own traffic (its inputs read once, its outputs written once).
tests/training/test_fused_norm.py checks them against autograd in float64, in Triton's interpreter.

    y = g x r,  r = (mean(x^2) + eps)^(-1/2);   dx = r (u - x^ mean(u x^)),  u = g dy,  x^ = x r;   dg = sum of dy x^
"""

from __future__ import annotations  # the kernels' `tl.constexpr` annotations stay strings: no Triton at import

import math

import torch

from geofact.training import fused_ce
from geofact.training.model import RMS_EPS

DEVICES = ("cuda", "meta")  # where a step normalises through these kernels (the meta device: the count of a GPU step)
FILL_PROGRAMS = 1024  # a run's rows are shared among programs until the stack has about this many
ELEMENTS = 4096  # of a (rows, d) tile a program holds at once (registers)
LEAST_ROWS = 16  # a program's rows at least: its partial sum of the gain's gradient is then at most 1/16 of them


def used(x: torch.Tensor) -> bool:
    """Whether a step normalises x through these kernels: on DEVICES where the fused kernels are wanted
    (geofact.training.fused_ce.wanted), float32 or float64."""
    return x.device.type in DEVICES and x.dtype in (torch.float32, torch.float64) and fused_ce.wanted()


def _forward_kernel(x, gain, y, r, rows, L, D, span,
                    s_xm, s_xb, s_xl, s_xk, s_gm, s_gk, s_ym, s_yb, s_yl, s_yk, s_rm, s_rb, s_rl,
                    eps: tl.constexpr, ROWS: tl.constexpr, BLOCK_D: tl.constexpr):
    """Program (row span, run): rows [program span, next) of the run, ROWS at a time; row i is (b, l) = divmod(i, L)."""
    run = tl.program_id(1).to(tl.int64)  # 64-bit: runs x a run's stride can pass 2^31
    ks = tl.arange(0, BLOCK_D)
    k_ok = ks < D
    g = tl.load(gain + run * s_gm + ks * s_gk, mask=k_ok, other=0.0)
    start = tl.program_id(0) * span
    for r0 in range(start, tl.minimum(start + span, rows), ROWS):
        i = r0 + tl.arange(0, ROWS)
        ok = i < rows
        b, l = i // L, i % L
        both = ok[:, None] & k_ok[None, :]
        v = tl.load(x + run * s_xm + b[:, None] * s_xb + l[:, None] * s_xl + ks[None, :] * s_xk, mask=both, other=0.0)
        rstd = 1.0 / tl.sqrt(tl.sum(v * v, 1) / D + eps)
        tl.store(y + run * s_ym + b[:, None] * s_yb + l[:, None] * s_yl + ks[None, :] * s_yk,
                 v * rstd[:, None] * g[None, :], mask=both)
        tl.store(r + run * s_rm + b * s_rb + l * s_rl, rstd, mask=ok)


def _backward_kernel(dy, x, r, gain, dx, partial, rows, L, D, span,
                     s_dm, s_db, s_dl, s_dk, s_xm, s_xb, s_xl, s_xk, s_rm, s_rb, s_rl, s_gm, s_gk,
                     s_om, s_ob, s_ol, s_ok, s_pm, s_pp, s_pk,
                     ROWS: tl.constexpr, BLOCK_D: tl.constexpr, ACC: tl.constexpr):
    """Program (row span, run): dx of its rows, and the sum of dy x^ over them into partial[run, program]."""
    run = tl.program_id(1).to(tl.int64)
    ks = tl.arange(0, BLOCK_D)
    k_ok = ks < D
    g = tl.load(gain + run * s_gm + ks * s_gk, mask=k_ok, other=0.0)
    d_gain = tl.zeros((BLOCK_D,), ACC)
    start = tl.program_id(0) * span
    for r0 in range(start, tl.minimum(start + span, rows), ROWS):
        i = r0 + tl.arange(0, ROWS)
        ok = i < rows
        b, l = i // L, i % L
        both = ok[:, None] & k_ok[None, :]
        d = tl.load(dy + run * s_dm + b[:, None] * s_db + l[:, None] * s_dl + ks[None, :] * s_dk, mask=both, other=0.0)
        v = tl.load(x + run * s_xm + b[:, None] * s_xb + l[:, None] * s_xl + ks[None, :] * s_xk, mask=both, other=0.0)
        rstd = tl.load(r + run * s_rm + b * s_rb + l * s_rl, mask=ok, other=0.0)
        v_hat = v * rstd[:, None]
        d_gain += tl.sum(d * v_hat, 0)
        u = d * g[None, :]
        mean = tl.sum(u * v_hat, 1) / D
        tl.store(dx + run * s_om + b[:, None] * s_ob + l[:, None] * s_ol + ks[None, :] * s_ok,
                 (u - v_hat * mean[:, None]) * rstd[:, None], mask=both)
    tl.store(partial + run * s_pm + tl.program_id(0) * s_pp + ks * s_pk, d_gain, mask=k_ok)


def _layout(t: torch.Tensor) -> tuple[int, int, int, int]:
    """Strides (run, b, l, k) of a (M, B, d) or (M, B, L, d) tensor (l's 0 for the first)."""
    return (t.stride(0), t.stride(1), 0, t.stride(2)) if t.dim() == 3 else tuple(t.stride())


def _shape(x: torch.Tensor) -> tuple[int, int, int, int]:
    """(M, rows, L, d) of x (M, B, d) or (M, B, L, d), refused otherwise."""
    if x.dim() not in (3, 4):
        raise ValueError(f"x must be (runs, batch, d) or (runs, batch, positions, d), got shape {tuple(x.shape)}")
    L = 1 if x.dim() == 3 else x.shape[2]
    return x.shape[0], x.shape[1] * L, L, x.shape[-1]


def _tiling(M: int, rows: int, D: int) -> tuple[int, int, int, int]:
    """(BLOCK_D, ROWS, programs a run, rows a program): a power of two >= d wide, ELEMENTS a tile, the rows shared
    until the stack has FILL_PROGRAMS programs, LEAST_ROWS rows a program at least."""
    block_d = max(16, 1 << (D - 1).bit_length())
    rows_at_once = max(1, min(64, ELEMENTS // block_d))
    programs = max(1, min(math.ceil(rows / max(rows_at_once, LEAST_ROWS)), math.ceil(FILL_PROGRAMS / max(1, M))))
    span = max(rows_at_once, math.ceil(math.ceil(rows / programs) / rows_at_once) * rows_at_once)
    return block_d, rows_at_once, math.ceil(rows / span) if M else 0, span  # no programs for no rows or no runs


def _warps(block: int) -> int:
    """Warps of a program whose rows are `block` wide: 8 past 256, so a thread's share of a row stays small."""
    return 8 if block > 256 else 4


def _accumulator(x: torch.Tensor):
    import triton.language as tl
    return tl.float64 if x.dtype == torch.float64 else tl.float32


@torch.library.custom_op("geofact::rms_norm", mutates_args=())
def rms_norm(x: torch.Tensor, gain: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(y, r): y = RMSNorm(x) times each run's gain (M, d), x (M, B, d) or (M, B, L, d) (any strides), and r (x's
    shape but d -> 1) its 1 / rms, as torch's fused RMSNorm returns it."""
    M, rows, L, D = _shape(x)
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    r = torch.empty((*x.shape[:-1], 1), dtype=x.dtype, device=x.device)
    block_d, rows_at_once, programs, span = _tiling(M, rows, D)
    if programs == 0:
        return y, r
    fused_ce.build(_forward_kernel, x.device)[(programs, M)](
        x, gain, y, r, rows, L, D, span, *_layout(x), *gain.stride(), *_layout(y), *_layout(r)[:3],
        eps=RMS_EPS, ROWS=rows_at_once, BLOCK_D=block_d, num_warps=_warps(block_d))
    return y, r


@rms_norm.register_fake
def _(x, gain):
    return torch.empty(x.shape, dtype=x.dtype, device=x.device), x.new_empty((*x.shape[:-1], 1))


@torch.library.custom_op("geofact::rms_norm_backward", mutates_args=())
def rms_norm_backward(dy: torch.Tensor, x: torch.Tensor, r: torch.Tensor, gain: torch.Tensor
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """(dx, partial): the gradient of x from dy (x's shape, any strides: an expanded dy is read where it is) and, per
    run and program, the sum of dy x^ over the program's rows (M, programs, d), whose sum over programs is the
    gain's gradient (`backward`)."""
    M, rows, L, D = _shape(x)
    dx = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    block_d, rows_at_once, programs, span = _tiling(M, rows, D)
    partial = x.new_empty(M, programs, D)
    if programs == 0:
        return dx, partial
    fused_ce.build(_backward_kernel, x.device)[(programs, M)](
        dy, x, r, gain, dx, partial, rows, L, D, span, *_layout(dy), *_layout(x), *_layout(r)[:3], *gain.stride(),
        *_layout(dx), *partial.stride(), ROWS=rows_at_once, BLOCK_D=block_d, ACC=_accumulator(x),
        num_warps=_warps(block_d))
    return dx, partial


@rms_norm_backward.register_fake
def _(dy, x, r, gain):
    M, rows, _, D = _shape(x)
    return torch.empty(x.shape, dtype=x.dtype, device=x.device), x.new_empty(M, _tiling(M, rows, D)[2], D)


def backward(dy: torch.Tensor, x: torch.Tensor, r: torch.Tensor, gain: torch.Tensor,
             out: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(dx, d_gain (M, d)) for y = `rms_norm`(x, gain)[0] from dy; d_gain written into `out` if given."""
    dx, partial = rms_norm_backward(dy, x, r, gain)
    return dx, torch.sum(partial, 1, out=out)
