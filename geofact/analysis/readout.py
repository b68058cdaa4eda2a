"""Linear readout (Section 5.1, Appendix B.3 "Linear readout"): per relation r a ridge map W_r with
features_x W_r ~ a_{g_r(x)}, fitted on training subjects and scored on held-out subjects by
classification: the prediction is the attribute whose vector is nearest (cosine) among all N.

The attribute vector a_y is, by default, the output unembedding of entity y (a column of E_out): the
direction the model's final state must point to for y to win the softmax. The paper does not say
which vector it is in a model with separate input and output embeddings, so `target="embedding"`
reads out the input embedding of y instead (geofact.analysis.trained.TARGETS). The features are the
subject's input embedding s_x, or the post-attention hidden state h(x, r) at the answer position.

With uniform attention h(x, r) = e_r + (rms(s_x) + rms(e_r)) diag(g) W_V W_O / 2: for a fixed r, an
affine function of the normalised s_x. An affine readout from h can therefore never beat one from
rms(s_x), and where W_V W_O has full rank the two coincide (up to the ridge penalty).
The map is affine (the intercept is not penalised): h(x, r) carries the relation's own embedding, a
constant offset for fixed r.

Everything runs on the device of the features; the subject splits are host data (boolean CPU masks),
and a readout's accuracy is read back once, when asked for (`Readout.mean`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import torch

from geofact.analysis.trained import Target, TrainedModel
from geofact.host import on_host, to_host


def ridge(X: torch.Tensor, Y: torch.Tensor, alpha: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Affine ridge regression: (W, b) minimising |X W + b - Y|^2 + alpha |W|^2. X (..., n, d), Y (..., n, k),
    any leading dims batched: W (..., d, k), b (..., k)."""
    if alpha < 0:
        raise ValueError(f"alpha must be >= 0, got {alpha}")
    x_mean, y_mean = X.mean(-2, keepdim=True), Y.mean(-2, keepdim=True)
    Xc, Yc = X - x_mean, Y - y_mean
    gram = Xc.mT @ Xc + alpha * torch.eye(X.shape[-1], dtype=X.dtype, device=X.device)  # (..., d, d)
    if alpha > 0:  # positive definite: LU, the same bit for bit from call to call (LAPACK's lstsq on a CPU is not:
        # 23 distinct results in 50 calls on one 16 x 16 system, 2026-11-29, which moved the rank sweeps at high ranks)
        W = torch.linalg.solve(gram, Xc.mT @ Yc)
    elif X.device.type == "cpu":  # LAPACK's pivoted QR: a singular gram (alpha = 0, n < d) still solves
        W = torch.linalg.lstsq(gram, Xc.mT @ Yc).solution
    else:  # a GPU's lstsq assumes full rank and returns data-dependent shapes
        W = torch.linalg.pinv(gram, hermitian=True) @ (Xc.mT @ Yc)
    return W, (y_mean - x_mean @ W).squeeze(-2)


def nearest(pred: torch.Tensor, vectors: torch.Tensor) -> torch.Tensor:
    """Index of the row of `vectors` (N, k) with the highest cosine to each row of pred (..., n, k)."""
    return (torch.nn.functional.normalize(pred, dim=-1) @ torch.nn.functional.normalize(vectors, dim=-1).T).argmax(-1)


@dataclass(frozen=True)
class Readout:
    accuracy: torch.Tensor  # (R,) held-out classification accuracy per relation (on the device)
    maps: list[tuple[torch.Tensor, torch.Tensor]]  # (W_r (d, k), b_r (k,)) per relation, fitted on training subjects

    @property
    def mean(self) -> float:
        """The mean over relations, read on the host."""
        return float(to_host(self.accuracy.mean())[0])


def split_subjects(N: int, held_out: float, seed: int) -> torch.Tensor:
    """Boolean (N,) mask of training subjects, on the host; a `held_out` fraction (at least one subject) is left out."""
    if not 0 < held_out < 1:
        raise ValueError(f"held_out must be in (0, 1), got {held_out}")
    n_test = max(1, round(held_out * N))
    if n_test >= N:
        raise ValueError(f"held_out={held_out} leaves no training subject at N={N}")
    with on_host():
        order = torch.randperm(N, generator=torch.Generator().manual_seed(seed))
        train = torch.ones(N, dtype=torch.bool)
        train[order[:n_test]] = False
    return train


def linear_readout(features: torch.Tensor, answers: torch.Tensor, vectors: torch.Tensor, train: torch.Tensor,
                   alpha: float = 1e-3, test: torch.Tensor | None = None) -> Readout:
    """Per-relation ridge readout scored on held-out subjects.

    features (R, N, d): features[r, x] is the input for subject x under relation r (the same s_x for
    every r, or h(x, r)); answers (R, N): g_r(x); vectors (N, k): the attribute vectors; train (N,)
    bool: the subjects to fit on; test (N,) bool: the subjects scored (default: all the others; none when
    only the maps are wanted). The masks are host data (CPU); the rest lives on the features' device.
    """
    R, N, _ = features.shape
    if answers.shape != (R, N) or train.shape != (N,):
        raise ValueError(f"answers must be (R, N) = {(R, N)} and train (N,), got {tuple(answers.shape)} and {tuple(train.shape)}")
    with on_host():
        test = ~train if test is None else test
        if (test & train).any():  # an empty test is allowed: the maps alone are wanted (accuracy is then NaN)
            raise ValueError("test must name no training subject")
        fit, scored = torch.nonzero(train).flatten(), torch.nonzero(test).flatten()  # ascending, as a mask selects
    fit, scored = fit.to(features.device), scored.to(features.device)
    targets = vectors[answers[:, fit]]  # (R, n, k)
    if features.stride(0) == 0:  # the same features for every relation (s_x): one gram, one solve, R k right-hand sides
        n, k = targets.shape[1:]
        W, b = ridge(features[0, fit], targets.transpose(0, 1).reshape(n, R * k), alpha)  # (d, R k), (R k,)
        W, b = W.view(-1, R, k).transpose(0, 1), b.view(R, k)
    else:  # a gram per relation, solved as one batch
        W, b = ridge(features[:, fit], targets, alpha)  # (R, d, k), (R, k)
    predicted = nearest(torch.baddbmm(b[:, None], features[:, scored], W), vectors)  # (R, n scored)
    accuracy = (predicted == answers[:, scored]).double().mean(1)
    return Readout(accuracy, list(zip(W, b)))


