"""The single-hop model's loss and gradients, with the backward written out (uniform or learned attention).

`geofact.training.model.forward` under autograd is the definition; this computes the same losses and
gradients in fewer, larger operations: the cross-entropy gradient as softmax minus one-hot, each
RMSNorm with its run's gain and the GELU's backward with its bias's gradient through geofact's kernels on a
GPU (geofact.training.fused_norm, fused_gelu; torch's fused RMSNorm and GELU kernels on a CPU, which trained
every laptop record), the embeddings' as one accumulating index-put of their gathered rows per table. A small model's step is
mostly per-operation costs and passes over the (runs, batch, N) logits, which is what this saves; a
large one's, passes over its weights: the gradients can be written straight into the optimiser's flat
buffer (`out`, geofact.training.stack.StackedUpdates.grad_targets), and the tables' rows are gathered
from the stack's strided views without copying them whole. tests/training/test_step.py checks it
against autograd in float64, in one chunk of the output and in several.

The N-way output in chunks of entities. Where a run's (B, N) logits exceed `WHOLE` entries, a first
pass takes each chunk's row maximum and sum of exponentials, whose combination is the log-sum-exp; a
second turns each chunk into its softmax columns and their two gradients. What the second pass starts
from depends on the device (`KEEP_EXPONENTIALS`):
- on a CPU the first pass keeps each chunk's exponentials (the logits' size in all), and the second
  only rescales them by exp(chunk max - log-sum-exp): every exponential and logit is computed once,
  while the chunk is in cache (at the paper's N = 4096, batch 1024, d = 32 the output layer costs
  about 0.7 of recomputing, see bench/bench_trainer.py);
- on a GPU the logits are never whole in memory: the second pass recomputes each chunk's logits.
The one-hot part of the cross-entropy gradient is a gather and a scatter of the target columns, outside
the chunks. Below `WHOLE` (every laptop-profile run) the logits are whole, and a device's entry of
`WHOLE_WAY` says how they become the softmax (`WAYS`):
- "softmax kernel" (a CPU): torch's softmax, and the log-sum-exp from its largest entry,
  lse = max logit - log(max softmax) (that entry is at least 1/N, so its log never underflows). Its exponentials are
  torch's vectorised ones inside the kernel: on the 2-core AMD VM at N = 512, batch 512, d = 12, 4 runs, a
  step took 6.1 ms against 7.9-8.8 for the written-out softmax, whose two `exp_` passes were a quarter of it;
- "softmax kernel, one max" (a GPU, from 2026-11-29): the CPU's way with one maximum instead of two: the
  softmax's largest entry p_j and where it is, j, in one read, and lse = l_j - log p_j from the logit
  gathered there. Six passes over the logits, one fewer than either other kernel's. The loss -log p_t
  alone would be five, but a collapsed run's p_t underflows float32 (a loss past 87 nats reads as 87);
  lse - l_t does not;
- "log-softmax kernel" (every GPU lease from 2026-11-27 to 2026-11-29): torch's log-softmax, then `exp_`;
- "written-out softmax": `logsumexp`, `sub_`, `exp_`. Every laptop run was trained so until 2026-11-29,
  and GPU leases before 2026-11-27; kept for `geofact.ops.step_ab`'s comparison on a GPU.
- "fused kernels" (a GPU with Triton, from the evening of 2026-11-29 to the H200 lease of 2026-11-30, which found them
  slower than cuBLAS's matmuls: `FUSED_WAY_DEVICES`): geofact.training.fused_ce's
  Triton kernels, which compute tiles of logits in registers and never write the logits; for d <= 128 in float32
  stacks that fill the device (`fused_ce.unstored`) nothing of their size is written at all, otherwise
  (softmax - one-hot) / B once, read by the two gradient matmuls (3 passes). Counted at 42 runs, N = 4096, batch
  1024, this way alone took a step from 6.54 to 2.35 GB at d = 32 and from 48.9 to 46.9 at d = 768.
The five agree to rounding (tests/training/test_step.py checks the first four against autograd in float64,
tests/training/test_fused_ce.py the fifth, in Triton's interpreter).

RMSNorm backward, for y = g * v^ with v^ = v r, r = (mean(v^2) + eps)^(-1/2):
    dg = sum over positions of dy * v^,    dv = RMSNorm's own backward of (dy * g)
"""

from __future__ import annotations

import math
from collections.abc import Collection

