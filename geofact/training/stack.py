"""The stacked-run core both trainers share: many runs' weights as one buffer, one optimiser step for
them all, and runs leaving the stack as they stop (Section 5, Appendix B; Appendix C).

Runs that share a config's `shape_key()` are stacked: every parameter gets a leading run dimension,
one forward/backward serves them all, and `StackedAdamW` updates each run as its own
torch.optim.AdamW would. Nothing here reads a device value on the host: which run trains what, its
learning rate and its relation count come from the configs.
"""

from __future__ import annotations

import numpy as np
import torch
from torch.nn import functional as F

from geofact.device import configure_cpu
from geofact.host import resolve
from geofact.training.model import init_params
from geofact.training.precision import check_precision
from geofact.training.optim import FlatStack, StackedAdamW, clip_grad_norms_


def stack_params(configs: list, dtype: torch.dtype, init: list[dict[str, torch.Tensor]] | None = None) -> dict[str, torch.Tensor]:
    """Every run's seeded initial weights (or `init`'s replacements) stacked along a leading run
    dimension, relation tables zero-padded to the largest R (CPU tensors; StackedUpdates owns them)."""
    R_max = max(c.R for c in configs)
    runs = [init_params(c, dtype=dtype) for c in configs]
    if init is not None:
        if len(init) != len(configs):
            raise ValueError(f"init must give one weight dict per config ({len(configs)}), got {len(init)}")
        for c, fresh, given in zip(configs, runs, init):
            for k, v in given.items():
                if k not in fresh or fresh[k].shape != v.shape:
                    raise ValueError(f"init[{k!r}] must have shape {tuple(fresh[k].shape) if k in fresh else None} "
                                     f"for N={c.N}, R={c.R}, d={c.d}; got {tuple(v.shape)}")
                fresh[k] = v.to(dtype)
    for p in runs:
        p["E_rel"] = F.pad(p["E_rel"], (0, 0, 0, R_max - p["E_rel"].shape[0]))
    return {k: torch.stack([p[k] for p in runs]) for k in runs[0]}


def start_group(configs: list, device: str | torch.device, trainer: str) -> torch.device:
    """Check that the runs can be stacked (equal shape_key()) and ready the device they train on."""
    if len({c.shape_key() for c in configs}) != 1:
        raise ValueError(f"{trainer} needs runs with equal {type(configs[0]).__name__}.shape_key(); run_sweep groups them")
    device = resolve(device)
    check_precision(configs[0].precision, device)
    if device.type == "cpu":
        configure_cpu()
    return device


def run_weights(params: dict[str, torch.Tensor], m: int, config) -> dict[str, torch.Tensor]:
    """Run m's weights out of a stack (a CPU copy), without its relation padding."""
    weights = {k: v[m].detach().cpu().clone() for k, v in params.items()}
    weights["E_rel"] = weights["E_rel"][: config.R]
    return weights


class StackedUpdates:
    """The stacked runs' weights (`params`: leaves the model reads) and one optimiser step for them:
    gradients of the summed per-run losses, per-run clipping, per-run AdamW, all on one FlatStack
    buffer. Tensors no run trains get no gradient; frozen entity embeddings (`frozen_embeddings`) and
    tensors outside `train_only` are masked per run."""

    def __init__(self, tensors: dict[str, torch.Tensor], configs: list, device: torch.device,
                 train_only: tuple[str, ...] | None = None) -> None:
        if train_only is not None and not set(train_only) <= set(tensors):
            raise ValueError(f"train_only must name parameters among {sorted(tensors)}, got {sorted(train_only)}")
        self.configs = list(configs)
        self.stack = FlatStack({k: v.to(device) for k, v in tensors.items()})
        trains = {k: [train_only is None or k in train_only] * len(configs) for k in tensors}  # name -> per run
        trains["E_ent"] = [t and not c.frozen_embeddings for t, c in zip(trains["E_ent"], configs)]
        self.names = [k for k in tensors if any(trains[k])]  # what autograd differentiates
        dtype = self.stack.flat.dtype
        # A tensor some runs train and others not (the entity embeddings, frozen in some runs): its
        # gradient is zeroed in the others, so their clipping norm counts only what they train.
        self.masks = {k: torch.tensor(trains[k], dtype=dtype, device=device).view(-1, *[1] * len(self.stack.shapes[k]))
                      for k in self.names if not all(trains[k])}
        self.no_grad = {k: torch.zeros(len(configs), 1, dtype=dtype, device=device) for k in tensors if k not in self.names}
        self.grad_clip = configs[0].grad_clip
        ranges = [self.stack.column_ranges([k for k in tensors if trains[k][m]]) for m in range(len(configs))]
        # Each rate as the stack's dtype holds it, as the trainer always has (cached runs stay reproducible).
        lr = [float(np.array(c.lr, dtype=str(dtype).removeprefix("torch."))) for c in configs]
        self.opt = StackedAdamW(self.stack, lr, configs[0].weight_decay, ranges)

    @property
    def params(self) -> dict[str, torch.Tensor]:
        return self.stack.views

    def keep(self, runs: list[int]) -> dict[str, torch.Tensor]:
        """Drop every run but those at positions `runs` (stopped runs leave the stack); returns the new params."""
        rows = torch.tensor(runs, dtype=torch.long, device=self.stack.flat.device)
        self.configs = [self.configs[i] for i in runs]
        self.stack.keep(rows)
        self.masks = {k: v[rows] for k, v in self.masks.items()}
        self.no_grad = {k: v[rows] for k, v in self.no_grad.items()}
        self.opt.keep(runs, rows)
        return self.params

    def gradients(self, losses: torch.Tensor) -> dict[str, torch.Tensor]:
        """The gradients of losses.sum() (losses (M,) from `params`) by autograd, for the tensors runs train."""
        params = self.params
        return dict(zip(self.names, torch.autograd.grad(losses.sum(), [params[k] for k in self.names])))

    def __call__(self, grads: dict[str, torch.Tensor]) -> None:
        """One step of every run from `grads`, the gradients of the summed losses {name: (M, ...)} (at
        least of the tensors in `names`)."""
        values = {k: grads[k] * self.masks[k] if k in self.masks else grads[k] for k in self.names}
        grad = self.stack.columns({**values, **self.no_grad}, out=self.opt.grad)  # (M, P)
        clip_grad_norms_(grad, self.grad_clip)
        self.opt.step()
