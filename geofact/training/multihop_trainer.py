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

import time
from dataclasses import dataclass, field

import torch
from torch.nn import functional as F

from geofact.training.config import MultiHopConfig
from geofact.training.model import causal_hidden, head, hidden
from geofact.training.multihop import BatchSampler, _pad, query_sets, sequences, walk
from geofact.training.resume import GroupCheckpoint, GroupState, restore_stack, stack_state
from geofact.training.stack import StackedUpdates, run_weights, stack_params, start_group

EVAL_LOGITS = {"cpu": 2**24, "other": 2**28}  # logit entries per eval chunk (runs x queries x N)


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


def target_logits(p: dict[str, torch.Tensor], tokens: torch.Tensor, n_targets: int) -> torch.Tensor:
    """Logits (M, B n_targets, N) at the last n_targets positions of tokens (M, B, L), position-minor."""
    if n_targets == 1:
        return head(p, hidden(p, tokens))
    return head(p, causal_hidden(p, tokens)[:, :, -n_targets:].flatten(1, 2))


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


def train_multihop(configs: list[MultiHopConfig], device: str | torch.device = "cpu", progress=None,
                   dtype: torch.dtype = torch.float32, checkpoint: GroupCheckpoint | None = None) -> list[MultiHopResult]:
    """Train runs with one MultiHopConfig.shape_key() together; `progress` (a tqdm) advances by run-steps.

    `checkpoint` makes the group resumable, as in `trainer.train_group`: its state is written at an
    accuracy check every `checkpoint.every_s` seconds (and past a time budget's deadline, which then
    raises `BudgetSpent`), and a group that finds a state continues from it to the same results."""
    device = start_group(configs, device, "train_multihop")
    start = time.perf_counter()
    first = configs[0]
    M, N, B, T = len(configs), first.N, first.batch_size, first.n_targets
    sets = [query_sets(c) for c in configs]
    tables = _pad([torch.as_tensor(s.task.bijections) for s in sets], device)  # (M, R_max, N)
    eval_queries = _pad([s.eval for s in sets], device)  # (M, E_max, k + 1)
    eval_counts = torch.tensor([len(s.eval) for s in sets], device=device)
    chunk = max(1, EVAL_LOGITS["cpu" if device.type == "cpu" else "other"] // (M * N))
    sample = BatchSampler(configs, sets, device)
    update = StackedUpdates(stack_params(configs, dtype), configs, device)
    params = update.params

    alive = list(range(M))  # the runs still in the stack: stack position i holds run alive[i]
    steps, reasons = [first.max_steps] * M, [None] * M
    last_loss, streak = [float("nan")] * M, [0] * M
    final: list = [None] * M
    weights: list = [None] * M  # run -> weights at its stop
    loss_curves = [[] for _ in range(M)]
    acc_curves = [[] for _ in range(M)]
    first_step, seconds_before = 0, 0.0
    state = checkpoint.load() if checkpoint is not None else None
    if state is not None:  # continue where the group was checkpointed: the same stack, bit for bit
        first_step, seconds_before, alive = state.step, state.seconds, list(state.alive)
        if len(alive) < M:
            rows = torch.tensor(alive, device=device)
            params = update.keep(alive)
            tables, eval_queries, eval_counts = tables[rows], eval_queries[rows], eval_counts[rows]
            sample.keep(alive)
        restore_stack(update, state.tensors)
        book = state.meta
        steps, reasons, last_loss, streak, final = book["steps"], book["reasons"], book["last_loss"], book["streak"], book["final"]
        loss_curves = [[(int(t), x) for t, x in c] for c in book["loss_curves"]]
        acc_curves = [[(int(t), x) for t, x in c] for c in book["acc_curves"]]
        for name, w in state.weights.items():  # "final/m": the weights of a run that stopped
            weights[int(name.split("/")[1])] = w

    def group_state(step: int) -> GroupState:
        return GroupState(
            step=step, alive=list(alive), tensors=stack_state(update), seconds=seconds_before + time.perf_counter() - start,
            meta={"steps": steps, "reasons": reasons, "last_loss": last_loss, "streak": streak, "final": final,
                  "loss_curves": loss_curves, "acc_curves": acc_curves},
            weights={f"final/{m}": w for m, w in enumerate(weights) if w is not None})

    for step in range(first_step, first.max_steps + 1):
        if checkpoint is not None and step % first.check_every == 0 and step > first_step and checkpoint.due():
            checkpoint.save_or_stop(group_state(step), first.max_steps, M)  # before this step's accuracy check, made on resume
        stopped: list[int] = []  # stack positions of the runs that stop at this step

        def stop(i: int, reason: str) -> None:
            m = alive[i]
            steps[m], reasons[m] = step, reason
            weights[m] = run_weights(params, i, configs[m])
            stopped.append(i)

        check = step % first.check_every == 0 or step == first.max_steps
        if check:
            acc = evaluate({n: v.detach() for n, v in params.items()}, tables, eval_queries, eval_counts,
                           first.cot, chunk).cpu()
            for i, m in enumerate(alive):
                final[m] = acc[i].tolist()
                acc_curves[m].append((step, final[m][-1]))
                if final[m][-1] >= first.target_accuracy:
                    stop(i, "accuracy")
        if step == first.max_steps or len(stopped) == len(alive):
            break
        queries = sample(step)  # (M', B, k + 1)
        tokens, targets = sequences(walk(tables, queries).flatten(0, 1), queries[..., 1:].flatten(0, 1), N, first.cot)
        targets = targets.view(len(alive), B, -1)[:, :, -T:]  # (M', B, T): every later position carries a target
        logits = target_logits(params, tokens.view(len(alive), B, -1), T)  # (M', B T, N)
        losses = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none").view(len(alive), B * T).mean(1)
        loss_cpu = losses.detach().cpu().tolist()
        for i, m in enumerate(alive):
            if i in stopped:
                continue
            last_loss[m] = loss_cpu[i]
            if check:
                loss_curves[m].append((step, loss_cpu[i]))
                streak[m] = streak[m] + 1 if loss_cpu[i] < first.loss_threshold else 0
                if streak[m] >= first.patience:
                    stop(i, "loss")
        if len(stopped) == len(alive):
            break
        active = torch.ones(len(alive), dtype=torch.bool)
        active[stopped] = False
        going = torch.nonzero(active).flatten().tolist()
        update(update.gradients(losses))
        if stopped:  # a stopped run leaves the stack, so the runs that go on pay nothing for it
            rows = torch.tensor(going, device=device)
            params = update.keep(going)
            tables, eval_queries, eval_counts = tables[rows], eval_queries[rows], eval_counts[rows]
            sample.keep(going)
            alive = [alive[i] for i in going]
        if progress is not None:
            progress.update(len(alive))
    for i, m in enumerate(alive):
        if weights[m] is None:  # trained to max_steps
            weights[m] = run_weights(params, i, configs[m])
    seconds = seconds_before + time.perf_counter() - start
    results = []
    for m, (c, s) in enumerate(zip(configs, sets)):
        results.append(MultiHopResult(c, steps[m], last_loss[m], final[m][-1], final[m] if c.cot else None,
                                      reasons[m], len(s.eval), None if s.pool is None else len(s.pool),
                                      loss_curves[m], acc_curves[m], seconds, weights[m]))
    return results
