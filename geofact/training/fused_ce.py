"""The unembedding and cross-entropy of a stack of runs as Triton kernels that recompute the logits (issue 47, item 2).

The output layer of a step, hf (M, B, d) @ E_out (M, d, N) then softmax cross-entropy against targets (M, B), is a
small matmul and a large tensor: at the paper's N = 4096, batch 1024 and 42 runs the (M, B, N) logits are 704 MB,
and torch's way of computing the loss and both gradients passes over them six times
(geofact.training.step, "softmax kernel, one max"). These kernels compute each (BLOCK_B, BLOCK_N) tile of logits
in registers from hf and E_out, as a matmul kernel would, and use it there:

- `lse`: each row's log-sum-exp by an online softmax over its tiles, and the logit at its target. The N axis is
  split over programs (`splits`) when there are too few (run, row block) pairs to fill the device, and the
  splits' partial maxima and sums are combined in torch (tensors of (M, B, splits));
- for d <= `UNSTORED_MAX_D`, in float32 stacks of enough runs to fill the device (`UNSTORED_MIN_PROGRAMS`), nothing
  of size (M, B, N) is ever written: `grad_hf` recomputes a row block's tiles
  along N and adds each tile's (softmax - one-hot) / B times E_out's tile into d_hf; `grad_unembedding` recomputes
  a column block's tiles along B and adds hf's tile times it into d_E_out (the FlashAttention backward's
  two loops). The logits are computed three times and multiplied twice, five matmuls' FLOPs (2 M B N d each)
  where torch's way has three; at d = 32 and 42 runs that is 58 GFLOP, 0.16 ms at the H100's TF32 rate, against
  4.2 GB of traffic saved (six passes over the 704 MB of logits);
- otherwise (above that d the accumulators of a (d, BLOCK_N) or (BLOCK_B, d) block no longer fit in registers), `grad_logits`
  writes (softmax - one-hot) / B once and two cuBLAS matmuls read it: three passes over the logits' size.

Each kernel is a torch custom op (`torch.ops.geofact.*`) whose fake implementation states its outputs, so
the step counted on fake `meta` tensors (geofact.training.dispatch_count) takes the kernel's own traffic:
its inputs read once and its outputs written once, as a matmul's is counted, and its FLOPs
(`register_flop_formula`). On CUDA the kernels are compiled by Triton; on a CPU they run in Triton's
interpreter (a process started with TRITON_INTERPRET=1), slowly, which is how tests/training/test_fused_ce.py
checks them against autograd in float64.

Matmul precision follows torch's float32 setting when the op is called (`geofact.precision.computing_in`):
"highest" is IEEE float32 products, anything else TF32. The accumulation is float32 (float64 for float64
tensors).
"""

from __future__ import annotations  # the kernels' `tl.constexpr` annotations stay strings: no Triton at import

import importlib.util
import math
import os

import torch
from torch.utils.flop_counter import register_flop_formula

TRITON = importlib.util.find_spec("triton") is not None
ENV = "GEOFACT_FUSED_CE"  # "0": none of geofact's Triton kernels (output layer, batch keys, AdamW): torch's ops instead
UNSTORED_MAX_D = 128  # largest d whose gradients are computed without storing the (M, B, N) softmax
# and only where `grad_hf` has this many programs (runs x row blocks) or more: it loops over all N in each, so one
# run at batch 1024 (16 programs; exp-scaling's trials) would leave most of an H100's 132 SMs idle, where cuBLAS
# reading the stored softmax spreads over all of them
UNSTORED_MIN_PROGRAMS = 128
BLOCK_B, BLOCK_N = 64, 64
LSE_BLOCK_D = 32  # d at a time in the kernels that loop over d (any d)
FILL_PROGRAMS = 2048  # `lse` splits N until (runs x row blocks x splits) reaches this many programs


