"""Train many single-hop runs as one stacked computation (Section 5, Appendix B).

Runs that share `TrainConfig.shape_key()` are stacked (geofact.training.stack): one forward/backward
serves them all and each run is updated as its own torch.optim.AdamW would. Runs differ in seed, task
seed, R (relation tables are padded), learning rate and frozen/trainable; each stops on its own at
the first step whose batch loss is below the threshold.

Training goes in blocks of `block_steps` steps during which the host reads nothing from the device:
each step's losses, the stop rule, the weights of a run at its stop, the checkpoints and accuracy
checks stay on the device, and the host reads them once, at the block's end (`geofact.host.to_host`).
A run that meets the stop rule inside a block has its weights kept at that step; it goes on being
computed with the others until the block ends (its later steps are discarded) and then leaves the
stack. The results are those of stopping it at once: the same steps, curves and checkpoints.

A run read past its stop (`TrainConfig.read_past_stop`, issue 46 item 4) stays in the stack to the end
of its step budget, its record and weights still those at the stop: besides, it keeps the state at the
end of the budget, the best state before any loss spike (under `geofact.spikes`' rule, watched on the
device step by step: the lowest batch loss until the loss first rises above `factor` x its running
minimum once that minimum is below `floor`) and its loss curve past the stop (`RunResult.past_stop`).
A run that keeps a tail (`TrainConfig.keep_tail`, issue 46 item 1) has its state cloned on the device at every
multiple of the tail's step besides its checkpoints; at each block's end the host drops those that fall out
of the last few before its stop (`TrainConfig.tail_steps`), so it holds a few states a run whenever it stops.
A run with an accuracy stop (`TrainConfig.stop_accuracy`, issue 47 item 4) has its facts counted on the
device at every multiple of its check and stops, as at the loss rule, at the first that reaches its level.
`tests/training/test_trainer.py` checks the result against the plain loop of `plain_loop.py`, and
`tests/training/test_fake_device.py` that a block makes no host read, under fake tensors.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch.nn import functional as F

from geofact.host import to_host
from geofact.spikes import DEFAULT_FACTOR, DEFAULT_FLOOR
from geofact.training.config import GIVE_UP_MARGIN, TrainConfig, facts_for
from geofact.training.data import FactSampler, facts
from geofact.training.graphs import GraphedStep
from geofact.training.model import forward
from geofact.precision import at_least_fp32, computing_in
from geofact.training.resume import GroupCheckpoint, GroupState, stack_state
from geofact.training.stack import StackedGroup, StackedUpdates, run_weights, stack_params, start_group, train_in_blocks
from geofact.training.step import covers, loss_and_grads
from geofact.training.step_bf16 import covers_bf16, loss_and_grads_bf16


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
    # read past the stop (TrainConfig.read_past_stop): the fields of `past_stop_results`, and the weights at its points
    past_stop: dict | None = None
    past_weights: dict[str, dict[str, torch.Tensor]] = field(default_factory=dict, repr=False)  # "best", "last"
    gave_up: bool = False  # stopped as hopeless (TrainConfig.give_up): it fails there
    # the step that trained it (`step_name`): its precision's step with the backward written out, or autograd; two
    # ways round differently (bf16's written-out step against autograd under autocast: 3.15236 against 3.15300 after
    # 2,000 steps of exp-capacity's check cell), so the record names it; "" where not known
    step: str = ""

    def record(self) -> dict:
        """The JSON-able outcome (geofact.training.sweep adds config, timing, weights file and provenance). A run
        with an accuracy stop keeps its checks' accuracies (the evidence of `give_up`, and of when runs cross),
        and whether it was stopped as hopeless where it could be."""
        out = {"steps": self.steps, "final_loss": self.final_loss, "accuracy": self.accuracy,
               "stopped_early": self.stopped_early, "loss_curve": self.loss_curve, **({"step": self.step} if self.step else {})}
        if self.config.stop_accuracy is not None:
            out["accuracy_curve"] = self.accuracy_curve
        if self.config.give_up is not None:
            out["gave_up"] = self.gave_up
        return out if self.past_stop is None else {**out, "past_stop": self.past_stop}


DEFAULT_BLOCK_STEPS = 64  # steps between host reads
# Steps between the points of a run's loss curve. A loss spike after memorisation rises and falls within a
# few hundred steps (geofact.spikes), so a curve every 100 steps sees some as one point or none (issue 46):
# a run read past its stop or keeping a tail, whose spikes its page reads, logs every 10; the others keep the
# 100 their cached records were made with.
LOG_EVERY = {False: 100, True: 10}  # TrainConfig.read_past_stop or keep_tail -> steps
# hash keys the batch sampler draws at once (bounds its memory: 8 bytes a key, a few times over): on a CPU 32 MiB;
# on a GPU 512 MiB, so that a block of the paper's capacity stack (2.75M keys a step) takes 3 draws, not 64
BATCH_BLOCK_KEYS = {"cpu": 2**22, "other": 2**26}
ACCURACY_LOGITS = {"cpu": 2**24, "other": 2**28}  # logit entries per chunk of an accuracy pass (runs x facts x N)


def check_checkpoints(checkpoints, max_steps: int) -> tuple[int, ...]:
    """Sorted distinct checkpoint steps, each in [0, max_steps) (the weights at max_steps are the run's own)."""
    steps = tuple(sorted(set(checkpoints)))
    if not all(isinstance(t, int) and 0 <= t < max_steps for t in steps):
        raise ValueError(f"checkpoints must be integer steps in [0, max_steps={max_steps}), got {list(checkpoints)}")
    return steps


@dataclass
class RunLog:
    """One run's outcome so far, on the host."""

    steps: int
    last_loss: float = float("nan")
    accuracy: float = float("nan")
    curve: list[tuple[int, float]] = field(default_factory=list)
    acc_curve: list[tuple[int, float]] = field(default_factory=list)
    kept: dict[int, dict[str, torch.Tensor]] = field(default_factory=dict)  # step -> weights: checkpoints and tail
    kept_losses: dict[int, float] = field(default_factory=dict)
    final: dict[str, torch.Tensor] | None = None  # weights at its stop (or at max_steps)
    stopped: bool = False  # met the stop rule (a run read past its stop goes on training)
    decided: bool = False  # stopped at an accuracy check (its level, or `give_up`): its accuracy is that check's count
    gave_up: bool = False  # stopped as hopeless (`TrainConfig.give_up`)
    past_curve: list[tuple[int, float]] = field(default_factory=list)  # (step, batch loss) after the stop


class FactGroup(StackedGroup):
    """The single-hop runs still training (geofact.training.stack.StackedGroup): their stacked weights and
    optimiser, facts and batch sampler. Everything a block of steps reads."""

    def __init__(self, configs: list[TrainConfig], device: torch.device, dtype: torch.dtype,
                 init: list[dict[str, torch.Tensor]] | None, train_only: tuple[str, ...] | None) -> None:
        super().__init__(configs, device, StackedUpdates(stack_params(configs, dtype, init), configs, device, train_only))
        self.precision = configs[0].precision
        self.past_stop = configs[0].read_past_stop  # one value per stack: it is part of the shape key
        self.tail_every = configs[0].keep_tail[0] if configs[0].keep_tail else None  # so is keep_tail
        self.accuracy_stop = configs[0].stop_accuracy  # and stop_accuracy
        self.give_up = configs[0].give_up  # and give_up
        # the backward written out: geofact.training.step, or under bf16 geofact.training.step_bf16 (uniform attention,
        # whole logits); autograd for the rest
        self.by_hand = (covers_bf16(self.update.params, configs[0].batch_size, device) if self.precision == "bf16"
                        else covers(self.update.params))
        tables = [facts(c.N, c.R, c.bijection_seed) for c in configs]
        self.n_facts = [len(t) for t in tables]
        n_max = max(self.n_facts)
        self.padded = torch.stack([F.pad(t, (0, 0, 0, n_max - len(t))) for t in tables]).to(device)  # (M, n_max, 3)
        self.sampler = FactSampler([c.seed for c in configs], self.n_facts, configs[0].batch_size, n_max, device)
        if self.give_up is not None:  # the best count of facts each run answered so far, at each check j (column j)
            checks = configs[0].max_steps // configs[0].stop_accuracy[1]
            self.tops = torch.zeros(len(configs), checks + 1, dtype=torch.long, device=device)  # (M', checks + 1)
        self._counts()

    def _counts(self) -> None:
        self.n_alive = torch.tensor([self.n_facts[m] for m in self.alive], device=self.device)  # (M',)
        if self.accuracy_stop is not None:  # facts a run must answer to stop on accuracy: (M',), on the device
            self.needed = torch.tensor([facts_for(self.accuracy_stop[0], self.n_facts[m]) for m in self.alive],
                                       device=self.device)
        if self.give_up is not None:  # TrainConfig.gives_up's margin, as the host computes it
            self.give_up_margin = torch.tensor([GIVE_UP_MARGIN * math.sqrt(self.n_facts[m]) for m in self.alive],
                                               dtype=torch.float64, device=self.device)
        self.rows = torch.arange(len(self.alive), device=self.device)[:, None]

    def _keep_rows(self, rows: torch.Tensor, positions: list[int]) -> None:
        self.padded = self.padded[rows]
        self.sampler = self.sampler.keep(positions)
        if self.give_up is not None:
            self.tops = self.tops[rows]
        self._counts()

    def _make_step(self) -> StopRuleStep:
        """One step with the stop rule, for the stack as it is now."""
        return StopRuleStep(self)

    def step_batches(self, steps: range) -> list[torch.Tensor]:
        """Each step's batch (M', B, 3) of facts, drawn a few steps at a time (the sampler's memory is bounded)."""
        keys = BATCH_BLOCK_KEYS["cpu" if self.device.type == "cpu" else "other"]
        per_draw = max(1, keys // (len(self.alive) * self.padded.shape[1]))
        batches = []
        for start in range(steps.start, steps.stop, per_draw):
            drawn = self.sampler(range(start, min(start + per_draw, steps.stop)))  # (M', steps, B)
            batches += [self.padded[self.rows, drawn[:, i]] for i in range(drawn.shape[1])]
        return batches

    def correct(self, params: dict[str, torch.Tensor]) -> torch.Tensor:
        """How many of its own facts each run at a stack position answers by argmax (M',), on the device."""
        with computing_in(self.precision, self.device):
            return correct_counts(params, self.padded, self.n_alive, self.configs[0].N)

    def losses_and_grads(self, batch: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Each run's loss (M',) on its batch (M', B, 3), and the gradients of their sum; the loss in
        float32 whatever the precision policy."""
        params, N, B = self.update.params, self.configs[0].N, batch.shape[1]
        if self.by_hand:  # the gradients straight into the optimiser's buffer: (M',), {name: (M', ...)}
            out, row_masks = self.update.grad_targets() or (None, None)
            queries = (params, batch[..., 0], batch[..., 1], batch[..., 2])
            if self.precision == "bf16":  # its own casts, outside autocast
                return loss_and_grads_bf16(*queries, wanted=self.update.names, out=out, row_masks=row_masks)
            with computing_in(self.precision, self.device):
                return loss_and_grads(*queries, wanted=self.update.names, out=out, row_masks=row_masks)
        with computing_in(self.precision, self.device):
            tokens = torch.stack([batch[..., 0], N + batch[..., 1]], dim=2)
            logits = at_least_fp32(forward(params, tokens))  # (M', B, N)
            losses = F.cross_entropy(logits.flatten(0, 1), batch[..., 2].flatten(), reduction="none").view(-1, B).mean(1)
            return losses.detach(), self.update.gradients(losses)


@torch.no_grad()
def correct_counts(params: dict[str, torch.Tensor], padded: torch.Tensor, n_facts: torch.Tensor, N: int) -> torch.Tensor:
    """How many of its facts (padded (M, n_max, 3), the first n_facts[m] real) each stacked run answers
    by argmax: (M,), on the device, over all runs at once in chunks of facts."""
    M, device = padded.shape[0], padded.device
    chunk = max(1, ACCURACY_LOGITS["cpu" if device.type == "cpu" else "other"] // (M * N))
    total = torch.zeros(M, dtype=torch.long, device=device)
    for start in range(0, padded.shape[1], chunk):
        rows = padded[:, start : start + chunk]  # (M, c, 3)
        tokens = torch.stack([rows[..., 0], N + rows[..., 1]], dim=2)
        right = forward(params, tokens).argmax(-1) == rows[..., 2]
        valid = torch.arange(start, start + rows.shape[1], device=device) < n_facts[:, None]
        total += (right & valid).sum(1)
    return total


def copy_rows_(rows: torch.Tensor, source: torch.Tensor, into: torch.Tensor) -> None:
    """`into[rows] = source[rows]` for a mask `rows` (M',) over (M', P) buffers. On the CPU only the rows
    that change are copied: a `torch.where` over the whole buffer cost 5.4 ms a call at the laptop grid's
    d = 96 stack against 0.16 ms (bench/bench_grid_step.py), and it runs twice a step. Elsewhere
    `torch.where`, which reads no device value on the host and so keeps the step one CUDA graph."""
    if into.device.type != "cpu":
        torch.where(rows[:, None], source, into, out=into)
        return
    changed = rows.nonzero()[:, 0]  # (k,)
    if len(changed):
        into.index_copy_(0, changed, source.index_select(0, changed))


class StopRuleStep:
    """One step of a block and the stop rule, on buffers that live as long as the stack: the step's
    batch and number come in through `batch` and `step`, its losses and the rule's state go out
    through `loss`, `stop_at`, `running` and `at_stop`. Pure device work on tensors allocated here, so
    that on CUDA it is captured and replayed as one graph (geofact.training.graphs)."""

    def __init__(self, group: FactGroup) -> None:
        flat, first = group.update.stack.flat, group.configs[0]
        M, device = flat.shape[0], flat.device
        self.group, self.flat, self.threshold, self.max_steps = group, flat, first.loss_threshold, first.max_steps
        self.batch = torch.zeros(M, first.batch_size, 3, dtype=torch.long, device=device)  # (M', B, 3)
        self.step = torch.zeros((), dtype=torch.long, device=device)
        self.loss = torch.zeros(M, dtype=flat.dtype, device=device)  # (M',): this step's batch losses
        self.stop_at = torch.full((M,), self.max_steps, dtype=torch.long, device=device)  # (M',)
        self.running = torch.ones(M, dtype=torch.bool, device=device)  # (M',)
        # A stack that steps each run with its own optimiser call (geofact.training.optim.PER_RUN_DEVICES) and reads
        # no run past its stop freezes a run where it stops (its call skipped): its row of the weights is then its
        # weights at the stop, with no copy of them; elsewhere the rows of the runs that stop are copied out
        self.freezes = group.update.opt.skips and not group.past_stop
        self.at_stop = flat if self.freezes else torch.zeros_like(flat)  # (M', P)
        if group.accuracy_stop is not None:  # facts a run answered at the check that stopped it (its level or give_up), -1 if none did
            self.decided = torch.full((M,), -1, dtype=torch.long, device=device)  # (M',)
            self.gave_up = torch.zeros(M, dtype=torch.bool, device=device)  # (M',): stopped as hopeless (`give_up`)
        self.past_stop = group.past_stop
        if self.past_stop:  # the best state before any spike (module docstring), for runs read past their stop
            self.min_loss = torch.full((M,), float("inf"), dtype=flat.dtype, device=device)  # (M',): the running minimum
            self.spiked = torch.zeros(M, dtype=torch.bool, device=device)  # (M',): the first spike has started
            self.best_at = torch.full((M,), -1, dtype=torch.long, device=device)  # (M',): -1 while no loss was finite
            self.best = torch.zeros_like(flat)  # (M', P)
        self.run = GraphedStep(self._body, device)

    def start_block(self) -> None:
        """No run has met the stop rule in this block yet. `running` needs no reset: a run that stopped
        has left the stack by now, unless it is read past its stop, when it must not stop again."""
        self.stop_at.fill_(self.max_steps)
        if self.group.accuracy_stop is not None:
            self.decided.fill_(-1)
            self.gave_up.fill_(False)

    def _body(self) -> None:
        loss, grads = self.group.losses_and_grads(self.batch)
        self.loss.copy_(loss)
        now = self.running & (self.loss < self.threshold)
        torch.where(now, self.step, self.stop_at, out=self.stop_at)
        self._stop(now)
        if self.past_stop:
            memorised = self.min_loss < DEFAULT_FLOOR
            self.spiked |= memorised & (~torch.isfinite(self.loss) | (self.loss > DEFAULT_FACTOR * self.min_loss))
            better = ~self.spiked & (self.loss < self.min_loss)
            torch.where(better, self.loss, self.min_loss, out=self.min_loss)
            torch.where(better, self.step, self.best_at, out=self.best_at)
            copy_rows_(better, self.flat, self.best)
        self.group.update(grads)

    def stop_on_accuracy(self, step: int, correct: torch.Tensor) -> None:
        """`TrainConfig.stop_accuracy`: the runs still running that answer (`correct`, (M',)) at least their
        level of facts stop at step `step`, before its update (as at the loss rule). Outside the step's
        graph, on its buffers, with no host read."""
        group = self.group
        now = self.running & (correct >= group.needed)
        self.stop_at.masked_fill_(now, step)
        torch.where(now, correct, self.decided, out=self.decided)  # the record's accuracy: this very count
        self._stop(now)
        if group.give_up is None:
            return
        # TrainConfig.gives_up for the stack, on the best counts so far: integer gains, one float multiply
        j = step // group.accuracy_stop[1]
        top = correct if j == 1 else torch.maximum(group.tops[:, j - 1], correct)  # (M',)
        group.tops[:, j] = top
        if j < group.configs[0].give_up_from:
            return
        h = j // 2
        recent, early = top - group.tops[:, h], group.tops[:, h] - group.tops[:, 1]  # (M',): gains over j - h, h - 1 checks
        reach = top + group.configs[0].give_up_scale(j) * recent.to(torch.float64) + group.give_up_margin
        hopeless = self.running & (recent * (h - 1) < early * (j - h)) & (reach < group.needed)
        self.stop_at.masked_fill_(hopeless, step)
        torch.where(hopeless, correct, self.decided, out=self.decided)  # its record's accuracy: this check's count
        self.gave_up |= hopeless
        self._stop(hopeless)

    def _stop(self, now: torch.Tensor) -> None:
        """The runs in `now` (M',) stop before this step's update: their weights are kept as they are now."""
        if not self.freezes:
            copy_rows_(now, self.flat, self.at_stop)
        self.running &= ~now
        if self.freezes:
            self.group.update.opt.skip.copy_(~self.running)

    def __call__(self, step: int, batch: torch.Tensor) -> torch.Tensor:
        """Take step number `step` on `batch` (M', B, 3); its losses (M',) (a buffer the next step overwrites)."""
        self.batch.copy_(batch)
        self.step.fill_(step)
        self.run()
        return self.loss


@dataclass
class Block:
    """What a block of steps left on the device, for the host to read once."""

    steps: range
    losses: torch.Tensor  # (M', steps): each step's batch loss
    stop_at: torch.Tensor  # (M',): the step a run met the stop rule, or max_steps
    at_stop: torch.Tensor  # (M', P): the weights of a run at its stop (rows of runs that did not stop: anything)
    kept: dict[int, torch.Tensor]  # step -> (M', P) weights at that checkpoint or tail step
    correct: dict[int, torch.Tensor]  # step -> (M',) facts answered right before that step's update
    decided: torch.Tensor | None = None  # (M',): facts answered at the check that stopped a run, -1 for a run no check stopped
    gave_up: torch.Tensor | None = None  # (M',): stopped as hopeless (TrainConfig.give_up)


def train_block(group: FactGroup, steps: range, keep: set[int], eval_every: int | None) -> Block:
    """Train `steps` with no host read: the stop rule, kept weights and accuracy checks on the device.
    The block's `stop_at` and `at_stop` are the step's buffers, valid until the next block starts."""
    step_once = group.step
    step_once.start_block()
    flat = group.update.stack.flat
    losses = torch.empty(len(group.alive), len(steps), dtype=flat.dtype, device=flat.device)
    kept, correct = {}, {}
    decide_every = group.accuracy_stop[1] if group.accuracy_stop is not None else None
    for i, (step, batch) in enumerate(zip(steps, group.step_batches(steps))):
        if eval_every is not None and step % eval_every == 0:
            correct[step] = group.correct(group.update.params)
        if decide_every is not None and step > 0 and step % decide_every == 0:
            if step not in correct:  # a check's count is on the run's accuracy curve too (read with the block)
                correct[step] = group.correct(group.update.params)
            step_once.stop_on_accuracy(step, correct[step])
        if step in keep or (group.tail_every is not None and step % group.tail_every == 0):
            kept[step] = flat.clone()
        losses[:, i] = step_once(step, batch)
    decided = (step_once.decided, step_once.gave_up) if decide_every is not None else (None, None)
    return Block(steps, losses, step_once.stop_at, step_once.at_stop, kept, correct, *decided)


def read_block(block: Block, group: FactGroup, logs: list[RunLog], log_every: int, keep: set[int]) -> list[int]:
    """Read a block's record on the host (one read) into the runs' logs; the stack positions of the runs that
    stopped. Of the tail states (`TrainConfig.keep_tail`) a run keeps those of its tail as it stands at the
    block's end; its checkpoints (`keep`) all."""
    max_steps = group.configs[0].max_steps
    kept_steps, eval_steps = list(block.kept), list(block.correct)
    decided_at = [block.decided, block.gave_up] if block.decided is not None else []
    losses, stop_at, *counts = to_host(block.losses, block.stop_at, *block.correct.values(), *decided_at)
    decided, gave_up = (counts[-2], counts[-1]) if decided_at else (None, None)
    counts = counts[:len(eval_steps)]
    stopped = []
    for i, m in enumerate(group.alive):
        log, stop = logs[m], int(stop_at[i])
        if log.stopped:  # read past its stop: only its loss curve goes on
            log.past_curve += [(step, float(losses[i, j])) for j, step in enumerate(block.steps) if step % log_every == 0]
            continue
        seen = [(step, float(losses[i, j])) for j, step in enumerate(block.steps) if step <= stop]  # losses of the steps it took
        log.last_loss = seen[-1][1]
        log.curve += [(step, loss) for step, loss in seen if step % log_every == 0]
        for step in kept_steps:
            if step <= stop:  # a run that stopped before a checkpoint step has no weights there
                log.kept[step] = run_weights_of(group, block.kept[step], i)
                log.kept_losses[step] = float(losses[i, step - block.steps.start])
        log.acc_curve += [(step, int(c[i]) / group.n_facts[m]) for step, c in zip(eval_steps, counts) if step <= stop]
        if group.tail_every is not None:
            tail = set(group.configs[m].tail_steps(min(stop, block.steps.stop)))
            for step in [t for t in log.kept if t not in keep and t not in tail]:
                del log.kept[step], log.kept_losses[step]
        if stop < max_steps:
            log.steps, log.stopped = stop, True
            if decided is not None and decided[i] >= 0:  # the count that stopped it, not a recount in other chunks
                log.decided, log.accuracy = True, int(decided[i]) / group.n_facts[m]
            log.gave_up = gave_up is not None and bool(gave_up[i])
            stopped.append(i)
            if group.past_stop:
                log.past_curve += [(step, float(losses[i, j])) for j, step in enumerate(block.steps)
                                   if step > stop and step % log_every == 0]
    return stopped


def run_weights_of(group: FactGroup, buffer: torch.Tensor, i: int) -> dict[str, torch.Tensor]:
    """The weights of the run at stack position i in a buffer laid out as the stack's (a CPU copy, without
    its relation padding)."""
    return run_weights(group.update.stack.unflatten(buffer), i, group.configs[group.alive[i]])


def finish(group: FactGroup, logs: list[RunLog], positions: list[int], buffer: torch.Tensor, accuracy: bool,
           curve: bool) -> None:
    """Keep the final weights of the runs at these stack positions (their rows of `buffer`), with their
    accuracy over all their facts when asked (and on the accuracy curve, unless it is there at that step)."""
    for i in positions:
        logs[group.alive[i]].final = run_weights_of(group, buffer, i)
    if not (positions and accuracy):
        return
    counted = [i for i in positions if not logs[group.alive[i]].decided]  # a decided run has its count already
    if counted:
        rows = torch.tensor(counted, dtype=torch.long, device=group.device)
        weights = {k: v[rows] for k, v in group.update.stack.unflatten(buffer).items()}
        with computing_in(group.precision, group.device):
            counts = correct_counts(weights, group.padded[rows], group.n_alive[rows], group.configs[0].N)
        (counts,) = to_host(counts)
        for i, c in zip(counted, counts):
            logs[group.alive[i]].accuracy = int(c) / group.n_facts[group.alive[i]]
    for i in positions:
        log = logs[group.alive[i]]
        if curve and (not log.acc_curve or log.acc_curve[-1][0] != log.steps):
            log.acc_curve.append((log.steps, log.accuracy))


PAST_STOP_BUFFERS = ("running", "min_loss", "spiked", "best_at", "best")  # a run read past its stop: what a resume needs


def past_stop_results(group: FactGroup, logs: list[RunLog], measure: bool) -> list[tuple[dict, dict]]:
    """Per run of a group read past its stop, at the end of its budget (every run still in the stack):
    its `RunResult.past_stop` fields (the reading points' steps, the best state's loss, the accuracy
    over all its facts at the best state and at the end, the rule, the loss curve past the stop) and the
    weights at the best state and at the end."""
    step_now, flat, max_steps = group.step, group.update.stack.flat, group.configs[0].max_steps
    best_at, best_loss = to_host(step_now.best_at, step_now.min_loss)
    counts = {}
    if measure:
        with computing_in(group.precision, group.device):
            for name, buffer in (("best", step_now.best), ("last", flat)):
                counts[name] = correct_counts(group.update.stack.unflatten(buffer), group.padded, group.n_alive,
                                              group.configs[0].N)
        counts = dict(zip(counts, to_host(*counts.values())))
    out = []
    for i, m in enumerate(group.alive):
        log, best = logs[m], int(best_at[i])
        fields = {"rule": {"floor": DEFAULT_FLOOR, "factor": DEFAULT_FACTOR},
                  "points": {"best": best if best >= 0 else None, "stop": log.steps if log.stopped else None, "last": max_steps},
                  "best_loss": float(best_loss[i]) if best >= 0 else None,
                  "accuracy": {name: int(c[i]) / group.n_facts[m] for name, c in counts.items()},
                  "loss_curve": log.past_curve}
        weights = {"last": run_weights_of(group, flat, i)}
        if best >= 0:
            weights["best"] = run_weights_of(group, step_now.best, i)
        out.append((fields, weights))
    return out


def group_state(group: FactGroup, logs: list[RunLog], step: int, seconds: float) -> GroupState:
    """The group's whole state at the start of `step` (a block boundary), to write and resume from."""
    weights = {f"final/{m}": log.final for m, log in enumerate(logs) if log.final is not None}
    weights |= {f"kept/{m}/{t}": w for m, log in enumerate(logs) for t, w in log.kept.items()}
    tensors = {**stack_state(group.update), "steps": torch.tensor([log.steps for log in logs]),
               "last_loss": torch.tensor([log.last_loss for log in logs], dtype=torch.float64)}
    meta = {"curves": [log.curve for log in logs], "acc_curves": [log.acc_curve for log in logs],
            "accs": [log.accuracy for log in logs], "gave_up": [log.gave_up for log in logs],
            "kept_losses": [{str(t): x for t, x in log.kept_losses.items()} for log in logs]}
    if group.give_up is not None:
        tensors["tops"] = group.tops
    if group.past_stop:
        step_now = group.step
        tensors |= {f"past/{name}": getattr(step_now, name) for name in PAST_STOP_BUFFERS}
        meta |= {"stopped": [log.stopped for log in logs], "past_curves": [log.past_curve for log in logs]}
    return GroupState(step=step, alive=list(group.alive), tensors=tensors, meta=meta, seconds=seconds, weights=weights)


def resume_group(group: FactGroup, logs: list[RunLog], state: GroupState) -> None:
    """Put a written state back: the same stack, bit for bit, and the runs' logs so far."""
    group.restore(state)
    for m, log in enumerate(logs):
        log.steps, log.last_loss = int(state.tensors["steps"][m]), float(state.tensors["last_loss"][m])
        log.curve = [(int(t), x) for t, x in state.meta["curves"][m]]
        log.acc_curve = [(int(t), x) for t, x in state.meta["acc_curves"][m]]
        log.accuracy = state.meta["accs"][m]
        log.gave_up = state.meta.get("gave_up", [False] * len(logs))[m]
        log.kept_losses = {int(t): x for t, x in state.meta["kept_losses"][m].items()}
        if group.past_stop:
            log.stopped = state.meta["stopped"][m]
            log.past_curve = [(int(t), x) for t, x in state.meta["past_curves"][m]]
    if group.give_up is not None:
        group.tops.copy_(state.tensors["tops"])
    if group.past_stop:
        step_now = group.step
        for name in PAST_STOP_BUFFERS:
            getattr(step_now, name).copy_(state.tensors[f"past/{name}"])
    for name, weights in state.weights.items():  # "final/m" and "kept/m/step"
        kind, m, *at = name.split("/")
        if kind == "final":
            logs[int(m)].final = weights
        else:
            logs[int(m)].kept[int(at[0])] = weights


def train_group(configs: list[TrainConfig], device: str | torch.device = "cpu", log_every: int | None = None,
                progress=None, dtype: torch.dtype = torch.float32, evaluate: bool = True,
                init: list[dict[str, torch.Tensor]] | None = None, train_only: tuple[str, ...] | None = None,
                eval_every: int | None = None, checkpoints: tuple[int, ...] = (),
                checkpoint: GroupCheckpoint | None = None, block_steps: int = DEFAULT_BLOCK_STEPS) -> list[RunResult]:
    """Train runs with one shape key together. `progress` (a tqdm) is advanced by run-steps; the loss curve
    has a point every `log_every` steps (None: `LOG_EVERY` for the runs).

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

    `block_steps`: steps between host reads (see the module docstring); the results do not depend on it.
    `checkpoint` (geofact.training.resume) makes the group resumable: it starts from the state written
    there, if any, writes its state every `checkpoint.every_s` seconds at a block boundary, and past
    the deadline of a time budget writes it and raises `BudgetSpent`. The results are those of an
    uninterrupted group; `seconds` adds up the training time behind them.
    """
    if eval_every is not None and (not isinstance(eval_every, int) or eval_every < 1):
        raise ValueError(f"eval_every must be an integer >= 1 (or None), got {eval_every!r}")
    if not isinstance(block_steps, int) or block_steps < 1:
        raise ValueError(f"block_steps must be an integer >= 1, got {block_steps!r}")
    device = start_group(configs, device, "train_group")
    log_every = LOG_EVERY[configs[0].read_past_stop or configs[0].keep_tail is not None] if log_every is None else log_every
    keep = set(check_checkpoints(checkpoints, configs[0].max_steps))
    max_steps = configs[0].max_steps
    group = FactGroup(configs, device, dtype, init, train_only)
    logs = [RunLog(steps=max_steps) for _ in configs]
    measure = evaluate or eval_every is not None

    def train(steps: range) -> None:
        block = train_block(group, steps, keep, eval_every)
        stopped = read_block(block, group, logs, log_every, keep)
        finish(group, logs, stopped, block.at_stop, measure, eval_every is not None)
        if group.past_stop:  # every run goes on to the end of its budget
            if progress is not None:
                progress.update(len(group.alive) * len(steps))
            return
        if progress is not None:
            progress.update(sum(min(logs[m].steps, steps.stop) - steps.start for m in group.alive))
        if len(stopped) == len(group.alive):
            group.alive = []  # every run has stopped: nothing reads the stack again
        elif stopped:  # stopped runs leave the stack, so the runs that go on pay nothing for them
            group.keep([i for i in range(len(group.alive)) if i not in stopped])

    elapsed = train_in_blocks(group, max_steps, block_steps, train, checkpoint,
                              lambda step, seconds: group_state(group, logs, step, seconds),
                              lambda state: resume_group(group, logs, state))
    past = dict(zip(group.alive, past_stop_results(group, logs, measure))) if group.past_stop else {}
    running = [i for i, m in enumerate(group.alive) if not logs[m].stopped]
    finish(group, logs, running, group.update.stack.flat, measure, eval_every is not None)
    seconds = elapsed()
    step = step_name(group.precision, group.by_hand)
    return [RunResult(c, log.steps, log.last_loss, log.accuracy, log.steps < c.max_steps, log.curve, log.acc_curve,
                      seconds, log.final, log.kept, log.kept_losses, *past.get(m, (None, {})), gave_up=log.gave_up,
                      step=step)
            for m, (c, log) in enumerate(zip(configs, logs))]


def step_name(precision: str, by_hand: bool) -> str:
    """The step a group trained with, as its runs' records name it: the module whose backward is written out
    (geofact.training.step, or step_bf16 under bf16), or "autograd" (under autocast for bf16)."""
    return ("geofact.training.step_bf16" if precision == "bf16" else "geofact.training.step") if by_hand else "autograd"
