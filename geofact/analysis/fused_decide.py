"""The unembedding and what the recheck decides from it, as one Triton kernel that never writes the logits
(issue 47, item 3; geofact.analysis.rechecked).

A rank sweep asks of each of its edited rows only whether the prediction is its target, and to decide that in
TF32 (`rechecked.decision`) it needs five numbers a row: the two largest logits and where the largest is, the
smallest, and the target's. Through torch the (rows, N) logits are written by the matmul and read twice (topk, amin):
at the paper's N = 4096 that is 12 KB a row, 340 GB a state of the capacity grid at R = 16, whatever d, where the
matmul is 1.9 TFLOP at d = 32. This kernel computes each (BLOCK_ROWS, BLOCK_N) tile of logits in registers, as a
matmul kernel would, and keeps the five numbers per row: it reads the rows' final states and the unembedding and
writes five numbers a row and column span (`splits`, when the rows are too few to fill the device). Under TF32 its
tiles are rounded to TF32 to nearest before `tl.dot`, whose own conversion truncates (triton-lang/triton#4574, about
twice the error of a logit difference): so its logits round as cuBLAS's TF32 and the emulation that measured the
recheck's margin (`rechecked.tf32_rounded`) do.

It is used where its arithmetic is the cheaper side at geofact's kernels' measured rate (31 TFLOP/s for the fused
output layer's tiles on the H200 lease, geofact.training.step): d <= geofact.fast_paths.DECIDE_MAX_D, on CUDA with
Triton and GEOFACT_FUSED_CE not '0' (geofact.training.fused_ce.wanted), and on the fake `meta` device that counts the
work (fast_paths.DECIDE_DEVICES: choices of speed, which key no cached analysis).
Elsewhere `rechecked.decided` computes the same five numbers from whole logits. On a CPU the kernel runs in Triton's
interpreter (TRITON_INTERPRET=1), which is how tests/analysis/test_fused_decide.py checks it against torch.
"""

from __future__ import annotations  # the kernel's `tl.constexpr` annotations stay strings: no Triton at import

import math

import torch
from torch.utils.flop_counter import register_flop_formula

from geofact import fast_paths
from geofact.training import fused_ce

BLOCK_ROWS, BLOCK_N = fused_ce.BLOCK_B, fused_ce.BLOCK_N  # the fused output layer's tiles, and its splits


def used(device: torch.device, d: int) -> bool:
    """Whether a decision over states of width d on `device` goes through the kernel (module docstring)."""
    if device.type not in fast_paths.DECIDE_DEVICES or d > fast_paths.DECIDE_MAX_D:
        return False
    return device.type == "meta" or fused_ce.wanted() and fused_ce.runs_on(device)


def _decide_kernel(f, E, tgt, top1_out, top2_out, index_out, low_out, picked_out, bad_out, rows_n, N, D, span,
                   s_fr, s_fd, s_ed, s_en, s_t, s_or, s_os,
                   BLOCK_B: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, PRECISION: tl.constexpr):
    """Program (row block, split): over columns [split span, (split + 1) span) of f @ E, each row's largest logit and
    its column (the first of equal ones), its second largest (the largest once that column is set aside), its
    smallest, its target's (0 where the target is in another split), and whether any logit was NaN or infinite."""
    rows = (tl.program_id(0) * BLOCK_B + tl.arange(0, BLOCK_B)).to(tl.int64)  # 64-bit: rows x a row's stride
    split = tl.program_id(1)
    row_ok = rows < rows_n
    target = tl.load(tgt + rows * s_t, mask=row_ok, other=0)
    lane = tl.arange(0, BLOCK_N)
    top1 = tl.full((BLOCK_B,), float("-inf"), tl.float32)
    top2 = tl.full((BLOCK_B,), float("-inf"), tl.float32)
    index = tl.zeros((BLOCK_B,), tl.int64)
    low = tl.full((BLOCK_B,), float("inf"), tl.float32)
    picked = tl.zeros((BLOCK_B,), tl.float32)
    bad = tl.zeros((BLOCK_B,), tl.int32)
    for n0 in range(split * span, tl.minimum(split * span + span, N), BLOCK_N):
        cols = n0 + lane
        col_ok = cols < N
        logits = tl.zeros((BLOCK_B, BLOCK_N), tl.float32)
        for d0 in range(0, D, BLOCK_D):
            ks = d0 + tl.arange(0, BLOCK_D)
            a = tl.load(f + rows[:, None] * s_fr + ks[None, :] * s_fd, mask=row_ok[:, None] & (ks[None, :] < D), other=0.0)
            b = tl.load(E + ks[:, None] * s_ed + cols[None, :] * s_en, mask=(ks[:, None] < D) & col_ok[None, :], other=0.0)
            if PRECISION == "tf32":  # rounded to nearest, as cuBLAS's TF32 (and the margin's evidence); tl.dot truncates
                bits = a.to(tl.int32, bitcast=True)  # NaN and infinity kept: a NaN's payload could carry into the sign
                a = tl.where((bits & 0x7F800000) == 0x7F800000, a, ((bits + 0x1000) & -0x2000).to(tl.float32, bitcast=True))
                bits = b.to(tl.int32, bitcast=True)
                b = tl.where((bits & 0x7F800000) == 0x7F800000, b, ((bits + 0x1000) & -0x2000).to(tl.float32, bitcast=True))
            logits += tl.dot(a, b, input_precision=PRECISION, out_dtype=tl.float32)
        fine = col_ok[None, :] & (logits == logits) & (tl.abs(logits) != float("inf"))  # (a row without is flagged)
        bad = tl.maximum(bad, tl.max(tl.where(col_ok[None, :] & ~fine, 1, 0), 1))
        high = tl.where(fine, logits, float("-inf"))
        tile_top = tl.max(high, 1)
        at = tl.argmax(high, 1)
        tile_second = tl.max(tl.where(lane[None, :] == at[:, None], float("-inf"), high), 1)
        newer = tile_top > top1  # a later tile's equal largest leaves the first column in place
        top2 = tl.where(newer, tl.maximum(top1, tile_second), tl.maximum(top2, tile_top))
        index = tl.where(newer, (n0 + at).to(tl.int64), index)
        top1 = tl.maximum(top1, tile_top)
        low = tl.minimum(low, tl.min(tl.where(fine, logits, float("inf")), 1))
        picked += tl.sum(tl.where(fine & (cols[None, :] == target[:, None]), logits, 0.0), 1)
    out = rows * s_or + split * s_os
    tl.store(top1_out + out, top1, mask=row_ok)
    tl.store(top2_out + out, top2, mask=row_ok)
    tl.store(index_out + out, index, mask=row_ok)
    tl.store(low_out + out, low, mask=row_ok)
    tl.store(picked_out + out, picked, mask=row_ok)
    tl.store(bad_out + out, bad, mask=row_ok)


