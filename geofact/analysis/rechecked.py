"""Predictions decided in TF32 where its rounding cannot change them, and in float32 where it might.

An analysis often asks of a hidden state only whether the model's prediction from it is a given target (an
accuracy; whether an edit was followed, geofact.analysis.interventions). On CUDA (geofact.fast_paths) the logits go
through TF32 matmuls, and a row is decided there when the gap that decides it (the target's lead over the runner-up
where the target leads, else how far the target lies below the lead) exceeds `CERTAIN_MARGIN` of the row's largest
|logit|; the others are predicted again in float32 (`rechecked_answered`; one read of how many a call has), so the
answer is float32's wherever TF32's error stays under that margin. Under that bound float32's answer is among the
row's columns within the margin of its largest TF32 logit, so a rechecked row's float32 logits are computed on its
`CANDIDATES` largest columns alone (its MLP block once, then a dot product a column; the row whole again where all
of them are that close).

Emulated on the CPU (matmul inputs rounded to TF32's 10-bit mantissa: `tf32_rounded`, `emulated_fast_logits`), over
ten laptop-profile models TF32 moved a logit by at most 0.31% of the row's largest |logit| and changed 0-0.3% of
the argmaxes, none of a margin above 0.12% of it. What the rule needs is a bound on the error of a difference of
two logits (an answer flips, and a column leaves the candidates, only when that is past the margin): at most twice
0.31%, so the 1% margin is 1.6 times the largest error seen (three times a single logit's), an empirical bound, not
a proof. At ties within a few ulps float32 has no one answer (its matmuls round differently at other batch sizes,
and the candidates' dot products differently from the whole matmul): on states bisected to such ties the recheck
and `model.predict` disagreed on a fifth of them; on 640,000 rows of trained and random models, on none.

Until 2026-11-30 every row near a tie of its two largest logits was rechecked, whatever its target: 4-18% of a
rank sweep's edited rows on the laptop profile's models (46% at d = 4). Near a tie that decides the row's answer:
0.65% of a sweep's rows and 1.1% of an accuracy's, over 400 of those states (bench/bench_recheck_share.py, which
also checks that every answer is float32's; geofact.ops.costs.UNSURE_SHARE_SEEN).
"""

from __future__ import annotations

from typing import Protocol

import torch
from torch.nn import functional as F

from geofact.analysis import fused_decide
from geofact.host import to_host
from geofact.precision import computing_in
from geofact.training.model import rms


class Model(Protocol):
    """What these functions read of a geofact.analysis.trained.TrainedModel (which imports this module, so it is
    described here, not imported)."""

    weights: dict[str, torch.Tensor]

    @property
    def device(self) -> torch.device: ...

    def logits(self, h: torch.Tensor) -> torch.Tensor: ...

    def final_states(self, h: torch.Tensor) -> torch.Tensor: ...

    def predict(self, h: torch.Tensor) -> torch.Tensor: ...

    def attribute_vectors(self, target: str = "unembedding") -> torch.Tensor: ...


CERTAIN_MARGIN = 0.01  # a row is certain when its deciding gap exceeds this share of its largest |logit|
CANDIDATES = 8  # columns a rechecked row's float32 logits are computed on: its largest TF32 ones (`rechecked_answered`)


def tf32_rounded(x: torch.Tensor) -> torch.Tensor:
    """float32 values rounded to TF32's 10-bit mantissa (to nearest, ties away from zero), as its matmuls read them;
    NaN and infinity as they are (a NaN's payload could carry into the sign)."""
    rounded = ((x.contiguous().view(torch.int32) + 0x1000) & ~0x1FFF).view(torch.float32)
    return torch.where(torch.isfinite(x), rounded, x)


def emulated_fast_logits(model: Model, states: torch.Tensor) -> torch.Tensor:
    """`fast_logits` as CUDA's TF32 computes them, on any device: every matmul's inputs `tf32_rounded` (the products
    and sums in float32, as TF32's tensor cores keep them). What the CPU tests and bench/bench_recheck_share.py put
    in place of `fast_logits`."""
    p = {k: v[None] for k, v in model.weights.items()}
    x = rms(states[None], p["g_mlp"])
    z = F.gelu(torch.baddbmm(p["b_1"][:, None], tf32_rounded(x), tf32_rounded(p["W_1"])))
    h2 = states[None] + torch.baddbmm(p["b_2"][:, None], tf32_rounded(z), tf32_rounded(p["W_2"]))
    return torch.bmm(tf32_rounded(rms(h2, p["g_final"])), tf32_rounded(p["E_out"]))[0]


