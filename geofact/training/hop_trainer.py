"""Train multi-hop runs as one stacked computation and evaluate them by greedy generation (Appendix C).

The recipe is `app::exp-multihop`'s: AdamW (lr 1e-2, weight decay 0.1), batch 1024, gradient clip 1,
up to 15,000 steps; every `check_every` steps a check evaluates the eval set and looks at the
training loss, and a run stops when its eval accuracy reaches `target_accuracy` or its loss has been
below `loss_threshold` at `patience` checks in a row.

Training is teacher-forced: with chain-of-thought the loss covers every hop s_1..s_k, each predicted
from the true path so far. Evaluation is not: `generate` feeds the model its own previous tokens,
so a wrong hop derails the rest of the path, as at inference.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch.nn import functional as F

from geofact.host import to_host
from geofact.training.config import MultiHopConfig
from geofact.training import hop_step
from geofact.training.graphs import GraphedStep
from geofact.training.model import causal_hidden, final_state, head, hidden
from geofact.precision import at_least_fp32, computing_in
from geofact.training.hop_queries import BatchSampler, _pad, query_sets, sequences, walk
from geofact.training.resume import GroupCheckpoint, GroupState, stack_state
from geofact.training.stack import StackedGroup, StackedUpdates, run_weights, stack_params, start_group, train_in_blocks
from geofact.training.step import unembed_cross_entropy

EVAL_LOGITS = {"cpu": 2**24, "other": 2**28}  # logit entries per eval chunk (runs x queries x N)
SAMPLE_KEYS = 2**24  # query tokens drawn at once by the batch sampler (bounds its memory)


@dataclass
class MultiHopResult:
    """What one multi-hop run produced; `params` are the trained weights (CPU), without relation padding."""

    config: MultiHopConfig
    steps: int  # optimiser steps taken
    final_loss: float  # training loss of the last batch
    accuracy: float  # final answer right, by greedy generation, over the eval set
    hop_accuracy: list[float] | None  # CoT: fraction of eval queries whose i-th generated token is s_i
    stop_reason: str | None  # "accuracy", "loss", or None when it ran max_steps
    eval_size: int  # eval queries (min(eval_queries, available))
    pool_size: int | None  # training pool (None: fresh queries every step)
    loss_curve: list[tuple[int, float]] = field(default_factory=list)  # (step, batch loss) at each check
    accuracy_curve: list[tuple[int, float]] = field(default_factory=list)  # (step, eval accuracy) at each check
    seconds: float = 0.0
    params: dict[str, torch.Tensor] = field(default_factory=dict, repr=False)

    @property
    def stopped_early(self) -> bool:
        return self.stop_reason is not None

    def record(self) -> dict:
        """The JSON-able outcome (geofact.training.sweep adds config, timing, weights file and provenance)."""
        return {"steps": self.steps, "final_loss": self.final_loss, "accuracy": self.accuracy,
                "hop_accuracy": self.hop_accuracy, "stopped_early": self.stopped_early,
                "stop_reason": self.stop_reason, "eval_size": self.eval_size, "pool_size": self.pool_size,
                "loss_curve": self.loss_curve, "accuracy_curve": self.accuracy_curve}


def target_states(p: dict[str, torch.Tensor], tokens: torch.Tensor, n_targets: int) -> torch.Tensor:
    """What the unembedding reads (M, B n_targets, d) at the last n_targets positions of tokens (M, B, L),
    position-minor."""
    states = hidden(p, tokens) if n_targets == 1 else causal_hidden(p, tokens, n_targets).flatten(1, 2)
    return final_state(p, states)


@torch.no_grad()
def generate(p: dict[str, torch.Tensor], queries: torch.Tensor, N: int, cot: bool) -> torch.Tensor:
    """Greedy outputs for queries (M, Q, k + 1) = (s_0, r_1..r_k): with CoT the k emitted tokens
    (M, Q, k), each fed back as the next input; without, the one answer (M, Q, 1)."""
    k = queries.shape[-1] - 1
    seq = torch.cat([queries[..., :1], N + queries[..., 1:]], dim=-1)  # the prompt s_0 r_1 .. r_k
    out = []
    for _ in range(k if cot else 1):
        out.append(head(p, hidden(p, seq)).argmax(-1))  # (M, Q)
        seq = torch.cat([seq, out[-1][..., None]], dim=-1)
    return torch.stack(out, dim=-1)


@torch.no_grad()
def evaluate(p: dict[str, torch.Tensor], tables: torch.Tensor, queries: torch.Tensor, counts: torch.Tensor,
             cot: bool, chunk: int) -> torch.Tensor:
    """Per-output accuracy (M, k) with CoT, (M, 1) without, of generation on each run's first
    counts[m] queries (M, E_max, k + 1); tables (M, R_max, N). The last column is the answer's."""
    N = tables.shape[-1]
    correct = None
    for start in range(0, queries.shape[1], chunk):
        q = queries[:, start : start + chunk]
        path = walk(tables, q)
        right = generate(p, q, N, cot) == (path[..., 1:] if cot else path[..., -1:])  # (M, c, outputs)
        valid = torch.arange(start, start + q.shape[1], device=q.device)[None, :] < counts[:, None]
        hits = (right & valid[..., None]).sum(1)
        correct = hits if correct is None else correct + hits
    return correct.double() / counts[:, None]


