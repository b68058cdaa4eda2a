"""AdamW and gradient-norm clipping for stacked runs, equal to torch.optim.AdamW + clip_grad_norm_ per run.

Each run keeps its own step count, learning rate and clipping norm; a run that has stopped, or a
tensor a run keeps frozen, is masked out of the update (no step, no weight decay), exactly as if it
were not in that run's optimiser.
"""

from __future__ import annotations

import torch

BETAS = (0.9, 0.999)
EPS = 1e-8


def _per_run(x: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """(M,) -> (M, 1, ..., 1) to broadcast against a stacked tensor."""
    return x.reshape(-1, *([1] * (like.dim() - 1)))


def clip_grad_norms(grads: dict[str, torch.Tensor], max_norm: float, trainable: dict[str, torch.Tensor]) -> torch.Tensor:
    """Scale each run's gradients so their joint L2 norm is at most max_norm (torch's formula). Returns norms (M,)."""
    sq = sum((g.pow(2) * _per_run(trainable[k], g)).flatten(1).sum(1) for k, g in grads.items())
    norms = sq.sqrt()
    coef = (max_norm / (norms + 1e-6)).clamp(max=1.0)
    for g in grads.values():
        g.mul_(_per_run(coef, g))
    return norms


def _adamw_(p, g, m, v, decay, step_size, bias2_sqrt) -> None:
    """torch's single-tensor AdamW update, in place, with per-run (M,) decay, step size and bias correction."""
    beta1, beta2 = BETAS
    p.mul_(_per_run(decay, p))
    m.lerp_(g, 1 - beta1)
    v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
    denom = v.sqrt().div_(_per_run(bias2_sqrt, p)).add_(EPS)
    p.addcdiv_(m * _per_run(step_size, p), denom, value=-1)


class StackedAdamW:
    def __init__(self, params: dict[str, torch.Tensor], lr: torch.Tensor, weight_decay: float) -> None:
        self.params, self.lr, self.weight_decay = params, lr, weight_decay
        self.m = {k: torch.zeros_like(v) for k, v in params.items()}
        self.v = {k: torch.zeros_like(v) for k, v in params.items()}
        self.t = torch.zeros_like(lr)

    def keep(self, runs: torch.Tensor, params: dict[str, torch.Tensor]) -> None:
        """Keep only the runs at indices `runs` (the others have stopped), updating `params`, the new
        (sliced) stacked tensors."""
        self.params, self.lr, self.t = params, self.lr[runs], self.t[runs]
        self.m = {k: v[runs] for k, v in self.m.items()}
        self.v = {k: v[runs] for k, v in self.v.items()}

    @torch.no_grad()
    def step(self, grads: dict[str, torch.Tensor], active: torch.Tensor, trainable: dict[str, torch.Tensor]) -> None:
        """One AdamW step for the runs in `active` (M,) bool, on the tensors each run trains."""
        beta1, beta2 = BETAS
        self.t += active.to(self.t.dtype)
        t = self.t.clamp(min=1)
        step_size = self.lr / (1 - beta1**t)
        bias2_sqrt = (1 - beta2**t).sqrt()
        decay = 1 - self.lr * self.weight_decay
        for k, p in self.params.items():
            on = active & trainable[k]
            if not bool(on.any()):
                continue
            g, m, v = grads[k], self.m[k], self.v[k]
            if bool(on.all()):  # the common case: update the whole stack in place
                _adamw_(p, g, m, v, decay, step_size, bias2_sqrt)
                continue
            idx = torch.nonzero(on).flatten()  # update only these runs; the others stay bit-identical
            p_on, m_on, v_on = p[idx], m[idx], v[idx]
            _adamw_(p_on, g[idx], m_on, v_on, decay[idx], step_size[idx], bias2_sqrt[idx])
            p[idx], m[idx], v[idx] = p_on, m_on, v_on
