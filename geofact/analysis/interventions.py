"""Causal interventions (Section 5.1, Appendix B.3 "Causal interventions").

For a subject x and relation r, swap the attribute g_r(x) for another y' by the minimum-norm change
of the hidden state that moves the relation-r readout by Delta a = a_{y'} - a_{g_r(x)}:

    delta = Delta a  W_r^+          (W_r: the readout map of relation r fitted on h; W_r^+ its rank-k pseudoinverse)

The change represents an edit of the subject, so it is added to the hidden state of every relation's
query about x; the model's remaining computation (MLP, unembedding) runs on the edited states.

    A = fraction of edits after which the prediction for r is y'          (the model follows the swap)
    C = fraction of (edit, r' != r) after which the prediction for r' is unchanged   (the others stay)
    selectivity = sqrt(A C)

The rank k of the pseudoinverse is swept: small singular values of W_r make the full pseudoinverse
amplify directions the readout barely uses. The sweep runs on the model's device and its counts are
read back once, for every rank together.

Each rank predicts the answers of R x R x n edited states (every relation's query on every edited
subject) through the MLP and the N-way unembedding, as many ranks a call as `PREDICT_LOGITS` allows (it bounds
a call's logits; at 2^30 on a GPU a call holds about 13 GB at its largest, N = 4096, d = 768, R = 16: the
logits, their absolute values, the MLP's hidden states): at the paper's scale nearly all of a mechanism page's analysis time (1.57 s a state at d = 512 on the
H200 lease, float32, one call per rank and relation). On CUDA (`FAST_DEVICES`) those predictions go through TF32
matmuls, and every row whose top-two margin is within `CERTAIN_MARGIN` of the row's largest |logit| is predicted
again in float32 (`rechecked_predict`; one read of how many a call has), so the sweep's answer is float32's
wherever TF32's error stays under that margin. Under that bound float32's answer is among the row's columns within
the margin of its largest TF32 logit, so a rechecked row's float32 logits are computed on its `CANDIDATES` largest
columns alone (its MLP block once, then a dot product a column; the row whole again where all of them are that
close). Emulated on the CPU (matmul inputs rounded to TF32's 10-bit mantissa, tests/analysis/test_interventions.py),
over ten laptop-profile models TF32 moved a logit by at most 0.31% of the row's largest |logit| and changed 0-0.3%
of the argmaxes, none of a margin above 0.12% of it. What the rule needs is a bound on the error of a difference of
two logits (an argmax flips, and a column leaves the candidates, only when that is past the margin): at most twice
0.31%, so the 1% margin is 1.6 times the largest error seen (three times a single logit's), an empirical bound, not
a proof. At ties within a few ulps float32 has no one answer (its matmuls round differently at other batch sizes,
and the candidates' dot products differently from the whole matmul): on states bisected to such ties the recheck
and `model.predict` disagreed on a fifth of them; on 640,000 rows of trained and random models, on none. On twelve laptop-profile models
(N = 256 and 512, d = 4 to 49) 6-16% of a state's edited rows were that close to a tie at d >= 8 (46% at d = 4),
up to 30% in one call (`UNSURE_SHARE_SEEN`, what the plan prices the recheck at); until 2026-11-29 a fixed quarter
of each call's rows was rechecked and a state with more fell back to a float32 sweep.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from geofact.analysis.readout import linear_readout, split_subjects
from geofact.analysis.trained import Target, TrainedModel
from geofact.host import on_host, to_host
from geofact.precision import computing_in

FAST_DEVICES = ("cuda",)  # where the sweep predicts through TF32 matmuls, rechecked (module docstring)
CERTAIN_MARGIN = 0.01  # a row is certain when its top-two margin exceeds this share of its largest |logit|
UNSURE_SHARE_SEEN = 0.16  # the largest share of a state's edited rows within CERTAIN_MARGIN seen at d >= 8 (docstring;
# a single call's share reached 0.30, and a d = 4 state's 0.46: cheap states, whose underpricing costs little)
CANDIDATES = 8  # columns a rechecked row's float32 logits are computed on: its largest TF32 ones (`rechecked_predict`)
PREDICT_LOGITS = {"cpu": 2**24, "other": 2**30}  # logits a prediction call holds at once, by device kind (4 GiB of float32)


def truncated_pinv(W: torch.Tensor, k: int) -> torch.Tensor:
    """Moore-Penrose pseudoinverse of W (d, m) from its top-k singular triplets: (m, d)."""
    U, S, Vh = torch.linalg.svd(W, full_matrices=False)
    if not 1 <= k <= len(S):
        raise ValueError(f"k must be in [1, {len(S)}], got {k}")
    return Vh[:k].T @ torch.diag(1.0 / S[:k]) @ U[:, :k].T


@dataclass(frozen=True)
class Selectivity:
    k: int
    follows: float  # A
    stays: float  # C

    @property
    def score(self) -> float:
        return (self.follows * self.stays) ** 0.5


def intervene(hidden: torch.Tensor, answers: torch.Tensor, predict: Callable[[torch.Tensor], torch.Tensor],
              maps: list[torch.Tensor], vectors: torch.Tensor, subjects: torch.Tensor, new_answers: torch.Tensor,
              ks: list[int], rows: int = 1) -> list[Selectivity]:
    """Edit each (subject, relation) in `subjects` (n,) x every relation to `new_answers` (n, R), at each rank in ks.

    hidden (R, N, d): h(x, r); answers (R, N): g_r(x); predict maps hidden states (..., R, n, d) to predicted ids
    (..., R, n), relation r's queries at index r of the relation axis (a model's `predict` reads only the states);
    maps[r] (d, m): the readout W_r; vectors (N, m): a_y. Each W_r is decomposed once for all ranks; each rank's
    edits of every relation are made in one batched matmul, and as many ranks as make at most `rows` edited states
    (at least one rank) are predicted in one call. `subjects` and `new_answers` may be host data: they are moved to
    the device of `hidden`, where the counts stay until one read at the end.
    """
    R, n, device = hidden.shape[0], len(subjects), hidden.device
    subjects, new_answers = subjects.to(device), new_answers.to(device)
    h = hidden[:, subjects]  # (R, n, d)
    original = answers[:, subjects]  # (R, n)
    U, S, Vh = torch.linalg.svd(torch.stack(maps), full_matrices=False)  # W_r = U_r S_r Vh_r: (R, d, q), (R, q), (R, q, m)
    if not all(1 <= k <= S.shape[-1] for k in ks):
        raise ValueError(f"ks must be ranks in [1, {S.shape[-1]}] (the readouts' singular values), got {ks}")
    shifts = vectors[new_answers.T] - vectors[original]  # Delta a, (R, n, m)
    # Delta a W_r^+ at rank k = (Delta a Vh_r^T / S_r)[:k] U_r[:k]^T: the coordinates once, a matmul a rank
    coordinates = torch.bmm(shifts, Vh.transpose(1, 2)) / S[:, None, :]  # (R, n, q)
    edited = torch.arange(R, device=device)
    per_call = ranks_per_call(rows, R * R * n)
    follows, stays = [], []  # per block of ranks: counts (ranks,) on the device
    for start in range(0, len(ks), per_call):
        block = ks[start : start + per_call]
        deltas = torch.stack([torch.bmm(coordinates[:, :, :k], U[:, :, :k].transpose(1, 2)) for k in block])  # (ranks, R edited, n, d)
        predicted = predict(h[None, None] + deltas[:, :, None])  # (ranks, R edited, R, n): every relation's query on the edited subject
        follows.append((predicted[:, edited, edited] == new_answers.T).sum((1, 2)))  # the edited relation follows the swap
        unchanged = predicted == original  # (ranks, R edited, R, n)
        stays.append(unchanged.sum((1, 2, 3)) - unchanged[:, edited, edited].sum((1, 2)))  # the other relations' answers unchanged
    follow_counts, stay_counts = to_host(torch.cat(follows), torch.cat(stays))
    stays_total = R * (R - 1) * n  # every edit, every other relation
    return [Selectivity(k, int(f) / (R * n), int(s) / stays_total if stays_total else 1.0)
            for k, f, s in zip(ks, follow_counts, stay_counts)]


def fast_logits(model: TrainedModel, states: torch.Tensor) -> torch.Tensor:
    """Logits (rows, N) of hidden states (rows, d) through CUDA's TF32 matmuls."""
    with computing_in("tf32", model.device):
        return model.logits(states)