import torch
from torch.nn import functional as F

from geofact.training import fused_ce, fused_gelu, fused_norm
from geofact.training.model import RMS_EPS, attend

# A run's (B, N) logits are computed whole up to WHOLE entries, beyond it in chunks of CHUNK entries (a
# whole number of entities). Per run, so that a run's rounding does not depend on the runs stacked with
# it. A CPU keeps a run's chunk in its L2 cache (1 MiB of float32); a GPU's bound is its memory, not its
# cache, and geofact.training.sweep.GPU_LOGITS_BUDGET bounds a stack's: every run of the paper is whole
# there (exp-scaling's N = 32768 at batch 1024 moved 5.1 GB a step in chunks, which recompute the logits,
# 3.5 GB whole; until 2026-11-29 the bound was 2**22, N = 4096 at batch 1024)
WHOLE = {"cpu": 2**20, "other": 2**26}
CHUNK = {"cpu": 2**18, "other": 2**22}
TABLES = ("E_ent", "E_rel")  # the embedding tables, whose gradients are their gathered rows added back
# torch's fused RMSNorm forward (with its rstd) and, on CUDA (and the tests' meta device), its backward;
# written out where a torch or a device lacks them
_FUSED_RMS = hasattr(torch.ops.aten, "_fused_rms_norm")
_FUSED_RMS_BACKWARD = hasattr(torch.ops.aten, "_fused_rms_norm_backward")
FUSED_BACKWARD_DEVICES = ("cuda", "meta")
# where the first pass over the chunks keeps their exponentials for the second (memory for arithmetic)
KEEP_EXPONENTIALS = ("cpu",)
WAYS = ("softmax kernel", "log-softmax kernel", "softmax kernel, one max", "written-out softmax", "fused kernels")
# how whole logits become the softmax, by device type (see above); elsewhere DEFAULT_WAY: 6 passes over the
# (M, B, N) logits, against 7 for either other kernel and 17 written out (issue 47; geofact.training.traffic counts them)
WHOLE_WAY = {"cpu": "softmax kernel"}
DEFAULT_WAY = "softmax kernel, one max"


# Devices whose output layer goes through geofact's fused kernels by default, where they store nothing of the logits'
# size (fused_ce.unstored) and Triton is there (fused_ce.wanted): none since the H200 lease of 2026-11-30. There the
# capacity grid's d = 768 stack took 0.83 ms a run-step through the kernels' stored path (12 runs, 9d6245d) against
# 0.63 through cuBLAS and torch's softmax (14.3 runs, da44d2b), though it counts 2.3x fewer bytes, and every one of
# the second grid's N = 512 stacks 0.1-0.4 ms a step more than at da44d2b; fitted to the card's 27 timed steps
# (bench/count_lease_steps.py) the kernels' matmuls run at 31 TFLOP/s against cuBLAS's 495 and a launch of one of
# geofact's kernels costs 34 us, which price the fused step above cuBLAS's at every paper shape (d = 32: 2.84 ms
# against 2.78; d = 128: 9.7 against 4.4). The next lease's first command times both (geofact.ops.step_ab).
FUSED_WAY_DEVICES: tuple[str, ...] = ()


def default_way(device: torch.device, M: int, B: int, d: int, dtype: torch.dtype = torch.float32) -> str:
    """How a device's output layer is computed for M runs' batches of B at width d unless asked: its WHOLE_WAY
    entry, else on FUSED_WAY_DEVICES the fused kernels where Triton is installed (geofact.training.fused_ce.wanted)
    and they store nothing of the logits' size (`fused_ce.unstored`: d <= 128, stacks that fill the device),
    else DEFAULT_WAY."""
    if device.type in WHOLE_WAY:
        return WHOLE_WAY[device.type]
    if device.type in FUSED_WAY_DEVICES and fused_ce.wanted() and fused_ce.unstored(M, B, d, dtype):
        return "fused kernels"
    return DEFAULT_WAY


def covers(params: dict[str, torch.Tensor]) -> bool:
    """Whether `loss_and_grads` covers this model: uniform or learned attention, no learned positions."""
    return "P" not in params


