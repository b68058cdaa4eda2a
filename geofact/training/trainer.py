"""Train many single-hop runs as one stacked computation (Section 5, Appendix B).

Runs that share `TrainConfig.shape_key()` are stacked: every parameter gets a leading run
dimension, one forward/backward serves them all, and `StackedAdamW` updates each run as its own
torch.optim.AdamW would. Runs differ in seed, task seed, R (relation tables are padded), learning
rate and frozen/trainable; each stops on its own when its loss falls below the threshold.
`tests/training/test_trainer.py` checks the result against the plain loop of `reference.py`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch
from torch.nn import functional as F

from geofact.device import configure_cpu, resolve_device
from geofact.training.config import TrainConfig
from geofact.training.data import batch_indices, facts
from geofact.training.model import forward, init_params
from geofact.training.optim import FlatStack, StackedAdamW, clip_grad_norms_, column_ranges
from geofact.training.resume import GroupCheckpoint, GroupState, restore_stack, stack_state
from geofact.training.step import covers, loss_and_grads


@dataclass
class RunResult:
    """What one run produced. `params` are the trained weights (CPU), without the relation padding."""

    config: TrainConfig
    steps: int  # optimiser steps taken (< max_steps when it stopped early)
    final_loss: float  # training loss of the last batch seen
    accuracy: float  # fraction of all N R facts answered by argmax
    stopped_early: bool
    loss_curve: list[tuple[int, float]] = field(default_factory=list)  # (step, batch loss) every log_every steps
    accuracy_curve: list[tuple[int, float]] = field(default_factory=list)  # (updates so far, accuracy) every eval_every steps
    seconds: float = 0.0  # wall time of the group this run trained in
    params: dict[str, torch.Tensor] = field(default_factory=dict, repr=False)
    checkpoints: dict[int, dict[str, torch.Tensor]] = field(default_factory=dict, repr=False)  # step -> weights after that many updates
    checkpoint_losses: dict[int, float] = field(default_factory=dict)  # step -> batch loss of those weights at that step

    def record(self) -> dict:
        """The JSON-able outcome (geofact.training.sweep adds config, timing, weights file and provenance)."""
        return {"steps": self.steps, "final_loss": self.final_loss, "accuracy": self.accuracy,
                "stopped_early": self.stopped_early, "loss_curve": self.loss_curve}


BATCH_BLOCK, BATCH_BLOCK_KEYS = 64, 2**22  # batches drawn per block of steps, at most this many hash keys at once

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
    device = resolve_device(device)
    if device.type == "cpu":
        configure_cpu()
    return device


class StackedUpdates:
    """The stacked runs' weights (`params`: leaves the model reads) and one optimiser step for them:
    gradients of the summed per-run losses, per-run clipping, per-run AdamW, all on one FlatStack
    buffer. Tensors no run trains get no gradient; frozen entity embeddings (`frozen_embeddings`) and
    tensors outside `train_only` are masked per run."""

    def __init__(self, tensors: dict[str, torch.Tensor], configs: list, device: torch.device,
                 train_only: tuple[str, ...] | None = None) -> None:
        if train_only is not None and not set(train_only) <= set(tensors):
            raise ValueError(f"train_only must name parameters among {sorted(tensors)}, got {sorted(train_only)}")
        M = len(configs)
        self.stack = FlatStack({k: v.to(device) for k, v in tensors.items()})
        trainable = {k: torch.full((M,), train_only is None or k in train_only, device=device) for k in tensors}
        trainable["E_ent"] &= torch.tensor([not c.frozen_embeddings for c in configs], device=device)
        self.names = [k for k in tensors if bool(trainable[k].any())]
        dtype = self.stack.flat.dtype
        mask = self.stack.columns({k: v.to(dtype) for k, v in trainable.items()})  # (M, P)
        self.untrained = [column_ranges(row == 0) for row in mask]  # per run: the column ranges it does not train
        self.no_grad = {k: torch.zeros(M, 1, dtype=dtype, device=device) for k in tensors if k not in self.names}
        self.grad_clip = configs[0].grad_clip
        lr = torch.tensor([c.lr for c in configs], dtype=dtype, device=device)
        self.opt = StackedAdamW(self.stack, lr, configs[0].weight_decay, mask)

    @property
    def params(self) -> dict[str, torch.Tensor]:
        return self.stack.views

    def keep(self, runs: torch.Tensor) -> dict[str, torch.Tensor]:
        """Drop every run but those at indices `runs` (stopped runs leave the stack); returns the new params."""
        self.stack.keep(runs)
        self.untrained = [self.untrained[i] for i in runs.tolist()]
        self.no_grad = {k: v[runs] for k, v in self.no_grad.items()}
        self.opt.keep(runs)
        return self.params

    def __call__(self, losses: torch.Tensor, active: torch.Tensor, grads: dict[str, torch.Tensor] | None = None) -> None:
        """Update the runs in `active` (M,) bool from their losses (M,), differentiated by autograd,
        or from `grads` (the gradients of losses.sum(), {name: (M, ...)}) when the caller has them."""
        if grads is None:
            params = self.params
            grads = dict(zip(self.names, torch.autograd.grad(losses.sum(), [params[k] for k in self.names])))
        grad = self.stack.columns({**{k: grads[k] for k in self.names}, **self.no_grad}, out=self.opt.grad)  # (M, P)
        for run, ranges in enumerate(self.untrained):  # the clipping norm counts trained entries only
            for a, b in ranges:
                grad[run, a:b] = 0
        clip_grad_norms_(grad, self.grad_clip)
        self.opt.step(active)


@torch.no_grad()
def accuracy(params: dict[str, torch.Tensor], tables: list[torch.Tensor], N: int, chunk: int = 8192) -> list[float]:
    """Fraction of each run's own N R facts whose argmax answer is right."""
    out = []
    for m, table in enumerate(tables):
        one = {k: v[m : m + 1] for k, v in params.items()}
        correct = 0
        for start in range(0, len(table), chunk):
            rows = table[start : start + chunk]
            tokens = torch.stack([rows[:, 0], N + rows[:, 1]], 1)[None]
            correct += int((forward(one, tokens)[0].argmax(-1) == rows[:, 2]).sum())
        out.append(correct / len(table))
    return out