READOUTS = {
    "s": "subject embedding s_x",
    "h": "hidden state h(x, r)",
    "random": "random vectors in place of s_x (baseline)",
    "shuffled": "s_x against another subject's attributes (baseline)",
}


def cv_alpha(features: torch.Tensor, answers: torch.Tensor, vectors: torch.Tensor, train: torch.Tensor,
             alphas: tuple[float, ...], folds: int = 5) -> tuple[float, list[float]]:
    """The ridge penalty among `alphas` with the best mean held-out accuracy over `folds` folds of the
    training subjects, and that accuracy for each alpha. The folds are grouped by subject
    (scikit-learn's GroupKFold), so no subject is fitted in one fold and scored in it; the held-out
    subjects of `train` are never seen. Arguments as in `linear_readout`."""
    from sklearn.model_selection import GroupKFold

    if not alphas or min(alphas) < 0:
        raise ValueError(f"alphas must be a non-empty tuple of penalties >= 0, got {alphas}")
    with on_host():
        subjects = torch.nonzero(train).flatten()  # the training subjects; one row per subject and relation
        ids = subjects.numpy()
    if not 2 <= folds <= len(subjects):
        raise ValueError(f"folds must be in [2, {len(subjects)}] (the training subjects), got {folds}")
    fold_means = []  # (alphas,) per fold, on the device: read once, after every fit
    for fit_idx, _ in GroupKFold(n_splits=folds).split(ids, groups=ids):
        with on_host():
            fold_train = torch.zeros_like(train)
            fold_train[subjects[fit_idx]] = True
            fold = train & ~fold_train  # score on this fold's subjects only, never on the held-out ones
        fold_means.append(torch.stack([linear_readout(features, answers, vectors, fold_train, alpha, test=fold).accuracy.mean()
                                       for alpha in alphas]))
    (means,) = to_host(torch.stack(fold_means))  # (folds, alphas)
    with on_host():
        scores = torch.zeros(len(alphas))
        for row in means:  # fold by fold, in float32, as the scores always summed
            for i, mean in enumerate(row):
                scores[i] += float(mean) / folds
        best = int(torch.argmax(scores))
        return float(alphas[best]), scores.tolist()


@lru_cache(maxsize=4)  # a grid's states come run by run, seed after seed of one (R, d): they share one draw
def baseline_draws(seed: int, R: int, N: int, d: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The two baselines' randomness: Gaussian features (R, N, d) in place of s_x and a permutation (N,) of
    the subjects, drawn on the host from `seed` in this order, whatever the device. They depend on these
    four numbers alone, so every state of a grid with the same (R, N, d) draws them once (on a GPU lease
    the host's draw was most of a readout: 0.38 s a state on the H200 at the paper's shapes; issue 47,
    item 3). Real CPU tensors even under the tests' fake tensors (geofact.host.on_host); callers copy them."""
    with on_host():
        g = torch.Generator().manual_seed(seed)
        return torch.randn((R, N, d), generator=g), torch.randperm(N, generator=g)


def model_readouts(model: TrainedModel, held_out: float = 0.2, alpha: float = 1e-3, seed: int = 0,
                   target: Target = "unembedding") -> dict[str, Readout]:
    """The readouts of READOUTS on one trained run, all on the same held-out subjects.

    The two baselines calibrate the scoring: features with no information (random Gaussian vectors
    of the same shape) and targets with no relation to the features (the attributes of a randomly
    permuted subject) must both read out at about chance, 1/N.
    """
    R, N = model.config.R, model.config.N
    train = split_subjects(N, held_out, seed)
    s = model.subject_embeddings.expand(R, -1, -1)  # (R, N, d): the same s_x for every relation
    noise, permutation = baseline_draws(seed, *s.shape)
    answers, vectors = model.answers, model.attribute_vectors(target)
    features = {"s": s, "h": model.hidden_states(), "random": noise.to(s), "shuffled": s}
    targets = {**dict.fromkeys(features, answers), "shuffled": answers[:, permutation.to(answers.device)]}
    return {name: linear_readout(features[name], targets[name], vectors, train, alpha) for name in READOUTS}


def model_readouts_cv(model: TrainedModel, held_out: float = 0.2, alphas: tuple[float, ...] = (1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0),
                      folds: int = 5, seed: int = 0, target: Target = "unembedding") -> dict[str, dict[str, float]]:
    """For s_x and h(x, r): the penalty cross-validation picks (`cv_alpha`, on the training subjects of the
    same split as `model_readouts`) and the held-out readout accuracy at it."""
    train = split_subjects(model.config.N, held_out, seed)
    answers, vectors = model.answers, model.attribute_vectors(target)
    features = {"s": model.subject_embeddings.expand(model.config.R, -1, -1), "h": model.hidden_states()}
    out = {}
    for what, f in features.items():
        alpha, _ = cv_alpha(f, answers, vectors, train, alphas, folds)
        out[what] = {"alpha": alpha, "accuracy": linear_readout(f, answers, vectors, train, alpha).mean}
    return out