def rechecked_predict(model: TrainedModel, h: torch.Tensor) -> torch.Tensor:
    """Predicted ids (...) of hidden states h (..., d) through `fast_logits`, every row whose top-two margin is
    within CERTAIN_MARGIN of its largest |logit| predicted again in float32 (how many: one read of the device).

    Under the margin's bound (on a difference of two logits) float32's answer is among the columns whose TF32 logit
    is within CERTAIN_MARGIN of the row's largest, so a rechecked row's float32 logits are those of its CANDIDATES largest TF32 columns
    (its final state once, then a dot product a column, not the N-way unembedding); a row whose candidates are all
    that close (it may have more), or whose logits have no largest (NaN, infinite), is predicted whole again."""
    states = h.reshape(-1, h.shape[-1])  # (rows, d)
    logits = fast_logits(model, states)  # (rows, N)
    top = logits.topk(2, -1).values
    peak = logits.abs().amax(-1)  # (rows,)
    margin = (top[:, 0] - top[:, 1]) / peak.clamp_min(torch.finfo(logits.dtype).tiny)  # (rows,)
    margin = margin.nan_to_num(0.0)  # a row with a NaN or an infinite logit is rechecked too (and sorts as any other)
    ids = logits.argmax(-1)
    (unsure,) = to_host((margin <= CERTAIN_MARGIN).sum())
    if not unsure:
        return ids.view(h.shape[:-1])
    rows = margin.topk(int(unsure), largest=False).indices  # the rows of the smallest margins: (u,)
    fast, columns = logits[rows].topk(min(CANDIDATES, logits.shape[-1]), -1)  # (u, C), largest first
    near = fast >= fast[:, :1] - CERTAIN_MARGIN * peak[rows, None]  # (u, C): within the margin of the row's largest
    with computing_in("fp32", model.device):
        final = model.final_states(states[rows])  # (u, d)
        exact = torch.bmm(model.attribute_vectors("unembedding")[columns], final[:, :, None])[..., 0]  # (u, C)
    exact = exact.masked_fill(~near, float("-inf"))
    best = exact.amax(-1, keepdim=True)
    ids[rows] = torch.where(exact == best, columns, logits.shape[-1]).amin(-1)  # the first of equal maxima, as argmax
    # (u,): more candidates than CANDIDATES may be near, or no largest in TF32 or in float32
    whole = near[:, -1] | ~near[:, 0] | ~torch.isfinite(best[:, 0])
    (crowded,) = to_host(whole.sum())
    if crowded:
        again = rows[whole.float().topk(int(crowded)).indices]
        with computing_in("fp32", model.device):
            ids[again] = model.predict(states[again])
    return ids.view(h.shape[:-1])