def wanted() -> bool:
    """Whether a GPU's step goes through geofact's Triton kernels (these, the batch sampler's,
    geofact.training.fused_sampler, and the stack's AdamW, geofact.training.fused_adamw): Triton is installed and
    GEOFACT_FUSED_CE is not '0'."""
    setting = os.environ.get(ENV, "1")
    if setting not in ("0", "1"):
        raise ValueError(f"{ENV} must be '0' (torch ops) or '1' (fused kernels where Triton is installed), got {setting!r}")
    return TRITON and setting == "1"


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def runs_on(device: torch.device) -> bool:
    """Whether the kernels run on `device`: CUDA with Triton installed, or a CPU in Triton's interpreter."""
    return TRITON and (device.type == "cuda" and not _interpreting() or device.type == "cpu" and _interpreting())


def _precision(x: torch.Tensor) -> str:
    if x.dtype == torch.float64 or torch.get_float32_matmul_precision() == "highest":
        return "ieee"
    return "tf32"


def _lse_kernel(hf, E, tgt, m_out, s_out, picked_out, B, N, D, span,
                s_hm, s_hb, s_hd, s_em, s_ed, s_en, s_tm, s_tb, s_om, s_ob, s_os,
                BLOCK_B: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
                PRECISION: tl.constexpr, ACC: tl.constexpr):
    """Program (row block, split, run): over columns [split span, (split + 1) span), each row's running maximum m,
    sum s of exp(logit - m) and the logit at its target (0 where the target is in another split)."""
    rows = tl.program_id(0) * BLOCK_B + tl.arange(0, BLOCK_B)
    split, run = tl.program_id(1), tl.program_id(2).to(tl.int64)  # 64-bit: runs x a run's stride can pass 2^31
    row_ok = rows < B
    target = tl.load(tgt + run * s_tm + rows * s_tb, mask=row_ok, other=0)
    m = tl.full((BLOCK_B,), float("-inf"), ACC)
    s = tl.zeros((BLOCK_B,), ACC)
    picked = tl.zeros((BLOCK_B,), ACC)
    for n0 in range(split * span, tl.minimum(split * span + span, N), BLOCK_N):
        cols = n0 + tl.arange(0, BLOCK_N)
        col_ok = cols < N
        logits = tl.zeros((BLOCK_B, BLOCK_N), ACC)
        for d0 in range(0, D, BLOCK_D):
            ks = d0 + tl.arange(0, BLOCK_D)
            a = tl.load(hf + run * s_hm + rows[:, None] * s_hb + ks[None, :] * s_hd,
                        mask=row_ok[:, None] & (ks[None, :] < D), other=0.0)
            b = tl.load(E + run * s_em + ks[:, None] * s_ed + cols[None, :] * s_en,
                        mask=(ks[:, None] < D) & col_ok[None, :], other=0.0)
            logits += tl.dot(a, b, input_precision=PRECISION, out_dtype=ACC)
        logits = tl.where(col_ok[None, :], logits, float("-inf"))
        m_new = tl.maximum(m, tl.max(logits, 1))
        s = s * tl.exp(m - m_new) + tl.sum(tl.exp(logits - m_new[:, None]), 1)
        m = m_new
        picked += tl.sum(tl.where(cols[None, :] == target[:, None], logits, 0.0), 1)
    out = run * s_om + rows * s_ob + split * s_os
    tl.store(m_out + out, m, mask=row_ok)
    tl.store(s_out + out, s, mask=row_ok)
    tl.store(picked_out + out, picked, mask=row_ok)