def fast_logits(model: Model, states: torch.Tensor) -> torch.Tensor:
    """Logits (rows, N) of hidden states (rows, d) through CUDA's TF32 matmuls."""
    with computing_in("tf32", model.device):
        return model.logits(states)


def decision(top1: torch.Tensor, top2: torch.Tensor, index: torch.Tensor, low: torch.Tensor, picked: torch.Tensor,
             targets: torch.Tensor, bad: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """From five numbers of each row's logits (rows,): the largest, the second largest, where the largest is, the
    smallest, and the target's; and targets (rows,): whether each row's argmax is its target, whether the gap that
    decides that is within CERTAIN_MARGIN of the row's largest |logit| (so float32 must decide it), and that margin.
    The largest's column is the argmax wherever the row is decided (a tie at the top is no gap), and the largest
    |logit| is the larger of |largest| and |smallest|. `bad`: rows with a NaN or infinite logit, unsure too (whole
    logits need no such flag: a NaN sorts largest, and any comparison with NaN is false)."""
    margin = CERTAIN_MARGIN * torch.maximum(top1.abs(), low.abs())
    hit = index == targets
    gap = torch.where(hit, top1 - top2, top1 - picked)
    unsure = ~(gap > margin)
    return hit, unsure if bad is None else unsure | bad, margin


def decided(logits: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`decision` from whole logits (rows, N): two passes over them, their two largest and their smallest (until
    2026-11-30 five: |logits| written and read, its maximum, the argmax apart; at the paper's N = 4096 a rank sweep's
    logits are 113 GB a state at R = 16). geofact.analysis.fused_decide computes the same without writing them."""
    top, index = logits.topk(2, -1)  # (rows, 2)
    picked = logits.gather(-1, targets[:, None])[:, 0]
    return decision(top[:, 0], top[:, 1], index[:, 0], logits.amin(-1), picked, targets)


def rechecked_answered(model: Model, h: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Whether float32's prediction from each hidden state of h (..., d) is its target (...), through `fast_logits`:
    a row is decided in TF32 where the gap that decides it exceeds CERTAIN_MARGIN of its largest |logit| (its target's
    lead over the runner-up where the target leads, else how far the target lies below the lead), and predicted again
    in float32 where it does not (how many: one read of the device).

    Under the margin's bound (on a difference of two logits) float32's answer is among the columns whose TF32 logit
    is within CERTAIN_MARGIN of the row's largest, so a rechecked row's float32 logits are those of its CANDIDATES largest TF32 columns
    (its final state once, then a dot product a column, not the N-way unembedding); a row whose candidates are all
    that close (it may have more), or whose logits have no largest (NaN, infinite), is predicted whole again (the
    module docstring says how many rows that is)."""
    states, targets = h.reshape(-1, h.shape[-1]), targets.reshape(-1)  # (rows, d), (rows,)
    logits = None  # (rows, N), where the decision reads whole logits
    if fused_decide.used(model.device, states.shape[-1]):
        with computing_in("tf32", model.device):
            *numbers, bad = fused_decide.summary(model.final_states(states), model.weights["E_out"], targets)
        hit, unsure, margin = decision(*numbers, targets, bad)
    else:
        logits = fast_logits(model, states)
        hit, unsure, margin = decided(logits, targets)
    (count,) = to_host(unsure.sum())
    if not count:
        return hit.view(h.shape[:-1])
    rows = unsure.float().topk(int(count)).indices  # (u,)
    kept = fast_logits(model, states[rows]) if logits is None else logits[rows]  # (u, N): the kernel's made again
    fast, columns = kept.topk(min(CANDIDATES, kept.shape[-1]), -1)  # (u, C), largest first
    near = fast >= fast[:, :1] - margin[rows, None]  # (u, C): within the margin of the row's largest
    with computing_in("fp32", model.device):
        final = model.final_states(states[rows])  # (u, d)
        exact = torch.bmm(model.attribute_vectors("unembedding")[columns], final[:, :, None])[..., 0]  # (u, C)
    exact = exact.masked_fill(~near, float("-inf"))
    best = exact.amax(-1, keepdim=True)
    answer = torch.where(exact == best, columns, kept.shape[-1]).amin(-1)  # the first of equal maxima, as argmax
    hit[rows] = answer == targets[rows]
    # (u,): more candidates than CANDIDATES may be near, or no largest in TF32 or in float32
    whole = near[:, -1] | ~near[:, 0] | ~torch.isfinite(best[:, 0])
    (crowded,) = to_host(whole.sum())
    if crowded:
        again = rows[whole.float().topk(int(crowded)).indices]
        with computing_in("fp32", model.device):
            hit[again] = model.predict(states[again]) == targets[again]
    return hit.view(h.shape[:-1])
