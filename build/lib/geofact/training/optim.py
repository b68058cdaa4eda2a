"""AdamW and gradient-norm clipping for stacked runs, equal to torch.optim.AdamW + clip_grad_norm_ per run.

Every run's tensors live in one (M, P) buffer (`FlatStack`): the optimiser and the clipping are a
handful of whole-buffer operations per step whatever the number of tensors, which is what a step of
a small model costs (bench/bench_trainer.py: the per-tensor loop was most of a d = 16 step on a CPU).
Each run keeps its own step count, learning rate and clipping norm; an entry a run does not train
(a frozen tensor, frozen embeddings) has a zero in the run's mask, so its gradient, moments and
weight decay are zero and it never moves, exactly as if it were not in that run's optimiser.
"""

from __future__ import annotations

import math

import torch

BETAS = (0.9, 0.999)
EPS = 1e-8
FUSED_DEVICES = ("cpu", "cuda")  # where torch.optim.AdamW has a fused kernel


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
        self.flat = torch.cat([v.detach().reshape(self.M, -1) for v in tensors.values()], dim=1)  # (M, P)
        self.views = self._views()

    def _views(self) -> dict[str, torch.Tensor]:
        views, start = {}, 0
        for k, shape in self.shapes.items():
            n = math.prod(shape)
            views[k] = self.flat[:, start : start + n].view(self.M, *shape).requires_grad_()
            start += n
        return views

    def columns(self, values: dict[str, torch.Tensor], out: torch.Tensor | None = None) -> torch.Tensor:
        """(M, P) from per-tensor values broadcastable to (M, numel): a mask or a gradient (written into `out` if given)."""
        parts = [values[k].reshape(self.M, -1).expand(self.M, math.prod(s)) for k, s in self.shapes.items()]
        return torch.cat(parts, dim=1) if out is None else torch.cat(parts, dim=1, out=out)

    def keep(self, runs: torch.Tensor) -> None:
        """Keep only the runs at indices `runs` (a new buffer; views made afresh)."""
        self.flat = self.flat[runs]
        self.M = self.flat.shape[0]
        self.views = self._views()


def clip_grad_norms_(grad: torch.Tensor, max_norm: float) -> torch.Tensor:
    """Scale each run's row of grad (M, P) so its L2 norm is at most max_norm (torch's formula). Returns norms (M,)."""
    norms = torch.linalg.vector_norm(grad, dim=1)
    grad.mul_((max_norm / (norms + 1e-6)).clamp(max=1.0)[:, None])
    return norms


def column_ranges(trained: torch.Tensor) -> list[tuple[int, int]]:
    """The maximal runs [a, b) of nonzero entries of a 1-D mask."""
    on = torch.cat([torch.zeros(1, dtype=torch.bool), trained.bool().cpu(), torch.zeros(1, dtype=torch.bool)])
    edges = torch.nonzero(on[1:] != on[:-1]).flatten().tolist()
    return list(zip(edges[::2], edges[1::2]))


class StackedAdamW:
    """AdamW on a FlatStack's buffer: lr (M,) per run, `mask` (M, P) 1 where a run trains an entry.

    Each run's trained entries are a few contiguous column ranges of its row (all of it, or all but
    the frozen entity embeddings); those ranges, as views of the buffer, of `grad` and of the moments,
    go to torch's fused AdamW kernel, one call per learning rate, which reads and writes each entry
    once. The unfused update took about 14 passes over the (M, P) buffer, 25% of a d = 96 step on a
    CPU. Entries outside the ranges are never touched: no moments, no weight decay.
    """

    def __init__(self, stack: FlatStack, lr: torch.Tensor, weight_decay: float, mask: torch.Tensor) -> None:
        self.stack, self.weight_decay = stack, weight_decay
        self.lr = [float(x) for x in lr]
        self.grad = torch.zeros_like(stack.flat)  # (M, P): the caller writes each step's gradient here
        self.m = torch.zeros_like(stack.flat)
        self.v = torch.zeros_like(stack.flat)
        self.t = torch.zeros(len(self.lr), dtype=torch.float32, device=stack.flat.device)  # the kernel reads float32 steps
        self.ranges = [column_ranges(row) for row in mask]
        self.groups = self._groups(range(len(self.lr)))

    def _groups(self, runs) -> dict[float, tuple[list[torch.Tensor], ...]]:
        """{lr: (params, grads, exp_avgs, exp_avg_sqs, steps)}: the kernel's arguments for these runs, as views."""
        groups: dict[float, tuple[list[torch.Tensor], ...]] = {}
        for run in runs:
            lists = groups.setdefault(self.lr[run], ([], [], [], [], []))
            for a, b in self.ranges[run]:
                for out, buffer in zip(lists, (self.stack.flat, self.grad, self.m, self.v)):
                    out.append(buffer[run, a:b])
                lists[4].append(self.t[run])
        return groups

    def keep(self, runs: torch.Tensor) -> None:
        """Keep only the runs at indices `runs` (the others have stopped); call after stack.keep."""
        index = runs.tolist()
        self.lr, self.ranges = [self.lr[i] for i in index], [self.ranges[i] for i in index]
        self.grad, self.t, self.m, self.v = self.grad[runs], self.t[runs], self.m[runs], self.v[runs]
        self.groups = self._groups(range(len(index)))

    @torch.no_grad()
    def step(self, active: torch.Tensor) -> None:
        """One AdamW step from `grad` for the runs in `active` (M,) bool; the others stay bit-identical."""
        self.t += active.to(self.t.dtype)
        on = active.tolist()
        groups = self.groups if all(on) else self._groups([run for run, a in enumerate(on) if a])
        for lr, (params, grads, m, v, steps) in groups.items():
            torch._fused_adamw_(params, grads, m, v, [], steps, lr=lr, beta1=BETAS[0], beta2=BETAS[1],
                                weight_decay=self.weight_decay, eps=EPS, amsgrad=False, maximize=False)