def _grad_logits_kernel(hf, E, tgt, lse, G, B, N, D,
                        s_hm, s_hb, s_hd, s_em, s_ed, s_en, s_tm, s_tb, s_lm, s_lb, s_gm, s_gb, s_gn,
                        BLOCK_B: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
                        PRECISION: tl.constexpr, ACC: tl.constexpr):
    """Program (row block, column block, run): G's tile, (softmax - one-hot) / B (divided in the accumulator's
    precision: a float32 1 / B would round it for a B that is not a power of two). Row blocks vary fastest, so the
    programs that share a tile of E_out run together."""
    rows = tl.program_id(0) * BLOCK_B + tl.arange(0, BLOCK_B)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    run = tl.program_id(2).to(tl.int64)
    row_ok, col_ok = rows < B, cols < N
    target = tl.load(tgt + run * s_tm + rows * s_tb, mask=row_ok, other=0)
    row_lse = tl.load(lse + run * s_lm + rows * s_lb, mask=row_ok, other=0.0)
    logits = tl.zeros((BLOCK_B, BLOCK_N), ACC)
    for d0 in range(0, D, BLOCK_D):
        ks = d0 + tl.arange(0, BLOCK_D)
        a = tl.load(hf + run * s_hm + rows[:, None] * s_hb + ks[None, :] * s_hd,
                    mask=row_ok[:, None] & (ks[None, :] < D), other=0.0)
        b = tl.load(E + run * s_em + ks[:, None] * s_ed + cols[None, :] * s_en,
                    mask=(ks[:, None] < D) & col_ok[None, :], other=0.0)
        logits += tl.dot(a, b, input_precision=PRECISION, out_dtype=ACC)
    grad = tl.exp(logits - row_lse[:, None]) - tl.where(cols[None, :] == target[:, None], 1.0, 0.0)
    tl.store(G + run * s_gm + rows[:, None] * s_gb + cols[None, :] * s_gn, grad / B,
             mask=row_ok[:, None] & col_ok[None, :])


def _grad_hf_kernel(hf, E, tgt, lse, d_hf, B, N, D,
                    s_hm, s_hb, s_hd, s_em, s_ed, s_en, s_tm, s_tb, s_lm, s_lb, s_om, s_ob, s_od,
                    BLOCK_B: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
                    PRECISION: tl.constexpr, ACC: tl.constexpr):
    """Program (row block, run), BLOCK_D >= d: d_hf's rows, the sum over column tiles of G's tile @ E_out's tile^T."""
    rows = tl.program_id(0) * BLOCK_B + tl.arange(0, BLOCK_B)
    run = tl.program_id(1).to(tl.int64)
    ks = tl.arange(0, BLOCK_D)
    row_ok, k_ok = rows < B, ks < D
    target = tl.load(tgt + run * s_tm + rows * s_tb, mask=row_ok, other=0)
    row_lse = tl.load(lse + run * s_lm + rows * s_lb, mask=row_ok, other=0.0)
    a = tl.load(hf + run * s_hm + rows[:, None] * s_hb + ks[None, :] * s_hd, mask=row_ok[:, None] & k_ok[None, :],
                other=0.0)
    acc = tl.zeros((BLOCK_B, BLOCK_D), ACC)
    for n0 in range(0, N, BLOCK_N):
        cols = n0 + tl.arange(0, BLOCK_N)
        col_ok = cols < N
        b = tl.load(E + run * s_em + ks[:, None] * s_ed + cols[None, :] * s_en, mask=k_ok[:, None] & col_ok[None, :],
                    other=0.0)
        logits = tl.dot(a, b, input_precision=PRECISION, out_dtype=ACC)
        grad = tl.exp(logits - row_lse[:, None]) - tl.where(cols[None, :] == target[:, None], 1.0, 0.0)
        grad = tl.where(row_ok[:, None] & col_ok[None, :], grad / B, 0.0).to(b.dtype)
        acc += tl.dot(grad, tl.trans(b), input_precision=PRECISION, out_dtype=ACC)
    tl.store(d_hf + run * s_om + rows[:, None] * s_ob + ks[None, :] * s_od, acc, mask=row_ok[:, None] & k_ok[None, :])