def check_checkpoints(checkpoints, max_steps: int) -> tuple[int, ...]:
    """Sorted distinct checkpoint steps, each in [0, max_steps) (the weights at max_steps are the run's own)."""
    steps = tuple(sorted(set(checkpoints)))
    if not all(isinstance(t, int) and 0 <= t < max_steps for t in steps):
        raise ValueError(f"checkpoints must be integer steps in [0, max_steps={max_steps}), got {list(checkpoints)}")
    return steps


def run_weights(params: dict[str, torch.Tensor], m: int, config: TrainConfig) -> dict[str, torch.Tensor]:
    """Run m's weights out of a stack (a CPU copy), without its relation padding."""
    weights = {k: v[m].detach().cpu().clone() for k, v in params.items()}
    weights["E_rel"] = weights["E_rel"][: config.R]
    return weights


def train_group(configs: list[TrainConfig], device: str | torch.device = "cpu", log_every: int = 100,
                progress=None, dtype: torch.dtype = torch.float32, evaluate: bool = True,
                init: list[dict[str, torch.Tensor]] | None = None, train_only: tuple[str, ...] | None = None,
                eval_every: int | None = None, checkpoints: tuple[int, ...] = (),
                checkpoint: GroupCheckpoint | None = None) -> list[RunResult]:
    """Train runs with one shape key together. `progress` (a tqdm) is advanced by steps.

    `evaluate=False` skips the final accuracy over all N R facts (accuracy is then NaN); benchmarks
    use it to time training alone. `init` (one dict per run) replaces the seeded initial weights it
    names, and `train_only` (parameter names) freezes every other tensor: together they retrain part
    of a trained model, as the MLP-freeze transfer does (Appendix B.3: only the subject embeddings).
    `eval_every` records each run's accuracy over all its facts before the first update, every
    `eval_every` updates and at the end (`RunResult.accuracy_curve`).

    `checkpoints` (steps t in [0, max_steps)) keeps each run's weights after t updates, with the loss of
    that step's batch, in `RunResult.checkpoints` / `checkpoint_losses` (a run that stopped before t has
    none at t: its final weights are its last state). Batches depend on (seed, step) alone, so a
    checkpoint is the state of the very run that continues to the stop rule, not of a shorter one.

    `checkpoint` (geofact.training.resume) makes the group resumable: it starts from the state written
    there, if any, writes its state every `checkpoint.every_s` seconds at a block boundary, and past
    the deadline of a time budget writes it and raises `BudgetSpent`. The results are those of an
    uninterrupted group; `seconds` adds up the training time behind them.
    """
    if eval_every is not None and eval_every < 1:
        raise ValueError(f"eval_every must be >= 1 (or None), got {eval_every}")
    device = start_group(configs, device, "train_group")
    keep = set(check_checkpoints(checkpoints, configs[0].max_steps))
    start = time.perf_counter()
    first = configs[0]
    M, N, B = len(configs), first.N, first.batch_size
    update = StackedUpdates(stack_params(configs, dtype, init), configs, device, train_only)
    params = update.params
    by_hand = covers(params)  # the backward written out (geofact.training.step); else autograd
    tables = [facts(c.N, c.R, c.bijection_seed).to(device) for c in configs]
    n_facts = torch.tensor([len(t) for t in tables], device=device)
    n_max = int(n_facts.max())
    padded = torch.stack([F.pad(t, (0, 0, 0, n_max - len(t))) for t in tables])  # (M, n_max, 3)
    seeds = torch.tensor([c.seed for c in configs], device=device)
    run_index = torch.arange(M, device=device)[:, None]

    block = max(1, min(BATCH_BLOCK, BATCH_BLOCK_KEYS // (M * n_max)))
    block_start = block_end = 0
    alive = list(range(M))  # the runs still in the stack: stack position i holds run alive[i]
    steps = torch.full((M,), first.max_steps, dtype=torch.long)
    last_loss = torch.full((M,), float("nan"), dtype=torch.float64)
    curves: list[list[tuple[int, float]]] = [[] for _ in range(M)]
    acc_curves: list[list[tuple[int, float]]] = [[] for _ in range(M)]
    kept: list[dict[int, dict[str, torch.Tensor]]] = [{} for _ in range(M)]
    kept_losses: list[dict[int, float]] = [{} for _ in range(M)]
    final: dict[int, dict[str, torch.Tensor]] = {}  # run -> weights at its stop
    accs = [float("nan")] * M
    first_step, seconds_before = 0, 0.0
    state = checkpoint.load() if checkpoint is not None else None
    if state is not None:  # continue where the group was checkpointed: the same stack, bit for bit
        first_step, seconds_before, alive = state.step, state.seconds, list(state.alive)
        if len(alive) < M:
            rows = torch.tensor(alive, device=device)
            params = update.keep(rows)
            padded, n_facts, seeds = padded[rows], n_facts[rows], seeds[rows]
            run_index = torch.arange(len(alive), device=device)[:, None]
        restore_stack(update, state.tensors)
        steps.copy_(state.tensors["steps"])
        last_loss.copy_(state.tensors["last_loss"])
        curves = [[(int(t), x) for t, x in c] for c in state.meta["curves"]]
        acc_curves = [[(int(t), x) for t, x in c] for c in state.meta["acc_curves"]]
        kept_losses = [{int(t): x for t, x in d.items()} for d in state.meta["kept_losses"]]
        accs = list(state.meta["accs"])
        for name, weights in state.weights.items():  # "final/m" and "kept/m/step"
            kind, m, *at = name.split("/")
            if kind == "final":
                final[int(m)] = weights
            else:
                kept[int(m)][int(at[0])] = weights
        block_start = block_end = first_step

    def group_state(step: int) -> GroupState:
        weights = {f"final/{m}": w for m, w in final.items()}
        weights |= {f"kept/{m}/{t}": w for m, by_step in enumerate(kept) for t, w in by_step.items()}
        return GroupState(
            step=step, alive=list(alive), tensors={**stack_state(update), "steps": steps, "last_loss": last_loss},
            meta={"curves": curves, "acc_curves": acc_curves, "accs": accs,
                  "kept_losses": [{str(t): x for t, x in d.items()} for d in kept_losses]},
            seconds=seconds_before + time.perf_counter() - start, weights=weights)

    def accuracy_at(positions: list[int]) -> list[float]:
        """Accuracy over all its facts of the run at each of these stack positions."""
        stacked = {k: v.detach()[positions] for k, v in params.items()}
        return accuracy(stacked, [tables[alive[i]] for i in positions], N)

    def finish(positions: list[int], updates: int) -> None:
        """Keep the final weights (and accuracy) of the runs at these stack positions."""
        runs = [alive[i] for i in positions]
        if eval_every is not None or evaluate:
            for m, a in zip(runs, accuracy_at(positions)):
                accs[m] = a
                if eval_every is not None and (not acc_curves[m] or acc_curves[m][-1][0] != updates):
                    acc_curves[m].append((updates, a))
        for i, m in zip(positions, runs):
            final[m] = run_weights(params, i, configs[m])

    for step in range(first_step, first.max_steps):
        if checkpoint is not None and step == block_end and step > first_step and checkpoint.due():
            checkpoint.save_or_stop(group_state(step), first.max_steps, M)  # at a block boundary, where batches are drawn afresh
        if eval_every is not None and step % eval_every == 0:
            for m, a in zip(alive, accuracy_at(list(range(len(alive))))):
                acc_curves[m].append((step, a))
        if step == block_end:  # draw the next block of steps' batches at once: a step of a small model is mostly fixed costs
            block_start, block_end = step, min(step + block, first.max_steps)
            drawn = batch_indices(seeds, range(block_start, block_end), n_facts, B, n_max)  # (M', steps, B)
        batch = padded[run_index, drawn[:, step - block_start]]  # (M', B, 3)
        tokens = torch.stack([batch[..., 0], N + batch[..., 1]], dim=2)
        if by_hand:
            losses, grads = loss_and_grads(params, tokens, batch[..., 2])  # (M',), {name: (M', ...)}
        else:
            logits = forward(params, tokens)  # (M', B, N)
            losses = F.cross_entropy(logits.flatten(0, 1), batch[..., 2].flatten(), reduction="none").view(len(alive), B).mean(1)
            grads = None
        loss_cpu = losses.detach().cpu()
        last_loss[alive] = loss_cpu.double()
        if step % log_every == 0:
            for m, loss in zip(alive, loss_cpu.tolist()):
                curves[m].append((step, loss))
        if step in keep:
            for i, m in enumerate(alive):
                kept[m][step] = run_weights(params, i, configs[m])
                kept_losses[m][step] = float(loss_cpu[i])
        done = loss_cpu < first.loss_threshold
        stopped = torch.nonzero(done).flatten().tolist()
        if stopped:
            steps[[alive[i] for i in stopped]] = step
            finish(stopped, step)
            if len(stopped) == len(alive):
                alive = []
                break
        update(losses, ~done.to(device), grads)
        if stopped:  # a stopped run leaves the stack, so the runs that go on pay nothing for it
            going = torch.nonzero(~done).flatten()
            rows = going.to(device)
            params = update.keep(rows)
            padded, n_facts, seeds, drawn = padded[rows], n_facts[rows], seeds[rows], drawn[rows]
            alive = [alive[i] for i in going.tolist()]
            run_index = torch.arange(len(alive), device=device)[:, None]
        if progress is not None:
            progress.update(len(alive))
    if alive:
        finish(list(range(len(alive))), first.max_steps)
    seconds = seconds_before + time.perf_counter() - start
    results = []
    for m, c in enumerate(configs):
        results.append(RunResult(c, int(steps[m]), float(last_loss[m]), accs[m], int(steps[m]) < c.max_steps,
                                 curves[m], acc_curves[m], seconds, final[m], kept[m], kept_losses[m]))
    return results
