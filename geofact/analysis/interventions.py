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

Each (rank, relation) predicts the answers of R x n edited states through the MLP and the N-way
unembedding: at the paper's scale nearly all of a mechanism page's analysis time (1.57 s a state at
d = 512 on the H200 lease, float32). On CUDA (`FAST_DEVICES`) those predictions go through TF32 matmuls
and the least certain share of each call's rows (`RECHECKED_SHARE`, by the top-two margin over the
row's largest |logit|) are predicted again in float32. The sweep's answer is float32's wherever every
row left unchecked has a margin above `CERTAIN_MARGIN`, a condition computed on the device and read
with the counts; where it fails, the state is swept again in float32. Emulated on the CPU (matmul inputs
rounded to TF32's 10-bit mantissa, tests/analysis/test_interventions.py), over ten laptop-profile models
TF32 moved a logit by at most 0.31% of the row's largest |logit| and changed 0-0.3% of the argmaxes, none
of a margin above 0.12% of it: the 1% margin is three times the largest error seen, an empirical bound,
not a proof.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch

from geofact.analysis.readout import linear_readout, split_subjects
from geofact.analysis.trained import Target, TrainedModel
from geofact.host import on_host, to_host
from geofact.precision import computing_in

FAST_DEVICES = ("cuda",)  # where the sweep predicts through TF32 matmuls, rechecked (module docstring)
RECHECKED_SHARE = 0.25  # of a prediction call's rows, the least certain, predicted again in float32
CERTAIN_MARGIN = 0.01  # a row is certain when its top-two margin exceeds this share of its largest |logit|


def truncated_pinv(W: torch.Tensor, k: int) -> torch.Tensor:
    """Moore-Penrose pseudoinverse of W (d, m) from its top-k singular triplets: (m, d)."""
    return _pinv_from_svd(torch.linalg.svd(W, full_matrices=False), k)


def _pinv_from_svd(svd: tuple[torch.Tensor, torch.Tensor, torch.Tensor], k: int) -> torch.Tensor:
    U, S, Vh = svd
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
              ks: list[int]) -> list[Selectivity]:
    """`sweep` with a predictor that is always right (the module docstring's float32 one)."""
    return sweep(hidden, answers, lambda h: (predict(h), None), maps, vectors, subjects, new_answers, ks)[0]


def sweep(hidden: torch.Tensor, answers: torch.Tensor,
          predict: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor | None]], maps: list[torch.Tensor],
          vectors: torch.Tensor, subjects: torch.Tensor, new_answers: torch.Tensor,
          ks: list[int]) -> tuple[list[Selectivity], bool]:
    """Edit each (subject, relation) in `subjects` (n,) x every relation to `new_answers` (n, R), at each rank in ks.

    hidden (R, N, d): h(x, r); answers (R, N): g_r(x); predict maps hidden states (R, n, d) to
    predicted ids (R, n), relation by relation; maps[r] (d, m): the readout W_r; vectors (N, m): a_y.
    Each W_r is decomposed once for all ranks. `subjects` and `new_answers` may be host data: they are
    moved to the device of `hidden`, where the counts stay until one read at the end. `predict` also returns
    whether its predictions are certain (a 0-d bool tensor, or None: always), read with the counts; the second
    value returned says whether every call's were.
    """
    R, n, device = hidden.shape[0], len(subjects), hidden.device
    subjects, new_answers = subjects.to(device), new_answers.to(device)
    h = hidden[:, subjects]  # (R, n, d)
    original = answers[:, subjects]  # (R, n)
    svds = [torch.linalg.svd(W, full_matrices=False) for W in maps]
    shifts = [vectors[new_answers[:, r]] - vectors[original[r]] for r in range(R)]  # Delta a, (n, m) each
    follows, stays, certain = [], [], []  # per rank: a count on the device; per call where it says, its certainty
    for k in ks:
        followed, stayed = [], []
        for r in range(R):
            delta = shifts[r] @ _pinv_from_svd(svds[r], k)  # (n, d)
            predicted, sure = predict(h + delta[None])  # (R, n): every relation's query on the edited subject
            if sure is not None:
                certain.append(sure)
            followed.append((predicted[r] == new_answers[:, r]).sum())
            unchanged = predicted == original  # (R, n)
            stayed.append(unchanged.sum() - unchanged[r].sum())  # the other relations' answers left as they were
        follows.append(torch.stack(followed).sum())
        stays.append(torch.stack(stayed).sum())
    follow_counts, stay_counts, *sure = to_host(torch.stack(follows), torch.stack(stays),
                                                *([torch.stack(certain).all()] if certain else []))
    stays_total = R * (R - 1) * n  # every edit, every other relation
    return [Selectivity(k, int(f) / (R * n), int(s) / stays_total if stays_total else 1.0)
            for k, f, s in zip(ks, follow_counts, stay_counts)], bool(sure[0]) if sure else True


def fast_logits(model: TrainedModel, states: torch.Tensor) -> torch.Tensor:
    """Logits (rows, N) of hidden states (rows, d) through CUDA's TF32 matmuls."""
    with computing_in("tf32", model.device):
        return model.logits(states)


def rechecked_predict(model: TrainedModel, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Predicted ids (...) of hidden states h (..., d) through `fast_logits`, the RECHECKED_SHARE of rows with the
    smallest relative top-two margin predicted again in float32; and whether every other row's margin exceeds
    CERTAIN_MARGIN (a 0-d bool tensor: then the ids are float32's)."""
    states = h.reshape(-1, h.shape[-1])  # (rows, d)
    rows = states.shape[0]
    logits = fast_logits(model, states)  # (rows, N)
    top = logits.topk(2, -1).values
    margin = (top[:, 0] - top[:, 1]) / logits.abs().amax(-1).clamp_min(torch.finfo(logits.dtype).tiny)  # (rows,)
    budget = min(rows, math.ceil(RECHECKED_SHARE * rows))
    least = margin.topk(min(rows, budget + 1), largest=False)
    checked = least.indices[:budget]
    ids = logits.argmax(-1)
    with computing_in("fp32", model.device):
        ids[checked] = model.predict(states[checked])
    certain = least.values[budget] > CERTAIN_MARGIN if budget < rows else torch.ones((), dtype=torch.bool, device=h.device)
    return ids.view(h.shape[:-1]), certain


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
    if model.device.type in FAST_DEVICES:
        fast, certain = sweep(hidden, answers, lambda h: rechecked_predict(model, h), maps, vectors, subjects, new, ks)
        if certain:
            return fast
    return intervene(hidden, answers, model.predict, maps, vectors, subjects, new, ks)


def rank_grid(d: int, points: int = 32) -> list[int]:
    """Ranks 1..d to sweep: every rank when d <= points, else about `points` evenly spaced, d included."""
    step = max(1, d // points)
    return sorted({*range(step, d + 1, step), 1, d})
