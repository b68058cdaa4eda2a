"""The stacked-run core both trainers share: many runs' weights as one buffer, one optimiser step for
them all, and runs leaving the stack as they stop (Section 5, Appendix B; Appendix C).

Runs that share a config's `shape_key()` are stacked: every parameter gets a leading run dimension,
one forward/backward serves them all, and `StackedAdamW` updates each run as its own
torch.optim.AdamW would. Nothing here reads a device value on the host: which run trains what, its
learning rate and its relation count come from the configs.
"""

from __future__ import annotations

import time
from typing import Callable

import numpy as np
import torch
from torch.nn import functional as F

from geofact.device import configure_cpu
from geofact.host import as_device
from geofact.training.model import init_params
from geofact.precision import check_precision
from geofact.training.optim import FlatStack, StackedAdamW
from geofact.training.resume import GroupCheckpoint, GroupState, restore_stack
from geofact.training.step import TABLES


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
    device = as_device(device)
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
        self._in_place: dict[str, torch.Tensor] = {}  # the gradient buffer's views `grad_targets` handed out
        self._row_masks: dict[str, torch.Tensor] = {}  # and the tables' masks, (M,) each

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
        self._in_place = {}  # views of the old buffer: a step asks grad_targets again
        return self.params

    def grad_targets(self) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]] | None:
        """Where a step that writes its gradients in place (geofact.training.step.loss_and_grads' `out` and
        `row_masks`) puts them: ({name: view of the optimiser's gradient buffer} for the tensors runs train,
        {table: (M,) mask} for the embedding tables some runs do not train); None where a mask is on another
        tensor (the step scales a table's gathered rows, nothing else). A step given these saves the
        buffer's concatenation of new gradients and the masks' multiply: `__call__` sees them in place."""
        if not set(self.masks) <= set(TABLES):
            return None
        if not self._in_place:
            views = self.stack.unflatten(self.opt.grad)
            self._in_place = {k: views[k] for k in self.names}
            self._row_masks = {k: v.flatten() for k, v in self.masks.items()}
        return self._in_place, self._row_masks

    def gradients(self, losses: torch.Tensor) -> dict[str, torch.Tensor]:
        """The gradients of losses.sum() (losses (M,) from `params`) by autograd, for the tensors runs train."""
        params = self.params
        return dict(zip(self.names, torch.autograd.grad(losses.sum(), [params[k] for k in self.names])))

    def __call__(self, grads: dict[str, torch.Tensor]) -> None:
        """One step of every run from `grads`, the gradients of the summed losses {name: (M, ...)} (at
        least of the tensors in `names`)."""
        in_place = self._in_place
        if not (in_place and all(grads.get(k) is in_place[k] for k in self.names)):  # else written there, masked
            values = {k: grads[k] * self.masks[k] if k in self.masks else grads[k] for k in self.names}
            self.stack.columns({**values, **self.no_grad}, out=self.opt.grad)  # (M, P)
        self.opt.clip_and_step(self.grad_clip)


class StackedGroup:
    """The runs of a group still training: their StackedUpdates (`update`) and which run sits at each
    stack position (`alive`: stack position i holds run alive[i]; `configs` stays every run's). A
    trainer's group adds its task tensors, cut with the stack in `_keep_rows`, and its step between
    host reads, made for the stack as it is in `_make_step`."""

    def __init__(self, configs: list, device: torch.device, update: StackedUpdates) -> None:
        self.configs, self.device, self.update = configs, device, update
        self.alive = list(range(len(configs)))
        self._step = None

    def _keep_rows(self, rows: torch.Tensor, positions: list[int]) -> None:
        """Cut the trainer's own per-run tensors to these stack positions (`alive` already is)."""
        raise NotImplementedError

    def _make_step(self):
        raise NotImplementedError

    @property
    def step(self):
        """The trainer's step for the stack as it is now (a CUDA graph on CUDA: geofact.training.graphs)."""
        if self._step is None:
            self._step = self._make_step()
        return self._step

    def keep(self, positions: list[int]) -> None:
        """Keep the runs at these stack positions; the others leave the stack."""
        self.update.keep(positions)
        self.alive = [self.alive[i] for i in positions]
        self._keep_rows(torch.tensor(positions, dtype=torch.long, device=self.device), positions)
        self._step = None

    def restore(self, state: GroupState) -> None:
        """Put a written state's stack back, bit for bit (the trainer restores its own bookkeeping)."""
        if len(state.alive) < len(self.alive):
            self.keep(list(state.alive))  # a fresh group's positions are its runs
        restore_stack(self.update, state.tensors)


def train_in_blocks(group: StackedGroup, max_steps: int, block_steps: int, train: Callable[[range], None],
                    checkpoint: GroupCheckpoint | None = None, state_at: Callable[[int, float], GroupState] | None = None,
                    resume: Callable[[GroupState], None] | None = None) -> Callable[[], float]:
    """The loop both trainers run: from the checkpointed state, if any (`resume` puts it back), `train`
    each block of at most `block_steps` steps until `max_steps` or until no run is left in the stack;
    at a block boundary every `checkpoint.every_s` seconds, the group's state (`state_at(step,
    seconds)`) is written, and past a time budget's deadline the group stops with BudgetSpent
    (geofact.training.resume). Returns the training time behind the results so far, as a function."""
    started = time.perf_counter()
    state = checkpoint.load() if checkpoint is not None else None
    step, seconds_before = (state.step, state.seconds) if state is not None else (0, 0.0)
    if state is not None:
        resume(state)
    first_step = step

    def seconds() -> float:
        return seconds_before + time.perf_counter() - started

    while step < max_steps and group.alive:
        if checkpoint is not None and step > first_step and checkpoint.due():
            checkpoint.save_or_stop(state_at(step, seconds()), max_steps, len(group.configs))
        end = min(step + block_steps, max_steps)
        train(range(step, end))
        step = end
    return seconds