def _grad_unembedding_kernel(hf, E, tgt, lse, d_E, B, N, D,
                             s_hm, s_hb, s_hd, s_em, s_ed, s_en, s_tm, s_tb, s_lm, s_lb, s_om, s_od, s_on,
                             BLOCK_B: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
                             PRECISION: tl.constexpr, ACC: tl.constexpr):
    """Program (column block, run), BLOCK_D >= d: d_E_out's columns, the sum over row tiles of hf's tile^T @ G's tile."""
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    run = tl.program_id(1).to(tl.int64)
    ks = tl.arange(0, BLOCK_D)
    col_ok, k_ok = cols < N, ks < D
    b = tl.load(E + run * s_em + ks[:, None] * s_ed + cols[None, :] * s_en, mask=k_ok[:, None] & col_ok[None, :],
                other=0.0)
    acc = tl.zeros((BLOCK_D, BLOCK_N), ACC)
    for b0 in range(0, B, BLOCK_B):
        rows = b0 + tl.arange(0, BLOCK_B)
        row_ok = rows < B
        target = tl.load(tgt + run * s_tm + rows * s_tb, mask=row_ok, other=0)
        row_lse = tl.load(lse + run * s_lm + rows * s_lb, mask=row_ok, other=0.0)
        a = tl.load(hf + run * s_hm + rows[:, None] * s_hb + ks[None, :] * s_hd, mask=row_ok[:, None] & k_ok[None, :],
                    other=0.0)
        logits = tl.dot(a, b, input_precision=PRECISION, out_dtype=ACC)
        grad = tl.exp(logits - row_lse[:, None]) - tl.where(cols[None, :] == target[:, None], 1.0, 0.0)
        grad = tl.where(row_ok[:, None] & col_ok[None, :], grad / B, 0.0).to(a.dtype)
        acc += tl.dot(tl.trans(a), grad, input_precision=PRECISION, out_dtype=ACC)
    tl.store(d_E + run * s_om + ks[:, None] * s_od + cols[None, :] * s_on, acc, mask=k_ok[:, None] & col_ok[None, :])


KERNELS = {"lse": _lse_kernel, "grad_logits": _grad_logits_kernel, "grad_hf": _grad_hf_kernel,
           "grad_unembedding": _grad_unembedding_kernel}
_BUILT: dict[object, object] = {}


def build(fn, device: torch.device, do_not_specialize: tuple[str, ...] = ()):
    """A kernel written as a Python function (`fn`, whose module names Triton's language `tl`) compiled by Triton for
    CUDA, or on a CPU run by its interpreter, which Triton decides when it is first imported (TRITON_INTERPRET=1 in
    the environment then: tests/training/test_fused_ce.py runs so); built once."""
    interpreting = _interpreting()
    if (device.type == "cpu") != interpreting:
        raise RuntimeError(f"the fused kernels run on CUDA, or on a CPU in Triton's interpreter (TRITON_INTERPRET=1 "
                           f"set before triton is imported); got a {device.type} tensor with TRITON_INTERPRET "
                           f"{'set' if interpreting else 'unset'}")
    if not TRITON:
        raise RuntimeError(f"the fused kernels need Triton (pip install triton), or {ENV}=0")
    if fn not in _BUILT:
        import triton
        import triton.language as tl

        fn.__globals__["tl"] = tl  # what the kernel's body calls (its annotations stay strings)
        _BUILT[fn] = triton.jit(fn, do_not_specialize=list(do_not_specialize))
    return _OnDevice(_BUILT[fn], device)


class _OnDevice:
    """A built kernel whose launches (`kernel[grid](...)`) go to `device`: Triton launches on the current CUDA device
    and its stream, so a stack on cuda:1 would launch on device 0 with device 1's pointers."""

    def __init__(self, kernel, device: torch.device) -> None:
        self.kernel, self.device = kernel, device

    def __getitem__(self, grid):
        launch = self.kernel[grid]
        if self.device.type != "cuda":
            return launch

        def on_device(*args, **kwargs):
            with torch.cuda.device(self.device):
                return launch(*args, **kwargs)

        return on_device


def _kernel(name: str, device: torch.device):
    return build(KERNELS[name], device)


def _accumulator(x: torch.Tensor):
    import triton.language as tl
    return tl.float64 if x.dtype == torch.float64 else tl.float32


def _block_d(D: int) -> int:
    return max(16, 1 << (D - 1).bit_length())


def _warps(block_d: int) -> int:
    """Warps of a program that holds a (64, block_d) and a (block_d, 64) tile and an accumulator of one of them:
    8 from block_d = 64 on, so a thread's share stays within its registers."""
    return 8 if block_d >= 64 else 4


def splits_for(M: int, B: int, N: int) -> int:
    """How many programs share a row block's columns in `lse`: enough to make FILL_PROGRAMS, at most one column block each."""
    row_blocks = math.ceil(B / BLOCK_B)
    return max(1, min(math.ceil(N / BLOCK_N), math.ceil(FILL_PROGRAMS / (M * row_blocks))))


