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
subject) through the MLP and the N-way unembedding, or R x (1 + p) x n where C is estimated from p other relations
drawn per edit (`others_per_edit`; the same pairs at every rank), as many ranks a call as `PREDICT_LOGITS` allows
(it bounds a call's logits; at 2^30 on a GPU a call holds about 13 GB at its largest, N = 4096, d = 768, R = 16: the
logits, their absolute values, the MLP's hidden states): at the paper's scale nearly all of a mechanism page's analysis time (1.57 s a state at d = 512 on the
H200 lease, float32, one call per rank and relation). The counts ask of each edited state only whether its
prediction is its target (the swap for the edited relation, the unchanged answer for the others): `intervene`
asks the model's `TrainedModel.answered`, which on CUDA decides a row through TF32 matmuls where their rounding
cannot change the answer and in float32 where it might (geofact.analysis.rechecked). On twelve laptop-profile
models (N = 256 and 512, d = 4 to 49) 6-16% of a state's edited rows were within 1% of a tie of their two largest
logits at d >= 8 (46% at d = 4), up to 30% in one call, and were all rechecked until 2026-11-30; a tie that decides
the row's answer is rarer (geofact.ops.costs.UNSURE_SHARE_SEEN, what the plan prices the recheck at). Until 2026-11-29 a fixed
quarter of each call's rows was rechecked and a state with more fell back to a float32 sweep.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Callable

import torch

from geofact.analysis.readout import linear_readout, split_subjects
from geofact.analysis.trained import Target, TrainedModel, task_answers
from geofact.host import on_host, to_host

PREDICT_LOGITS = {"cpu": 2**24, "other": 2**30}  # logits a prediction call holds at once, by device kind (4 GiB of float32)
OTHERS_SEED = 1 << 20  # added to the split seed for `other_relations`' draw, apart from `random_swaps`' (the seed itself)


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