def entity_chunk(B: int, N: int, device: torch.device) -> int:
    """Entities per chunk of the output layer for batches of B on this kind of device (N: all at once)."""
    kind = "cpu" if device.type == "cpu" else "other"
    return N if B * N <= WHOLE[kind] else max(1, CHUNK[kind] // B)


def _rms(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(x^, r): x normalised over its last dim, and r = 1 / rms (keepdim)."""
    if _FUSED_RMS:
        return torch.ops.aten._fused_rms_norm(x, [x.shape[-1]], None, RMS_EPS)
    r = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + RMS_EPS)
    return x * r, r


def _normed(x: torch.Tensor, gain: torch.Tensor) -> tuple[torch.Tensor, tuple[torch.Tensor | None, torch.Tensor]]:
    """(y, saved): y = RMSNorm(x) times each run's gain, x (M, ..., d), gain (M, d), and what `_rms_backward` reads.
    Through geofact.training.fused_norm's kernels where they run (`fused_norm.used`: two passes over x's size, not
    four), else torch's fused RMSNorm and a multiply: saved is (x^ or None, r = 1 / rms)."""
    if fused_norm.used(x):
        y, r = fused_norm.rms_norm(x, gain)
        return y, (None, r)
    x_hat, r = _rms(x)
    return x_hat * gain.reshape(gain.shape[0], *([1] * (x.dim() - 2)), gain.shape[-1]), (x_hat, r)


def _rms_backward(dy: torch.Tensor, x: torch.Tensor, saved: tuple[torch.Tensor | None, torch.Tensor], gain: torch.Tensor,
                  out: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(dx, dgain) for y = gain * x^ (`_normed`); dy, x (M, ..., d), saved (x^ (M, ..., d) or None, r (M, ..., 1)),
    gain (M, d); dgain written into `out` if given."""
    x_hat, r = saved
    if x_hat is None:
        return fused_norm.backward(dy, x, r, gain, out)
    gain = gain.reshape(gain.shape[0], *([1] * (dy.dim() - 2)), gain.shape[-1])
    d_gain = torch.sum((dy * x_hat).flatten(1, -2), 1, out=out)  # (M, d)
    u = dy * gain
    if _FUSED_RMS_BACKWARD and x.device.type in FUSED_BACKWARD_DEVICES:
        return torch.ops.aten._fused_rms_norm_backward(u, x, [x.shape[-1]], r, None, [True, False])[0], d_gain
    return (u - x_hat * (u * x_hat).mean(-1, keepdim=True)).mul_(r), d_gain


def output_loss_and_grads(hf: torch.Tensor, E_out: torch.Tensor, targets: torch.Tensor, width: int,
                          keep: bool | None = None, way: str | None = None, want_E_out: bool = True,
                          out: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """The unembedding and cross-entropy of final states hf (M, B, d) against E_out (M, d, N) and targets
    (M, B), `width` entities at a time: (each run's mean loss (M,), d_hf (M, B, d), d_E_out (M, d, N)),
    the gradients of the losses' sum. `keep`: whether chunks keep their exponentials for the second
    pass (default: on the devices of KEEP_EXPONENTIALS); `way`: one of WAYS, how whole logits become
    the softmax (default: `default_way` of the device; "fused kernels", geofact.training.fused_ce, never holds
    the logits, so it takes no `width`). With `want_E_out` False
    d_E_out is None and its matmul is skipped (runs that train other tensors only). `out`: where d_E_out is
    written, if given (a view of an optimiser's gradient buffer: no copy of it afterwards)."""
    M, B, d = hf.shape
    N = E_out.shape[2]
    way = default_way(hf.device, M, B, d, hf.dtype) if way is None else way
    if way not in WAYS:
        raise ValueError(f"way must be one of {WAYS}, got {way!r}")
    if way == "fused kernels":
        return fused_ce.loss_and_grads(hf, E_out, targets, want_E_out, out)
    if width >= N:  # passes over the logits for a kernel: the matmul's write, the kernel's read and write,
        # the two gradient matmuls' reads (5), and for the log-softmax one more read and write (exp_), for the
        # softmax kernel two reads (the two maxima), each 7, or one (one max), 6 (and, on the CPU's way, d_E_out's
        # division by B: a pass over E_out, bit for bit what the cached runs did)
        logits = torch.bmm(hf, E_out)  # (M, B, N)
        if way == "log-softmax kernel":
            softmax = torch.log_softmax(logits, -1)
            losses = softmax.gather(-1, targets[..., None])[..., 0].mean(1).neg()  # (M,)
            softmax.exp_()
        elif way == "softmax kernel, one max":  # lse = l_j - log p_j at the softmax's largest entry j: one read
            softmax = torch.softmax(logits, -1)
            p_max, j = softmax.max(-1, keepdim=True)  # (M, B, 1)
            lse = logits.gather(-1, j) - p_max.log_()
            losses = (lse - logits.gather(-1, targets[..., None]))[..., 0].mean(1)
        else:
            picked = logits.gather(-1, targets[..., None])  # (M, B, 1)
            if way == "softmax kernel":
                softmax = torch.softmax(logits, -1)
                lse = logits.amax(-1, keepdim=True) - softmax.amax(-1, keepdim=True).log_()  # (M, B, 1)
            else:
                lse = torch.logsumexp(logits, -1, keepdim=True)
            losses = (lse - picked)[..., 0].mean(1)
            if way == "written-out softmax":  # d logits = (softmax - one-hot) / B in place of the logits,
                # the 1/B before the matmuls, as the runs it trained
                softmax = logits.sub_(lse).exp_()
                softmax.scatter_add_(-1, targets[..., None], torch.full_like(picked, -1.0)).div_(B)
                return (losses, torch.bmm(softmax, E_out.transpose(1, 2)),
                        torch.bmm(hf.transpose(1, 2), softmax, out=out) if want_E_out else None)
        softmax.scatter_add_(-1, targets[..., None], torch.full((M, B, 1), -1.0, dtype=hf.dtype, device=hf.device))
        d_hf = torch.bmm(softmax, E_out.transpose(1, 2)).div_(B)
        if not want_E_out:
            return losses, d_hf, None
        if way != "softmax kernel" and B < N:  # 1/B on the (M, B, d) states rather than the (M, d, N) gradient
            return losses, d_hf, torch.bmm(hf.transpose(1, 2).div(B), softmax, out=out)
        return losses, d_hf, torch.bmm(hf.transpose(1, 2), softmax, out=out).div_(B)

    keep = hf.device.type in KEEP_EXPONENTIALS if keep is None else keep
    spans = [(lo, min(lo + width, N)) for lo in range(0, N, width)]
    columns = targets[:, None, :].expand(M, d, B)  # where each example's target column sits in E_out
    at_targets = E_out.gather(2, columns)  # (M, d, B): the unembedding of each example's answer
    # first pass: per chunk c, its row maximum m_c and sum s_c of exp(logits - m_c) (and those exponentials)
    kept, maxima, sums = [], [], []
    for lo, hi in spans:
        logits = torch.bmm(hf, E_out[:, :, lo:hi])  # (M, B, hi - lo)
        maxima.append(logits.amax(-1, keepdim=True))
        exponentials = logits.sub_(maxima[-1]).exp_()
        sums.append(exponentials.sum(-1, keepdim=True))
        if keep:
            kept.append(exponentials)
    maxima = torch.cat(maxima, -1)  # (M, B, chunks)
    top = maxima.amax(-1, keepdim=True)
    lse = top + (torch.cat(sums, -1) * (maxima - top).exp_()).sum(-1, keepdim=True).log_()  # (M, B, 1)
    losses = (lse[..., 0] - (hf * at_targets.transpose(1, 2)).sum(-1)).mean(1)
    rescale = (maxima - lse).exp_()  # (M, B, chunks): exp(m_c - lse), a kept chunk's factor to its softmax
    # second pass: each chunk's softmax columns, into their share of both gradients; the one-hot's share
    # is the target columns' gather and scatter
    d_hf = at_targets.transpose(1, 2).neg()  # (M, B, d)
    d_out = []
    for c, (lo, hi) in enumerate(spans):
        if keep:
            softmax = kept[c].mul_(rescale[..., c : c + 1])  # (M, B, hi - lo)
        else:
            softmax = torch.bmm(hf, E_out[:, :, lo:hi]).sub_(lse).exp_()
        if want_E_out:
            d_out.append(torch.bmm(hf.transpose(1, 2), softmax))  # (M, d, hi - lo)
        d_hf += torch.bmm(softmax, E_out[:, :, lo:hi].transpose(1, 2))  # a CPU's baddbmm_ loops over runs
    if not want_E_out:
        return losses, d_hf.div_(B), None
    d_E_out = torch.cat(d_out, 2, out=out).scatter_add_(2, columns, hf.transpose(1, 2).neg())
    return losses, d_hf.div_(B), d_E_out.div_(B)


class UnembedCrossEntropy(torch.autograd.Function):
    """Each run's mean cross-entropy (M,) of the logits hf @ E_out against targets, for autograd, with the
    gradients computed in the forward by `output_loss_and_grads` on whole logits (the softmax's buffer
    becomes d logits in place; the backward only scales them by the incoming gradient). Counted on fake
    `meta` tensors at the paper's multi-hop shapes (18 runs, N = 2048, d = 256, batch 1024, k = 4 with
    CoT): 7.0 GB through autograd's bmm, log-softmax, its backward and the NLL's zero-filled gradient
    (11.6 passes over the logits), here 4.4 GB (7.3 with the GPU's way without Triton, "softmax kernel, one max";
    4.1 through the fused kernels; tests/training/test_traffic.py), while the single-hop
    step's chunks, which recompute them on a GPU, would be 19.3. Autograd held the logits whole too, so
    memory is no worse."""

    @staticmethod
    def forward(ctx, hf: torch.Tensor, E_out: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        losses, d_hf, d_E_out = output_loss_and_grads(hf.detach(), E_out.detach(), targets, E_out.shape[2])
        ctx.save_for_backward(d_hf, d_E_out)
        return losses

    @staticmethod
    def backward(ctx, d_losses: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, None]:
        d_hf, d_E_out = ctx.saved_tensors
        scale = d_losses[:, None, None]  # (M, 1, 1)
        return d_hf * scale, d_E_out * scale, None


def unembed_cross_entropy(hf: torch.Tensor, E_out: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """`F.cross_entropy(torch.bmm(hf, E_out) per run, targets)` averaged over each run's B examples, (M,),
    for hf (M, B, d), E_out (M, d, N), targets (M, B), differentiable in hf and E_out (`UnembedCrossEntropy`)."""
    return UnembedCrossEntropy.apply(hf, E_out, targets)


def _attend_backward(p: dict[str, torch.Tensor], xn: torch.Tensor, q: torch.Tensor, k: torch.Tensor, pattern: torch.Tensor,
                     d_mixed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(d_xn (M, B, L, d), d_q (M, B, d), d_k (M, B, L, d)) for mixed = sum over positions of pattern * xn, from
    d_mixed (M, B, d): through the values, the softmax, the keys and the query."""
    M, B, L, _ = xn.shape
    d_xn = pattern[..., None] * d_mixed[:, :, None]  # through the values
    d_pattern = (d_mixed[:, :, None] * xn).sum(-1)  # (M, B, L)
    d_scores = (d_pattern - (pattern * d_pattern).sum(-1, keepdim=True)).mul_(pattern).div_(math.sqrt(q.shape[-1]))
    d_q = (d_scores[..., None] * k).sum(2)
    d_k = d_scores[..., None] * q[:, :, None]
    d_xn += torch.bmm(d_k.flatten(1, 2), p["W_K"].transpose(1, 2)).view(M, B, L, -1)
    d_xn[:, :, -1].add_(torch.bmm(d_q, p["W_Q"].transpose(1, 2)))  # add_: `[...] +=` would copy the slice back
    return d_xn, d_q, d_k


def _mean_share(d_a: torch.Tensor, W_V: torch.Tensor, L: int) -> torch.Tensor:
    """(M, B, d): each position's share of the gradient of the mean over L positions, (d_a W_V^T) / L. A CPU divides
    after the matmul, as every laptop record was trained; elsewhere the matmul scales its own sum (beta = 0: no read
    of an input, and no pass over the result; for L = 2, as exact as the division)."""
    if d_a.device.type == "cpu":
        return torch.bmm(d_a, W_V.transpose(1, 2)).div_(L)
    return torch.baddbmm(d_a.new_empty(()), d_a, W_V.transpose(1, 2), beta=0.0, alpha=1.0 / L)


def _weight_grad(g: dict[str, torch.Tensor], wanted: set[str], out: dict[str, torch.Tensor], name: str,
                 inputs: torch.Tensor, d_outputs: torch.Tensor) -> None:
    """g[name] = inputs^T d_outputs per run, the gradient of a weight the runs multiply `inputs` (M, B, i) by,
    into out[name] if given; skipped unless wanted."""
    if name in wanted:
        g[name] = torch.bmm(inputs.transpose(1, 2), d_outputs, out=out.get(name))


def head_loss_and_grads(p: dict[str, torch.Tensor], h: torch.Tensor, targets: torch.Tensor, g: dict[str, torch.Tensor],
                        wanted: set[str], out: dict[str, torch.Tensor], width: int, keep: bool | None = None,
                        way: str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The MLP block, final norm, unembedding and cross-entropy of post-attention states h (M, B, d) against
    targets (M, B) (`geofact.training.model.head`): (each run's mean loss (M,), d_h (M, B, d)), the gradient of
    the losses' sum; the head's own gradients go into g (those in `wanted`, into `out`'s views where given).
    `width`, `keep`, `way`: the output layer's (`output_loss_and_grads`)."""
    hn, norm1 = _normed(h, p["g_mlp"])
    z1 = torch.baddbmm(p["b_1"][:, None], hn, p["W_1"])  # (M, B, w)
    z = F.gelu(z1)
    h2 = torch.baddbmm(p["b_2"][:, None], z, p["W_2"]).add_(h)
    hf, norm2 = _normed(h2, p["g_final"])
    losses, d_hf, g["E_out"] = output_loss_and_grads(hf, p["E_out"], targets, width, keep, way, "E_out" in wanted,
                                                     out.get("E_out"))
    d_h2, g["g_final"] = _rms_backward(d_hf, h2, norm2, p["g_final"], out.get("g_final"))
    _weight_grad(g, wanted, out, "W_2", z, d_h2)
    g["b_2"] = torch.sum(d_h2, 1, out=out.get("b_2"))
    d_z = torch.bmm(d_h2, p["W_2"].transpose(1, 2))  # (M, B, w)
    if fused_norm.used(z1):  # GELU's backward and b_1's sum in one kernel: three passes over (M, B, w), not four
        d_z1, g["b_1"] = fused_gelu.gelu_backward(d_z, z1, out.get("b_1"))
    else:
        d_z1 = torch.ops.aten.gelu_backward(d_z, z1)
        g["b_1"] = torch.sum(d_z1, 1, out=out.get("b_1"))
    _weight_grad(g, wanted, out, "W_1", hn, d_z1)
    d_h, g["g_mlp"] = _rms_backward(torch.bmm(d_z1, p["W_1"].transpose(1, 2)), h, norm1, p["g_mlp"], out.get("g_mlp"))
    return losses, d_h.add_(d_h2)


def loss_and_grads(p: dict[str, torch.Tensor], subjects: torch.Tensor, relations: torch.Tensor, targets: torch.Tensor,
                   width: int | None = None, keep: bool | None = None, way: str | None = None,
                   wanted: Collection[str] | None = None, out: dict[str, torch.Tensor] | None = None,
                   row_masks: dict[str, torch.Tensor] | None = None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Each run's mean cross-entropy (M,) on the queries (subject, relation) (M, B) each with answers
    targets (M, B), and the gradient of their sum with respect to every tensor of p
    (geofact.training.model's layout: the sequence is (s, r), the answer predicted at r). `width`: entities
    at a time in the output layer (default: `entity_chunk` of the device); `keep`, `way`: how it
    computes them (default: by device, see `output_loss_and_grads`). `wanted`: the tensors whose
    gradients are returned (default: all); the weight matrices' gradient matmuls of the others are skipped
    (a transfer's retraining trains the entity table alone: a third of the step's matmul FLOPs).

    `out`: {name: (M, ...)} where those gradients are written and returned (views of an optimiser's flat buffer,
    geofact.training.stack.StackedUpdates.grad_targets: no concatenation of them, two passes over the weights);
    `row_masks`: {"E_ent" or "E_rel": (M,)} factors of each run's table gradient (0: a frozen table), on its rows."""
    if not covers(p):
        raise ValueError("loss_and_grads covers models without learned positions; use autograd")
    out, row_masks = _gradient_targets(out, row_masks)
    p = {k: v.detach() for k, v in p.items()}
    (M, B), L = subjects.shape, 2
    width = entity_chunk(B, p["E_out"].shape[2], subjects.device) if width is None else width
    x = gathered_inputs(p, subjects, relations)  # (M, B, L, d)

    # forward, keeping what the backward reads
    xn, norm0 = _normed(x, p["g_attn"])  # (M, B, L, d)
    learned = "W_Q" in p
    if learned:
        q, k, pattern = attend(p, xn)
        mixed = (pattern[..., None] * xn).sum(2)  # (M, B, d)
    else:
        mixed = xn.mean(2)  # (M, B, d)
    a = torch.bmm(mixed, p["W_V"])
    h = x[:, :, -1] + torch.bmm(a, p["W_O"])  # (M, B, d): hidden()
    wanted = set(p) if wanted is None else set(wanted)
    g: dict[str, torch.Tensor] = {}
    losses, d_h = head_loss_and_grads(p, h, targets, g, wanted, out, width, keep, way)

    # backward of losses.sum(), through the attention
    _weight_grad(g, wanted, out, "W_O", a, d_h)
    d_a = torch.bmm(d_h, p["W_O"].transpose(1, 2))
    _weight_grad(g, wanted, out, "W_V", mixed, d_a)
    if learned:
        d_mixed = torch.bmm(d_a, p["W_V"].transpose(1, 2))  # (M, B, d)
        d_xn, d_q, d_k = _attend_backward(p, xn, q, k, pattern, d_mixed)
        _weight_grad(g, wanted, out, "W_Q", xn[:, :, -1], d_q)
        _weight_grad(g, wanted, out, "W_K", xn.flatten(1, 2), d_k.flatten(1, 2))
    else:
        d_xn = _mean_share(d_a, p["W_V"], L)[:, :, None].expand(M, B, L, -1)  # the mean's share to every position
    d_x, g["g_attn"] = _rms_backward(d_xn, x, norm0, p["g_attn"], out.get("g_attn"))
    d_x[:, :, -1].add_(d_h)
    table_grads(p, subjects, relations, d_x, g, wanted, out, row_masks)
    return losses, {name: value for name, value in g.items() if name in wanted}


def gathered_inputs(p: dict[str, torch.Tensor], subjects: torch.Tensor, relations: torch.Tensor) -> torch.Tensor:
    """The inputs x (M, B, L = 2, d) of queries (subject, relation) (M, B): each table's rows gathered straight into
    their position of x (the tables: strided views of the flat buffer; a stack of two gathers moved x's bytes twice
    more)."""
    x = p["E_ent"].new_empty(*subjects.shape, len(TABLES), p["E_ent"].shape[2])
    for position, (name, rows) in enumerate(zip(TABLES, (subjects, relations))):
        torch.gather(p[name], 1, rows[..., None].expand(*rows.shape, x.shape[-1]), out=x[:, :, position])
    return x


def table_grads(p: dict[str, torch.Tensor], subjects: torch.Tensor, relations: torch.Tensor, d_x: torch.Tensor,
                g: dict[str, torch.Tensor], wanted: set[str], out: dict[str, torch.Tensor],
                row_masks: dict[str, torch.Tensor]) -> None:
    """g[table]: the wanted embedding tables' gradients from d_x (M, B, L, d), the gradient of `gathered_inputs`."""
    run = torch.arange(subjects.shape[0], device=subjects.device)[:, None].expand(*subjects.shape)
    for position, (name, rows) in enumerate(zip(TABLES, (subjects, relations))):
        if name in wanted:
            g[name] = _table_grad(p[name], [(run, rows, d_x[:, :, position])], out.get(name), row_masks.get(name))


def _table_grad(table: torch.Tensor, parts: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]],
                out: torch.Tensor | None, mask: torch.Tensor | None) -> torch.Tensor:
    """An embedding table's (M, n, d) gradient from the gradients of its gathered rows: `parts`, (run, rows, d_rows)
    each, the rows (M, ...) gathered at (run, rows) and their gradients d_rows (M, ..., d), added back where they came
    from (a row drawn twice, twice), into `out` if given, each run's scaled by its `mask` (M,) entry if given."""
    grad = out.zero_() if out is not None else torch.zeros_like(table)
    for run, rows, d_rows in parts:
        if mask is not None:
            d_rows = d_rows * mask.view(-1, *[1] * (d_rows.dim() - 1))
        grad.index_put_((run, rows), d_rows, accumulate=True)
    return grad


def _gradient_targets(out: dict[str, torch.Tensor] | None, row_masks: dict[str, torch.Tensor] | None
                      ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """A step's `out` and `row_masks` ({} where not given), the masks checked to name embedding tables only."""
    out, row_masks = out or {}, row_masks or {}
    if not set(row_masks) <= set(TABLES):
        raise ValueError(f"row_masks must name embedding tables among {list(TABLES)}, got {sorted(row_masks)}")
    return out, row_masks