# ---- the custom ops: shapes for fake tensors, FLOPs for the counter, kernels for real ones ----

@torch.library.custom_op("geofact::ce_partials", mutates_args=())
def ce_partials(hf: torch.Tensor, E_out: torch.Tensor, targets: torch.Tensor, splits: int
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per row and split of the columns: (maximum logit, sum of exp(logit - maximum), logit at the target or 0),
    each (M, B, splits), for hf (M, B, d), E_out (M, d, N), targets (M, B)."""
    M, B, D = hf.shape
    N = E_out.shape[2]
    maxima, sums, picked = (hf.new_empty(M, B, splits) for _ in range(3))
    span = math.ceil(math.ceil(N / splits) / BLOCK_N) * BLOCK_N
    _kernel("lse", hf.device)[(math.ceil(B / BLOCK_B), splits, M)](
        hf, E_out, targets, maxima, sums, picked, B, N, D, span, *hf.stride(), *E_out.stride(), *targets.stride(),
        *maxima.stride(), BLOCK_B=BLOCK_B, BLOCK_N=BLOCK_N, BLOCK_D=LSE_BLOCK_D, PRECISION=_precision(hf),
        ACC=_accumulator(hf))
    return maxima, sums, picked


@ce_partials.register_fake
def _(hf, E_out, targets, splits):
    M, B, _ = hf.shape
    return tuple(hf.new_empty(M, B, splits) for _ in range(3))


@torch.library.custom_op("geofact::ce_grad_logits", mutates_args=())
def ce_grad_logits(hf: torch.Tensor, E_out: torch.Tensor, targets: torch.Tensor, lse: torch.Tensor) -> torch.Tensor:
    """(softmax - one-hot) / B (M, B, N) of the logits hf @ E_out, from each row's log-sum-exp lse (M, B)."""
    M, B, D = hf.shape
    N = E_out.shape[2]
    G = hf.new_empty(M, B, N)
    _kernel("grad_logits", hf.device)[(math.ceil(B / BLOCK_B), math.ceil(N / BLOCK_N), M)](
        hf, E_out, targets, lse, G, B, N, D, *hf.stride(), *E_out.stride(), *targets.stride(), *lse.stride(),
        *G.stride(), BLOCK_B=BLOCK_B, BLOCK_N=BLOCK_N, BLOCK_D=LSE_BLOCK_D, PRECISION=_precision(hf),
        ACC=_accumulator(hf))
    return G


@ce_grad_logits.register_fake
def _(hf, E_out, targets, lse):
    return hf.new_empty(hf.shape[0], hf.shape[1], E_out.shape[2])


@torch.library.custom_op("geofact::ce_grad_hf", mutates_args=())
def ce_grad_hf(hf: torch.Tensor, E_out: torch.Tensor, targets: torch.Tensor, lse: torch.Tensor) -> torch.Tensor:
    """(M, B, d): ((softmax - one-hot) / B) @ E_out^T, the softmax never stored (d <= UNSTORED_MAX_D)."""
    M, B, D = hf.shape
    N = E_out.shape[2]
    d_hf = torch.empty_like(hf)
    _kernel("grad_hf", hf.device)[(math.ceil(B / BLOCK_B), M)](
        hf, E_out, targets, lse, d_hf, B, N, D, *hf.stride(), *E_out.stride(), *targets.stride(),
        *lse.stride(), *d_hf.stride(), BLOCK_B=BLOCK_B, BLOCK_N=BLOCK_N, BLOCK_D=_block_d(D),
        PRECISION=_precision(hf), ACC=_accumulator(hf), num_warps=_warps(_block_d(D)))
    return d_hf


@ce_grad_hf.register_fake
def _(hf, E_out, targets, lse):
    return torch.empty_like(hf)


@torch.library.custom_op("geofact::ce_grad_unembedding", mutates_args=("out",))
def ce_grad_unembedding(hf: torch.Tensor, E_out: torch.Tensor, targets: torch.Tensor, lse: torch.Tensor,
                        out: torch.Tensor) -> None:
    """Writes hf^T @ ((softmax - one-hot) / B) (M, d, N) into `out` (any strides), the softmax never stored
    (d <= UNSTORED_MAX_D). The count takes `out` as written, not read
    (geofact.training.dispatch_count.WRITE_ONLY)."""
    M, B, D = hf.shape
    N = E_out.shape[2]
    _kernel("grad_unembedding", hf.device)[(math.ceil(N / BLOCK_N), M)](
        hf, E_out, targets, lse, out, B, N, D, *hf.stride(), *E_out.stride(), *targets.stride(),
        *lse.stride(), *out.stride(), BLOCK_B=BLOCK_B, BLOCK_N=BLOCK_N, BLOCK_D=_block_d(D),
        PRECISION=_precision(hf), ACC=_accumulator(hf), num_warps=_warps(_block_d(D)))


@ce_grad_unembedding.register_fake
def _(hf, E_out, targets, lse, out):
    return None


def _logits_flops(hf_shape, E_shape) -> int:
    M, B, D = hf_shape
    return 2 * M * B * D * E_shape[2]


@register_flop_formula(torch.ops.geofact.ce_partials)
def _(hf_shape, E_shape, *args, **kwargs) -> int:
    return _logits_flops(hf_shape, E_shape)


@register_flop_formula(torch.ops.geofact.ce_grad_logits)
def _(hf_shape, E_shape, *args, **kwargs) -> int:
    return _logits_flops(hf_shape, E_shape)


@register_flop_formula(torch.ops.geofact.ce_grad_hf)
def _(hf_shape, E_shape, *args, **kwargs) -> int:
    return 2 * _logits_flops(hf_shape, E_shape)  # the logits again, and G's tiles times E_out's


@register_flop_formula(torch.ops.geofact.ce_grad_unembedding)
def _(hf_shape, E_shape, *args, **kwargs) -> int:
    return 2 * _logits_flops(hf_shape, E_shape)


def unstored(M: int, B: int, D: int, dtype: torch.dtype = torch.float32) -> bool:
    """Whether the gradients of M runs' batches of B at width D are computed without storing the softmax: float32
    only (float64's tiles would need twice the shared memory of an SM at d = 128)."""
    return dtype == torch.float32 and D <= UNSTORED_MAX_D and M * math.ceil(B / BLOCK_B) >= UNSTORED_MIN_PROGRAMS


def loss_and_grads(hf: torch.Tensor, E_out: torch.Tensor, targets: torch.Tensor, want_E_out: bool = True,
                   out: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """`geofact.training.step.output_loss_and_grads` through the kernels: (each run's mean loss (M,), d_hf (M, B, d),
    d_E_out (M, d, N) or None), the gradients of the losses' sum; d_E_out written into `out` if given."""
    M, B, D = hf.shape
    N = E_out.shape[2]
    if max(B * N, D * N, B * D) >= 2**31:  # offsets within a run are 32-bit (a run's base is 64-bit)
        raise ValueError(f"the fused output layer indexes a run's tensors in 32 bits: batch x N = {B * N:,} and d x N = "
                         f"{D * N:,} must be < 2^31 ({ENV}=0 for torch's ops)")
    maxima, sums, picked = ce_partials(hf, E_out, targets, splits_for(M, B, N))  # (M, B, splits) each
    top = maxima.amax(-1, keepdim=True)
    lse = (sums * (maxima - top).exp()).sum(-1).log_().add_(top[..., 0])  # (M, B)
    losses = (lse - picked.sum(-1)).mean(1)
    if unstored(M, B, D, hf.dtype):
        d_hf = ce_grad_hf(hf, E_out, targets, lse)
        if not want_E_out:
            return losses, d_hf, None
        d_E_out = hf.new_empty(M, D, N) if out is None else out
        ce_grad_unembedding(hf, E_out, targets, lse, out=d_E_out)
        return losses, d_hf, d_E_out
    G = ce_grad_logits(hf, E_out, targets, lse)  # (M, B, N)
    d_hf = torch.bmm(G, E_out.transpose(1, 2))
    return losses, d_hf, (torch.bmm(hf.transpose(1, 2), G, out=out) if want_E_out else None)