def checked_others_per_edit(value: object) -> int | None:
    """`others_per_edit` as a rank sweep takes it: None (every other relation) or an integer >= 1."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ValueError(f"others_per_edit must be None (every other relation) or an integer >= 1, got {value!r}")
    return value


def others_scored(R: int, others_per_edit: int | None) -> int:
    """How many other relations' answers a rank sweep checks after each edit: all R - 1, or `others_per_edit` of them
    where that is fewer."""
    return R - 1 if others_per_edit is None else min(checked_others_per_edit(others_per_edit), R - 1)


def other_relations(R: int, n: int, per_edit: int, seed: int) -> torch.Tensor:
    """For each edited relation e (R) and edited subject (n), `per_edit` distinct relations r' != e drawn uniformly
    from the other R - 1 (each with probability per_edit / (R - 1)), whose answers the edit must leave (C):
    (R, n, per_edit) ids, drawn on the host from `seed`."""
    if not 1 <= per_edit <= R - 1:
        raise ValueError(f"others_per_edit must be in [1, R - 1 = {R - 1}], got {per_edit}")
    with on_host():  # the mask's indices too: made elsewhere (a fake or default device) they would index nothing
        edited = torch.arange(R)
        keys = torch.rand(R, n, R, generator=torch.Generator().manual_seed(OTHERS_SEED + seed))
        keys[edited, :, edited] = 2.0  # past every uniform key: the edited relation is never drawn
        return keys.argsort(-1)[..., :per_edit]


def _check_others(others: torch.Tensor, R: int, n: int) -> None:
    """`others` must be (R, n, p) ids of p distinct relations other than the edited one per edit (checked where it is
    host data: on a device the check would read it back)."""
    if others.ndim != 3 or others.shape[:2] != (R, n) or not 1 <= others.shape[2] <= R - 1 \
            or others.dtype.is_floating_point or others.dtype == torch.bool:
        raise ValueError(f"others must be (R, n, p) = ({R}, {n}, 1 to {R - 1}) integer relation ids, got "
                         f"{tuple(others.shape)} {others.dtype}")
    if others.device.type != "cpu" or isinstance(others, torch._subclasses.FakeTensor):
        return
    with on_host():
        valid = bool(((others >= 0) & (others < R)).all()) and not bool((others == torch.arange(R)[:, None, None]).any()) \
            and not bool((others.sort(-1).values.diff(dim=-1) == 0).any())
    if not valid:
        raise ValueError("others must draw, per edit, distinct relations in [0, R) other than the edited one")


def intervene(hidden: torch.Tensor, answers: torch.Tensor, answered: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
              maps: list[torch.Tensor], vectors: torch.Tensor, subjects: torch.Tensor, new_answers: torch.Tensor,
              ks: list[int], rows: int = 1, others: torch.Tensor | None = None) -> list[Selectivity]:
    """Edit each (subject, relation) in `subjects` (n,) x every relation to `new_answers` (n, R), at each rank in ks.

    hidden (R, N, d): h(x, r); answers (R, N): g_r(x); answered(h, targets) says whether the model's prediction from
    each hidden state of h (..., S, n, d) is its target (..., S, n) (`by_argmax` of a model's `predict`): the edited
    relation's target is the swap y', every other relation's its unchanged answer, which is all the counts ask.
    With `others` None every relation's query is scored after each edit, relation r's at index r of the slot axis
    (S = R); with `others` (R, n, p) (`other_relations`), the edited relation's query and those of the p relations
    drawn for that edit (S = 1 + p): C estimated from R p n of its R (R - 1) n pairs, each pair drawn with the same
    probability p / (R - 1), so without bias (the best over ranks of such estimates sits a little higher), for which
    `answered` must read only the states, as a trained model's does (the state h(x, r) already holds r).
    maps[r] (d, m): the readout W_r; vectors (N, m): a_y. Each W_r is decomposed once for all ranks; each rank's
    edits of every relation are made in one batched matmul, and as many ranks as make at most `rows` edited states
    (at least one rank) are predicted in one call. `subjects`, `new_answers` and `others` may be host data: they are
    moved to the device of `hidden`, where the counts stay until one read at the end.
    """
    R, n, device = hidden.shape[0], len(subjects), hidden.device
    subjects, new_answers = subjects.to(device), new_answers.to(device)
    U, S, Vh = torch.linalg.svd(torch.stack(maps), full_matrices=False)  # W_r = U_r S_r Vh_r: (R, d, q), (R, q), (R, q, m)
    if not all(1 <= k <= S.shape[-1] for k in ks):
        raise ValueError(f"ks must be ranks in [1, {S.shape[-1]}] (the readouts' singular values), got {ks}")
    edited = torch.arange(R, device=device)
    if others is None:  # slot r is relation r, the edited relation's slot its own: every edit's states are the same
        h = hidden[:, subjects].expand(R, R, n, hidden.shape[-1])  # (R edited, S, n, d): the unedited scored states
        targets = answers[:, subjects].expand(R, R, n).clone()  # (R edited, S, n)
        own = edited  # (R edited,): the slot of the edited relation's own query
    else:
        _check_others(others, R, n)
        scored = torch.cat([edited[:, None, None].expand(R, 1, n), others.to(device).transpose(1, 2)], 1)  # (R, S, n)
        where = subjects[None, None].expand_as(scored)
        h, targets = hidden[scored, where], answers[scored, where]
        own = torch.zeros_like(edited)
    slots = h.shape[1]
    targets[edited, own] = new_answers.T  # every scored relation keeps its answer but the edited one: the swap
    shifts = vectors[new_answers.T] - vectors[answers[:, subjects]]  # Delta a, (R, n, m)
    # Delta a W_r^+ at rank k = (Delta a Vh_r^T / S_r)[:k] U_r[:k]^T: the coordinates once, a matmul a rank
    coordinates = torch.bmm(shifts, Vh.transpose(1, 2)) / S[:, None, :]  # (R, n, q)
    per_call = ranks_per_call(rows, R * slots * n)
    follows, stays = [], []  # per block of ranks: counts (ranks,) on the device
    for start in range(0, len(ks), per_call):
        block = ks[start : start + per_call]
        deltas = torch.stack([torch.bmm(coordinates[:, :, :k], U[:, :, :k].transpose(1, 2)) for k in block])  # (ranks, R edited, n, d)
        hit = answered(h[None] + deltas[:, :, None], targets.expand(len(block), R, slots, n))  # (ranks, R edited, S, n)
        followed = hit[:, edited, own].sum((1, 2))  # the edited relation follows the swap
        follows.append(followed)
        stays.append(hit.sum((1, 2, 3)) - followed)  # the other scored relations' answers unchanged
    follow_counts, stay_counts = to_host(torch.cat(follows), torch.cat(stays))
    stays_total = R * (slots - 1) * n  # every edit, every other scored relation
    return [Selectivity(k, int(f) / (R * n), int(s) / stays_total if stays_total else 1.0)
            for k, f, s in zip(ks, follow_counts, stay_counts)]


def by_argmax(predict: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """`intervene`'s `answered` from a predictor of ids (...) from hidden states (..., d)."""
    return lambda h, targets: predict(h) == targets


def call_rows(N: int, device_type: str) -> int:
    """Hidden states a prediction call takes on this type of device: PREDICT_LOGITS of its logits, N a state."""
    return max(1, PREDICT_LOGITS["cpu" if device_type == "cpu" else "other"] // N)


def ranks_per_call(rows: int, per_rank: int) -> int:
    """Ranks `intervene` predicts in one call of at most `rows` states, a rank's edits being `per_rank` states: at
    least one (a rank larger than a call is split by `in_calls`)."""
    return max(1, rows // per_rank)


def in_calls(answered: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], rows: int
             ) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """`answered` over hidden states (..., d) and their targets (...) in calls of at most `rows` states."""

    def chunked(h: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        states, flat = h.reshape(-1, h.shape[-1]), targets.reshape(-1)
        return torch.cat([answered(states[i : i + rows], flat[i : i + rows])
                          for i in range(0, len(states), rows)]).view(h.shape[:-1])

    return chunked


def random_swaps(answers: torch.Tensor, subjects: torch.Tensor, seed: int) -> torch.Tensor:
    """For each subject and relation a new attribute y' != g_r(x), uniform over the other N - 1: (n, R)."""
    R, N = answers.shape
    with on_host():  # drawn from the seed on the host, whatever the device of `answers`
        offset = torch.randint(1, N, (len(subjects), R), generator=torch.Generator().manual_seed(seed))
    return (answers[:, subjects.to(answers.device)].T + offset.to(answers.device)) % N


@lru_cache(maxsize=64)  # a run's states and both targets' sweeps share one draw, whatever order a grid's states come in
def edits(N: int, R: int, task_seed: int, held_out: float, seed: int, drawn: int
          ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """A rank sweep's edits of the task drawn from `task_seed` (geofact.analysis.trained.task_answers): the held-out
    subjects (n,) (`split_subjects`), a swap of each per relation (n, R) (`random_swaps`) and the `drawn` other
    relations each edit scores, (R, n, drawn) (`other_relations`; None where that is every other one), all drawn on
    the host from `seed`. They depend on these numbers alone, so each is drawn once for a run's states: 51 ms at the
    paper's N = 4096, R = 16 on a CPU, which every sweep paid until 2026-11-30 while a GPU lease's device waited. Real
    CPU tensors even under the tests' fake tensors (geofact.host.on_host); `intervene` only reads them."""
    with on_host():
        subjects = torch.nonzero(~split_subjects(N, held_out, seed)).flatten()
        new = random_swaps(task_answers(N, R, task_seed), subjects, seed)
        return subjects, new, None if drawn == R - 1 else other_relations(R, len(subjects), drawn, seed)


def selectivity_sweep(model: TrainedModel, ks: list[int], held_out: float = 0.2, alpha: float = 1e-3,
                      seed: int = 0, target: Target = "unembedding", others_per_edit: int | None = None
                      ) -> list[Selectivity]:
    """Selectivity of rank-k edits of one trained run's hidden states, for each k in `ks`.

    The readout maps W_r are fitted from h to the `target` attribute vectors on the training subjects
    (geofact.analysis.readout, same split as `model_readouts`); every held-out subject gets one random
    swap per relation. C is scored on every other relation's query (`others_per_edit` None, or at least R - 1), or
    on `others_per_edit` of them drawn per edit (`other_relations`, from `seed`): the same relations at every rank,
    so the ranks are compared on the same pairs.
    """
    d, R = model.config.d, model.config.R
    if not ks or not all(1 <= k <= d for k in ks):
        raise ValueError(f"ks must be a non-empty list of ranks in [1, d={d}], got {ks}")
    drawn = others_scored(R, others_per_edit)  # checked before any work
    train = split_subjects(model.config.N, held_out, seed)
    hidden, answers, vectors = model.hidden_states(), model.answers, model.attribute_vectors(target)
    maps = [W for W, _ in linear_readout(hidden, answers, vectors, train, alpha).maps]
    subjects, new, others = edits(model.config.N, R, model.config.bijection_seed, held_out, seed, drawn)
    rows = call_rows(model.config.N, model.device.type)
    return intervene(hidden, answers, in_calls(model.answered, rows), maps, vectors, subjects, new, ks, rows, others)


def rank_grid(d: int, points: int = 32) -> list[int]:
    """Ranks 1..d to sweep: every rank when d <= points, else about `points` evenly spaced, d included."""
    step = max(1, d // points)
    return sorted({*range(step, d + 1, step), 1, d})
