"""AdamW and gradient-norm clipping for stacked runs, equal to torch.optim.AdamW + clip_grad_norm_ per run.

Every run's tensors live in one (M, P) buffer (`FlatStack`): the optimiser and the clipping are a
handful of whole-buffer operations per step whatever the number of tensors, which is what a step of
a small model costs (bench/bench_trainer.py: the per-tensor loop was most of a d = 16 step on a CPU).
Each run keeps its own step count, learning rate and clipping norm; the entries a run does not train
(a frozen tensor, frozen embeddings) are outside its column ranges, so they get no moments and no
weight decay and never move, exactly as if they were not in that run's optimiser.

A step passes over the buffer as few times as torch's kernels allow (issue 47, counted by
geofact.training.traffic): the gradient is written there by the step itself (geofact.training.step), its
norms read once, and the fused AdamW reads the weights, gradients and moments and writes back the weights
and moments. On a GPU with large runs each run steps with its own call (PER_RUN_DEVICES), which folds the
clipping and the stop rule into the kernel's arguments instead of two and three more passes; on a GPU with
Triton every run steps in one launch of geofact's own kernel (geofact.training.fused_adamw), which folds them
too and does not store the gradient back: seven passes.

Nothing here reads a device value on the host: which run trains what is known from the configs, so a
step can run inside a block of steps that the host does not watch (geofact.training.trainer).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from geofact.training import fused_adamw as adamw_kernel
from geofact.training import fused_ce

BETAS = (0.9, 0.999)
EPS = 1e-8
FUSED_DEVICES = ("cpu", "cuda")  # where torch.optim.AdamW has a fused kernel
# Stacks that step each run with its own kernel call (`StackedAdamW`, per run): one more launch a run, against
# five fewer passes over the (M, P) buffer, two of the clipping's scaling (folded into the kernel's grad_scale) and
# three of the stop rule's copy (a run that stopped is skipped by the kernel's found_inf instead of having its weights
# copied out of the buffer). On a GPU, where a launch costs about 5 us in a CUDA graph (the H100 calibration: 4.8) and
# a run's five passes 20 bytes a weight at ~3 TB/s, this pays from about a million weights a run (PER_RUN_MIN_PARAMS:
# the paper's N = 4096 grid from d = 128 on, exp-scaling's large N); a CPU steps its runs together.
PER_RUN_DEVICES = ("cuda", "meta")
PER_RUN_MIN_PARAMS = 2**20
# Where every run steps in one launch of geofact's Triton kernel (geofact.training.fused_adamw: seven passes, the
# clipping and the stop rule folded as per run, no gradient stored back), when Triton is there (fused_ce.wanted)
FUSED_KERNEL_DEVICES = ("cuda", "meta")

Ranges = list[tuple[int, int]]  # column ranges [a, b) of a run's row


def fused_adamw(params, lr: float, weight_decay: float) -> torch.optim.AdamW:
    """torch.optim.AdamW, with its fused kernel (one pass over each tensor instead of about a dozen)
    where the parameters' device has one. The probes' 18M parameters step in 13 ms instead of 100 on
    2 CPU cores; the update is the same up to float rounding."""
    params = list(params)
    fused = all(p.device.type in FUSED_DEVICES and p.dtype.is_floating_point for p in params)
    return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, fused=fused or None)


class FlatStack:
    """Stacked tensors {name: (M, *shape)} stored as the columns of one (M, P) buffer `flat`.

    `views` are the same tensors as views of `flat` that autograd treats as leaves: the model reads
    them, an in-place update of `flat` moves them.
    """

    def __init__(self, tensors: dict[str, torch.Tensor]) -> None:
        first = next(iter(tensors.values()))
        self.M = first.shape[0]
        self.shapes = {k: tuple(v.shape[1:]) for k, v in tensors.items()}
        self.spans: dict[str, tuple[int, int]] = {}
        start = 0
        for k, shape in self.shapes.items():
            self.spans[k] = (start, start + math.prod(shape))
            start += math.prod(shape)
        self.flat = torch.cat([v.detach().reshape(self.M, -1) for v in tensors.values()], dim=1)  # (M, P)
        self.views = self.unflatten(self.flat, leaves=True)

    def unflatten(self, buffer: torch.Tensor, leaves: bool = False) -> dict[str, torch.Tensor]:
        """{name: (rows, *shape)} views of a buffer laid out as `flat` (rows, P); as autograd leaves if asked."""
        views = {k: buffer[:, a:b].view(buffer.shape[0], *self.shapes[k]) for k, (a, b) in self.spans.items()}
        return {k: v.requires_grad_() for k, v in views.items()} if leaves else views

    def column_ranges(self, names: Sequence[str]) -> Ranges:
        """The maximal column ranges [a, b) covered by the tensors `names`."""
        merged: Ranges = []
        for a, b in sorted(self.spans[k] for k in names):
            if merged and merged[-1][1] == a:
                merged[-1] = (merged[-1][0], b)
            else:
                merged.append((a, b))
        return merged

    def columns(self, values: dict[str, torch.Tensor], out: torch.Tensor | None = None) -> torch.Tensor:
        """(M, P) from per-tensor values broadcastable to (M, numel): a mask or a gradient (written into `out` if given)."""
        parts = [values[k].reshape(self.M, -1).expand(self.M, math.prod(s)) for k, s in self.shapes.items()]
        return torch.cat(parts, dim=1) if out is None else torch.cat(parts, dim=1, out=out)

    def keep(self, rows: torch.Tensor) -> None:
        """Keep only the runs at indices `rows` (a device index tensor; a new buffer, views made afresh)."""
        self.flat = self.flat[rows]
        self.M = self.flat.shape[0]
        self.views = self.unflatten(self.flat, leaves=True)


def clip_grad_norms_(grad: torch.Tensor, max_norm: float, divisors: torch.Tensor | None = None) -> torch.Tensor:
    """Scale each run's row of grad (M, P) so its L2 norm is at most max_norm (torch's formula). Returns norms (M,).
    With `divisors` (M,), grad is left as it is and each run's divisor, 1 / its factor, is written there (for
    a kernel that divides as it reads: torch's fused AdamW's grad_scale)."""
    norms = torch.linalg.vector_norm(grad, dim=1)
    if divisors is None:
        grad.mul_((max_norm / (norms + 1e-6)).clamp(max=1.0)[:, None])
    else:
        torch.div(norms + 1e-6, max_norm, out=divisors).clamp_(min=1.0)
    return norms


class StackedAdamW:
    """AdamW on a FlatStack's buffer: a learning rate per run, and per run the column `ranges` it trains.

    Each run's trained entries are a few contiguous column ranges of its row (all of it, or all but
    the frozen entity embeddings); those ranges, as views of the buffer, of `grad` and of the moments,
    go to torch's fused AdamW kernel, one call per learning rate, which reads and writes each entry
    once. The unfused update took about 14 passes over the (M, P) buffer, 25% of a d = 96 step on a
    CPU. Entries outside the ranges are never touched: no moments, no weight decay.

    A run that has stopped is dropped from the stack (`keep`) at the end of its block of steps; until then
    it steps with the others, its weights at the stop kept before (geofact.training.trainer), or, with
    `per_run` (PER_RUN_DEVICES), is skipped: `skip` (M,) holds 1 for such a run, and each run's kernel call
    reads its entry as found_inf (the kernel then leaves its weights and moments as they are). Per run, the
    clipping is folded into the call too (`divisors`, read as grad_scale).
    """

    def __init__(self, stack: FlatStack, lr: Sequence[float], weight_decay: float, ranges: Sequence[Ranges],
                 per_run: bool | None = None, fused: bool | None = None) -> None:
        if not len(lr) == len(ranges) == stack.M:
            raise ValueError(f"lr and ranges must have one entry per run ({stack.M}), got {len(lr)} and {len(ranges)}")
        self.stack, self.weight_decay = stack, weight_decay
        self.lr, self.ranges = [float(x) for x in lr], [list(r) for r in ranges]
        self.grad = torch.zeros_like(stack.flat)  # (M, P): the caller writes each step's gradient here
        self.m = torch.zeros_like(stack.flat)
        self.v = torch.zeros_like(stack.flat)
        self.t = torch.zeros(len(self.lr), dtype=torch.float32, device=stack.flat.device)  # the kernel reads float32 steps
        if fused is None:
            fused = stack.flat.device.type in FUSED_KERNEL_DEVICES and fused_ce.wanted()
        self.fused = fused
        if per_run is None:
            per_run = stack.flat.device.type in PER_RUN_DEVICES and stack.flat.shape[1] >= PER_RUN_MIN_PARAMS
        self.per_run = per_run and not fused
        if self.skips:
            self.skip = torch.zeros_like(self.t)  # (M,): 1 for a run the kernel leaves as it is
            # (M,): each run's gradient divisor (its clipping); torch's fused AdamW reads its grad_scale as float32,
            # geofact's kernel divides in the buffer's dtype, so a float64 stack clips as a CPU's does (not to 1e-8)
            self.divisors = torch.ones(len(self.lr), dtype=stack.flat.dtype if fused else torch.float32,
                                       device=stack.flat.device)
        if self.fused:
            self.lr_of = torch.tensor(self.lr, dtype=stack.flat.dtype, device=stack.flat.device)  # (M,)
            self.range_of = adamw_kernel.range_table(self.ranges, stack.flat.device)  # (M, K, 2)
        self.groups = self._groups()

    @property
    def skips(self) -> bool:
        """Whether a stopped run is skipped by the kernel (`skip`) and the clipping divides as the kernel reads
        (`divisors`): stepped per run, or by geofact's kernel."""
        return self.per_run or self.fused

    def _groups(self) -> dict[tuple[float, int | None], tuple[list[torch.Tensor], ...]]:
        """{(lr, run or None): (params, grads, exp_avgs, exp_avg_sqs, steps)}: the kernel's arguments, as views;
        one call per learning rate, or per run (none for geofact's kernel, which reads the whole buffers)."""
        groups: dict[tuple[float, int | None], tuple[list[torch.Tensor], ...]] = {}
        if self.fused:
            return groups
        for run, (lr, ranges) in enumerate(zip(self.lr, self.ranges)):
            lists = groups.setdefault((lr, run if self.per_run else None), ([], [], [], [], []))
            for a, b in ranges:
                for out, buffer in zip(lists, (self.stack.flat, self.grad, self.m, self.v)):
                    out.append(buffer[run, a:b])
                lists[4].append(self.t[run])
        return groups

    def keep(self, runs: list[int], rows: torch.Tensor) -> None:
        """Keep only the runs at positions `runs` (`rows`: the same on the device); call after stack.keep."""
        self.lr, self.ranges = [self.lr[i] for i in runs], [self.ranges[i] for i in runs]
        self.grad, self.t, self.m, self.v = self.grad[rows], self.t[rows], self.m[rows], self.v[rows]
        if self.skips:
            self.skip, self.divisors = self.skip[rows], self.divisors[rows]
        if self.fused:
            self.lr_of, self.range_of = self.lr_of[rows], self.range_of[rows]
        self.groups = self._groups()

    @torch.no_grad()
    def step(self) -> None:
        """One AdamW step of every run from `grad` (per run: of every run not skipped, `grad` divided by `divisors`)."""
        self.t += 1
        if self.fused:
            flat = self.stack.flat
            trained = sum(b - a for ranges in self.ranges for a, b in ranges)
            t = self.t.double()  # in double, as torch's kernel computes its bias corrections
            step_size = (self.lr_of / (1 - BETAS[0] ** t)).to(flat.dtype)  # (M,)
            bias2_sqrt = (1 - BETAS[1] ** t).sqrt().to(flat.dtype)  # (M,)
            adamw_kernel.adamw_(flat, self.grad, self.m, self.v, step_size, bias2_sqrt, self.lr_of, self.divisors, self.skip,
                               self.range_of, self.weight_decay, BETAS[0], BETAS[1], EPS,
                               7 * trained * flat.element_size())  # weights, moments read and written, gradients read
            return
        for (lr, run), (params, grads, m, v, steps) in self.groups.items():
            scaling = {} if run is None else {"grad_scale": self.divisors[run], "found_inf": self.skip[run]}
            torch._fused_adamw_(params, grads, m, v, [], steps, lr=lr, beta1=BETAS[0], beta2=BETAS[1],
                                weight_decay=self.weight_decay, eps=EPS, amsgrad=False, maximize=False, **scaling)

    @torch.no_grad()
    def clip_and_step(self, max_norm: float) -> torch.Tensor:
        """Clip each run's `grad` to max_norm (`clip_grad_norms_`), then `step`; returns the norms (M,)."""
        norms = clip_grad_norms_(self.grad, max_norm, self.divisors if self.skips else None)
        self.step()
        return norms
