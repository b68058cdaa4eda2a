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

    def columns(self, values: dict[str, torch.Tensor]) -> torch.Tensor:
        """(M, P) from per-tensor values broadcastable to (M, numel): a mask or a gradient."""
        return torch.cat([values[k].reshape(self.M, -1).expand(self.M, math.prod(s)) for k, s in self.shapes.items()], dim=1)

    def keep(self, runs: torch.Tensor) -> None:
        """Keep only the runs at indices `runs` (a new buffer; views made afresh)."""
        self.flat = self.flat[runs]
        self.M = self.flat.shape[0]
        self.views = self._views()


def clip_grad_norms_(grad: torch.Tensor, max_norm: float) -> torch.Tensor:
    """Scale each run's row of grad (M, P) so its L2 norm is at most max_norm (torch's formula). Returns norms (M,)."""
    norms = grad.pow(2).sum(1).sqrt()
    grad.mul_((max_norm / (norms + 1e-6)).clamp(max=1.0)[:, None])
    return norms


def _adamw_(p, g, m, v, decay, step_size, bias2_sqrt) -> None:
    """torch's single-tensor AdamW update, in place, on (M, P) rows; decay (M, P), the others (M, 1)."""
    beta1, beta2 = BETAS
    p.mul_(decay)
    m.lerp_(g, 1 - beta1)
    v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
    denom = v.sqrt().div_(bias2_sqrt).add_(EPS)
    p.addcdiv_(m * step_size, denom, value=-1)


class StackedAdamW:
    """AdamW on a FlatStack's buffer: lr (M,) per run, `mask` (M, P) 1 where a run trains an entry."""

    def __init__(self, stack: FlatStack, lr: torch.Tensor, weight_decay: float, mask: torch.Tensor) -> None:
        self.stack, self.lr = stack, lr
        self.m = torch.zeros_like(stack.flat)
        self.v = torch.zeros_like(stack.flat)
        self.t = torch.zeros_like(lr)
        self.decay = 1 - lr[:, None] * weight_decay * mask  # 1 exactly where a run does not train

    def keep(self, runs: torch.Tensor) -> None:
        """Keep only the runs at indices `runs` (the others have stopped); call after stack.keep."""
        self.lr, self.t, self.decay = self.lr[runs], self.t[runs], self.decay[runs]
        self.m, self.v = self.m[runs], self.v[runs]

    @torch.no_grad()
    def step(self, grad: torch.Tensor, active: torch.Tensor) -> None:
        """One AdamW step from grad (M, P), already masked, for the runs in `active` (M,) bool."""
        beta1, beta2 = BETAS
        self.t += active.to(self.t.dtype)
        t = self.t.clamp(min=1)
        step_size = (self.lr / (1 - beta1**t))[:, None]
        bias2_sqrt = (1 - beta2**t).sqrt()[:, None]
        p = self.stack.flat
        if bool(active.all()):
            _adamw_(p, grad, self.m, self.v, self.decay, step_size, bias2_sqrt)
            return
        idx = torch.nonzero(active).flatten()  # update only these runs; the others stay bit-identical
        p_on, m_on, v_on = p[idx], self.m[idx], self.v[idx]
        _adamw_(p_on, grad[idx], m_on, v_on, self.decay[idx], step_size[idx], bias2_sqrt[idx])
        p[idx], self.m[idx], self.v[idx] = p_on, m_on, v_on