@torch.library.custom_op("geofact::decide_partials", mutates_args=())
def decide_partials(final: torch.Tensor, E_out: torch.Tensor, targets: torch.Tensor, splits: int
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per row and split of the columns of final (rows, d) @ E_out (d, N): (largest, second largest, the largest's
    column, smallest, the target's logit or 0, whether any was NaN or infinite), each (rows, splits)."""
    rows, D = final.shape
    N = E_out.shape[1]
    top1, top2, low, picked = (final.new_empty(rows, splits) for _ in range(4))
    index = torch.empty(rows, splits, dtype=torch.int64, device=final.device)
    bad = torch.empty(rows, splits, dtype=torch.int32, device=final.device)
    span = math.ceil(math.ceil(N / splits) / BLOCK_N) * BLOCK_N
    kernel = fused_ce.build(_decide_kernel, final.device)
    kernel[(math.ceil(rows / BLOCK_ROWS), splits)](
        final, E_out, targets, top1, top2, index, low, picked, bad, rows, N, D, span, *final.stride(), *E_out.stride(),
        *targets.stride(), *top1.stride(), BLOCK_B=BLOCK_ROWS, BLOCK_N=BLOCK_N, BLOCK_D=fused_ce.LSE_BLOCK_D,
        PRECISION=fused_ce._precision(final))
    return top1, top2, index, low, picked, bad


@decide_partials.register_fake
def _(final, E_out, targets, splits):
    rows = final.shape[0]
    return (*(final.new_empty(rows, splits) for _ in range(2)), final.new_empty(rows, splits, dtype=torch.int64),
            *(final.new_empty(rows, splits) for _ in range(2)), final.new_empty(rows, splits, dtype=torch.int32))


@register_flop_formula(torch.ops.geofact.decide_partials)
def _(final_shape, E_shape, *args, **kwargs) -> int:
    return 2 * final_shape[0] * final_shape[1] * E_shape[1]


def summary(final: torch.Tensor, E_out: torch.Tensor, targets: torch.Tensor
            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The five numbers a row (rechecked.decision's) of the logits final (rows, d) @ E_out (d, N), and whether any of
    its logits was NaN or infinite, each (rows,): the kernel's splits combined."""
    if final.shape[0] == 0:
        empty = final.new_empty(0)
        return empty, empty, targets.new_empty(0), empty, empty, torch.zeros(0, dtype=torch.bool, device=final.device)
    top1, top2, index, low, picked, bad = decide_partials(final, E_out, targets, fused_ce.splits_for(1, final.shape[0], E_out.shape[1]))
    best, which = top1.max(1, keepdim=True)  # (rows, 1): the first split of equal largest ones, as the kernel keeps
    others = top1.scatter(1, which, float("-inf"))  # the other splits' largest, each at most their own second
    second = torch.maximum(top2.gather(1, which), others.amax(1, keepdim=True))
    return (best[:, 0], second[:, 0], index.gather(1, which)[:, 0], low.amin(1), picked.sum(1), bad.amax(1) > 0)