class QueryGroup(StackedGroup):
    """The multi-hop runs still training (geofact.training.stack.StackedGroup): stacked weights and
    optimiser, bijection tables, eval sets and batch sampler, and `previous`, each run's loss at the
    step before the next check (NaN before any step)."""

    def __init__(self, configs: list[MultiHopConfig], device: torch.device, dtype: torch.dtype) -> None:
        super().__init__(configs, device, StackedUpdates(stack_params(configs, dtype), configs, device))
        self.sets = [query_sets(c) for c in configs]
        self.tables = _pad([torch.as_tensor(s.task.bijections) for s in self.sets], device)  # (M, R_max, N)
        self.eval_queries = _pad([s.eval for s in self.sets], device)  # (M, E_max, k + 1)
        self.eval_counts = torch.tensor([len(s.eval) for s in self.sets], device=device)
        self.sample = BatchSampler(configs, self.sets, device)
        # the backward written out (geofact.training.hop_step) on its devices, in float32 matmuls; autograd for bf16
        self.by_hand = device.type in hop_step.DEVICES and configs[0].precision != "bf16"
        self.previous = torch.full((len(configs),), float("nan"), dtype=dtype, device=device)  # (M',)

    def _keep_rows(self, rows: torch.Tensor, positions: list[int]) -> None:
        self.tables, self.eval_queries, self.eval_counts = self.tables[rows], self.eval_queries[rows], self.eval_counts[rows]
        self.sample.keep(positions)

    def _make_step(self) -> HopStep:
        """One step between checks, for the stack as it is now."""
        return HopStep(self)

    def accuracy(self) -> torch.Tensor:
        """Each run's per-output accuracy (M', outputs) by greedy generation on its eval set, on the device."""
        first = self.configs[0]
        chunk = max(1, EVAL_LOGITS["cpu" if self.device.type == "cpu" else "other"] // (len(self.alive) * first.N))
        params = {n: v.detach() for n, v in self.update.params.items()}
        with computing_in(first.precision, self.device):
            return evaluate(params, self.tables, self.eval_queries, self.eval_counts, first.cot, chunk)

    def losses_and_grads(self, queries: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Each run's teacher-forced loss (M',) on its queries (M', B, k + 1), and the gradients of their sum;
        the loss in float32 whatever the precision policy."""
        first = self.configs[0]
        M, B, T = len(self.alive), first.batch_size, first.n_targets
        tokens, targets = sequences(walk(self.tables, queries).flatten(0, 1), queries[..., 1:].flatten(0, 1), first.N, first.cot)
        targets = targets.view(M, B, -1)[:, :, -T:]  # (M', B, T): every later position carries a target
        params = self.update.params
        with computing_in(first.precision, self.device):
            if self.by_hand:  # the gradients straight into the optimiser's buffer
                out, row_masks = self.update.grad_targets() or (None, None)
                return hop_step.hop_loss_and_grads(params, tokens.view(M, B, -1), targets, first.k, wanted=self.update.names,
                                          out=out, row_masks=row_masks)
            states = target_states(params, tokens.view(M, B, -1), T)  # (M', B T, d)
            if first.precision == "bf16":  # the loss from logits cast up from bf16
                logits = at_least_fp32(torch.bmm(states, params["E_out"]))  # (M', B T, N)
                losses = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none").view(M, B * T).mean(1)
            else:
                losses = unembed_cross_entropy(states, params["E_out"], targets.reshape(M, B * T))
            return losses.detach(), self.update.gradients(losses)


class HopStep:
    """One training step between checks on buffers that live as long as the stack: the queries come in
    through `queries`, the losses go out through `loss`. Pure device work on tensors allocated here,
    so that on CUDA it is captured and replayed as one graph (geofact.training.graphs)."""

    def __init__(self, group: QueryGroup) -> None:
        first, flat = group.configs[0], group.update.stack.flat
        M = flat.shape[0]
        self.group = group
        self.queries = torch.zeros(M, first.batch_size, first.k + 1, dtype=torch.long, device=flat.device)  # (M', B, k + 1)
        self.loss = torch.zeros(M, dtype=flat.dtype, device=flat.device)  # (M',)
        self.run = GraphedStep(self._body, flat.device)

    def _body(self) -> None:
        loss, grads = self.group.losses_and_grads(self.queries)
        self.loss.copy_(loss)
        self.group.update(grads)

    def __call__(self, queries: torch.Tensor) -> torch.Tensor:
        """One step on queries (M', B, k + 1); its losses (M',) (a buffer the next step overwrites)."""
        self.queries.copy_(queries)
        self.run()
        return self.loss


@dataclass
class HopLog:
    """One multi-hop run's outcome so far, on the host."""

    steps: int
    reason: str | None = None
    last_loss: float = float("nan")
    streak: int = 0
    final: list[float] | None = None  # per-output eval accuracy at the last check
    loss_curve: list[tuple[int, float]] = field(default_factory=list)
    acc_curve: list[tuple[int, float]] = field(default_factory=list)
    weights: dict[str, torch.Tensor] | None = None  # at its stop (or at max_steps)


def read_check(group: QueryGroup, logs: list[HopLog], step: int, accuracy: torch.Tensor, losses: torch.Tensor | None,
               previous: torch.Tensor) -> list[int]:
    """The check at `step`, on the host (one read): eval accuracy, the loss rule, each run's last loss.
    `losses` are this step's (None at max_steps, where no step follows), `previous` the step before's.
    Returns the stack positions of the runs that stop, after keeping their weights."""
    first = group.configs[0]
    acc, *rest = to_host(accuracy, previous, *([] if losses is None else [losses]))
    before, now = rest[0], (rest[1] if losses is not None else None)
    stopped = []
    for i, m in enumerate(group.alive):
        log = logs[m]
        log.final = acc[i].tolist()
        log.acc_curve.append((step, log.final[-1]))
        if log.final[-1] >= first.target_accuracy:
            log.reason, log.last_loss = "accuracy", float(before[i])
        elif now is None:
            log.last_loss = float(before[i])
        else:
            log.last_loss = float(now[i])
            log.loss_curve.append((step, log.last_loss))
            log.streak = log.streak + 1 if log.last_loss < first.loss_threshold else 0
            if log.streak >= first.patience:
                log.reason = "loss"
        if log.reason is not None:
            log.steps = step
            log.weights = run_weights(group.update.params, i, group.configs[m])
            stopped.append(i)
    return stopped


def hop_state(group: QueryGroup, logs: list[HopLog], step: int, seconds: float) -> GroupState:
    """The group's whole state at the start of `step` (a check, made on resume), to write and resume from."""
    meta = {"steps": [log.steps for log in logs], "reasons": [log.reason for log in logs],
            "last_loss": [log.last_loss for log in logs], "streak": [log.streak for log in logs],
            "final": [log.final for log in logs], "loss_curves": [log.loss_curve for log in logs],
            "acc_curves": [log.acc_curve for log in logs]}
    return GroupState(step=step, alive=list(group.alive), tensors=stack_state(group.update), seconds=seconds, meta=meta,
                      weights={f"final/{m}": log.weights for m, log in enumerate(logs) if log.weights is not None})


def resume_hops(group: QueryGroup, logs: list[HopLog], state: GroupState) -> None:
    """Put a written state back: the same stack, bit for bit, and the runs' logs so far."""
    group.restore(state)
    book = state.meta
    for m, log in enumerate(logs):
        log.steps, log.reason, log.last_loss = book["steps"][m], book["reasons"][m], book["last_loss"][m]
        log.streak, log.final = book["streak"][m], book["final"][m]
        log.loss_curve = [(int(t), x) for t, x in book["loss_curves"][m]]
        log.acc_curve = [(int(t), x) for t, x in book["acc_curves"][m]]
    for name, weights in state.weights.items():  # "final/m": the weights of a run that stopped
        logs[int(name.split("/")[1])].weights = weights
    group.previous = torch.tensor([logs[m].last_loss for m in group.alive], dtype=group.previous.dtype, device=group.device)


def train_block(group: QueryGroup, logs: list[HopLog], steps: range) -> None:
    """The check at steps.start and the steps up to the next check; the check's read is the block's only
    host read (besides the held-out sampler's redraws, when it draws). Runs that stop at the check
    leave the stack."""
    accuracy, previous = group.accuracy(), group.previous
    losses, grads = group.losses_and_grads(group.sample(range(steps.start, steps.start + 1))[:, 0])
    stopped = read_check(group, logs, steps.start, accuracy, losses, previous)
    going = [i for i in range(len(group.alive)) if i not in stopped]
    if not going:
        group.alive = []  # every run has stopped: nothing reads the stack again
        return
    group.update(grads)  # the stopping runs' weights were kept at the check, before this update
    if stopped:  # they leave the stack, so the runs that go on pay nothing for them
        group.keep(going)
        losses = losses[torch.tensor(going, dtype=torch.long, device=group.device)]
    group.previous = losses
    per_draw = max(1, SAMPLE_KEYS // (len(group.alive) * group.configs[0].batch_size * (group.configs[0].k + 1)))
    for start in range(steps.start + 1, steps.stop, per_draw):
        drawn = group.sample(range(start, min(start + per_draw, steps.stop)))  # (M', steps, B, k + 1)
        for queries in drawn.unbind(1):
            group.previous = group.step(queries)


def train_multihop(configs: list[MultiHopConfig], device: str | torch.device = "cpu", progress=None,
                   dtype: torch.dtype = torch.float32, checkpoint: GroupCheckpoint | None = None) -> list[MultiHopResult]:
    """Train runs with one MultiHopConfig.shape_key() together; `progress` (a tqdm) advances by run-steps.

    Training goes from check to check (every `check_every` steps): the check's accuracy and losses are
    the one host read of the block of steps that follows it, and the runs that stop there leave the stack.
    `checkpoint` makes the group resumable, as in `trainer.train_group`: its state is written at a
    check every `checkpoint.every_s` seconds (and past a time budget's deadline, which then raises
    `BudgetSpent`), and a group that finds a state continues from it to the same results."""
    device = start_group(configs, device, "train_multihop")
    first = configs[0]
    group = QueryGroup(configs, device, dtype)
    logs = [HopLog(steps=first.max_steps) for _ in configs]

    def train(steps: range) -> None:
        train_block(group, logs, steps)
        if progress is not None:
            progress.update(len(group.alive) * len(steps))

    elapsed = train_in_blocks(group, first.max_steps, first.check_every, train, checkpoint,
                              lambda step, seconds: hop_state(group, logs, step, seconds),
                              lambda state: resume_hops(group, logs, state))
    if group.alive:  # the last check, at max_steps: no step follows it
        read_check(group, logs, first.max_steps, group.accuracy(), None, group.previous)
    for i, m in enumerate(group.alive):
        if logs[m].weights is None:  # trained to max_steps
            logs[m].weights = run_weights(group.update.params, i, configs[m])
    seconds = elapsed()
    return [MultiHopResult(c, log.steps, log.last_loss, log.final[-1], log.final if c.cot else None, log.reason,
                           len(s.eval), None if s.pool is None else len(s.pool), log.loss_curve, log.acc_curve,
                           seconds, log.weights) for c, s, log in zip(configs, group.sets, logs)]