def call_rows(N: int, device_type: str) -> int:
    """Hidden states a prediction call takes on this type of device: PREDICT_LOGITS of its logits, N a state."""
    return max(1, PREDICT_LOGITS["cpu" if device_type == "cpu" else "other"] // N)


def ranks_per_call(rows: int, per_rank: int) -> int:
    """Ranks `intervene` predicts in one call of at most `rows` states, a rank's edits being `per_rank` states: at
    least one (a rank larger than a call is split by `in_calls`)."""
    return max(1, rows // per_rank)


def in_calls(predict: Callable[[torch.Tensor], torch.Tensor], rows: int) -> Callable[[torch.Tensor], torch.Tensor]:
    """`predict` over hidden states (..., d) in calls of at most `rows` states."""

    def chunked(h: torch.Tensor) -> torch.Tensor:
        states = h.reshape(-1, h.shape[-1])
        return torch.cat([predict(states[i : i + rows]) for i in range(0, len(states), rows)]).view(h.shape[:-1])

    return chunked


def random_swaps(answers: torch.Tensor, subjects: torch.Tensor, seed: int) -> torch.Tensor:
    """For each subject and relation a new attribute y' != g_r(x), uniform over the other N - 1: (n, R)."""
    R, N = answers.shape
    with on_host():  # drawn from the seed on the host, whatever the device of `answers`
        offset = torch.randint(1, N, (len(subjects), R), generator=torch.Generator().manual_seed(seed))
    return (answers[:, subjects.to(answers.device)].T + offset.to(answers.device)) % N


def selectivity_sweep(model: TrainedModel, ks: list[int], held_out: float = 0.2, alpha: float = 1e-3,
                      seed: int = 0, target: Target = "unembedding") -> list[Selectivity]:
    """Selectivity of rank-k edits of one trained run's hidden states, for each k in `ks`.

    The readout maps W_r are fitted from h to the `target` attribute vectors on the training subjects
    (geofact.analysis.readout, same split as `model_readouts`); every held-out subject gets one random
    swap per relation.
    """
    d = model.config.d
    if not ks or not all(1 <= k <= d for k in ks):
        raise ValueError(f"ks must be a non-empty list of ranks in [1, d={d}], got {ks}")
    train = split_subjects(model.config.N, held_out, seed)
    hidden, answers, vectors = model.hidden_states(), model.answers, model.attribute_vectors(target)
    maps = [W for W, _ in linear_readout(hidden, answers, vectors, train, alpha).maps]
    with on_host():
        subjects = torch.nonzero(~train).flatten()
    new = random_swaps(answers, subjects, seed)
    predict = (lambda states: rechecked_predict(model, states)) if model.device.type in FAST_DEVICES else model.predict
    rows = call_rows(model.config.N, model.device.type)
    return intervene(hidden, answers, in_calls(predict, rows), maps, vectors, subjects, new, ks, rows)


def rank_grid(d: int, points: int = 32) -> list[int]:
    """Ranks 1..d to sweep: every rank when d <= points, else about `points` evenly spaced, d included."""
    step = max(1, d // points)
    return sorted({*range(step, d + 1, step), 1, d})
