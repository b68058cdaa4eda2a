"""The factual-recall tasks (Section 2.1 and Appendix F of the paper).

Token conventions shared by every model in geofact:

* input vocabulary: subjects 0..N-1, then relations N..N+R-1 (a relation r is token N + r);
* a single-hop query is the sequence (s, N + r) and is answered at its last position;
* attributes live in an output vocabulary of their own, described by each task.

A *k-hop* query (Section 2.1) is (s_0, N + r_1, ..., N + r_k) with answer
s_k = g_{r_k}(... g_{r_1}(s_0)): relations apply left to right.

The *shared-attribute* task (the paper's main setting) has R bijections g_r: [N] -> [N] into one
attribute pool. The *disjoint-attribute* task (Appendix F, following Nichani et al. 2024) gives each
relation its own attribute set A_r, |A| = R N, so attribute ids are r * N + (local index).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch


def _check_sizes(N: int, R: int) -> None:
    if int(N) != N or N < 2:
        raise ValueError(f"N (number of subjects) must be an integer >= 2, got {N!r}")
    if int(R) != R or R < 1:
        raise ValueError(f"R (number of relations) must be an integer >= 1, got {R!r}")


def random_bijections(N: int, R: int, seed: int) -> np.ndarray:
    """R independent uniform permutations of [N], shape (R, N): row r is g_r."""
    _check_sizes(N, R)
    rng = np.random.default_rng(seed)
    return np.stack([rng.permutation(N) for _ in range(R)])


def _sample_index(total: int, sample: int | None, seed: int) -> np.ndarray:
    """Sorted indices of all `total` queries, or of `sample` of them drawn without replacement."""
    if sample is None or sample >= total:
        return np.arange(total)
    if sample < 1:
        raise ValueError(f"sample must be >= 1 (or None for all {total} queries), got {sample}")
    return np.sort(np.random.default_rng(seed).choice(total, size=sample, replace=False))


@dataclass(frozen=True)
class Queries:
    """Queries of a task with their answers: tokens (Q, seq) and target output ids (Q,).

    `chain` (Q, k + 1), for k-hop tasks, holds the path s_0, s_1, ..., s_k = target: what a
    chain-of-thought model is expected to write out (Theorem 4.4).
    """

    tokens: torch.Tensor
    targets: torch.Tensor
    chain: torch.Tensor | None = None

    def __len__(self) -> int:
        return len(self.targets)


def single_hop_tokens(N: int, R: int) -> torch.Tensor:
    """All N*R single-hop prompts (s, N + r), subject-major. Shape (N*R, 2)."""
    s = torch.arange(N).repeat_interleave(R)
    r = torch.arange(R).repeat(N)
    return torch.stack([s, N + r], dim=1)


@dataclass(frozen=True)
class SharedAttributeTask:
    """Section 2.1 with k = 1: R bijections g_r: [N] -> [N] into one shared attribute pool.

    Attributes are entity ids in [N] (the output vocabulary is the N entities), so different
    relations collide on the same outputs: the "routing bottleneck" that distinguishes this setting
    from Appendix F's disjoint attributes.
    """

    N: int
    R: int
    bijections: np.ndarray = field(repr=False)  # (R, N): row r is g_r

    def __post_init__(self) -> None:
        _check_sizes(self.N, self.R)
        if self.bijections.shape != (self.R, self.N):
            raise ValueError(f"bijections must have shape (R, N) = {(self.R, self.N)}, got {self.bijections.shape}")
        if any(sorted(row) != list(range(self.N)) for row in self.bijections.tolist()):
            raise ValueError("every row of bijections must be a permutation of [0, N)")

    @classmethod
    def random(cls, N: int, R: int, seed: int = 0) -> "SharedAttributeTask":
        return cls(N, R, random_bijections(N, R, seed))

    @property
    def n_attributes(self) -> int:
        return self.N

    def queries(self, sample: int | None = None, seed: int = 0) -> Queries:
        """All N R queries (subject-major), or a uniform random `sample` of them without replacement."""
        tokens = single_hop_tokens(self.N, self.R)[_sample_index(self.N * self.R, sample, seed)]
        s, r = tokens[:, 0].numpy(), (tokens[:, 1] - self.N).numpy()
        return Queries(tokens, torch.as_tensor(self.bijections[r, s]))


@dataclass(frozen=True)
class DisjointAttributeTask:
    """Appendix F: relation r maps subject s to attribute r*N + maps[r, s] of its own set A_r.

    maps has shape (R, N) with entries in [N]. The construction of Theorem F.1 names the attribute
    g_r(s) by the pair (s, r), which is only well defined when every g_r is injective (then g_r is a
    bijection onto A_r and |A| = R N as the appendix states); `is_injective` tells which case this is.
    """

    N: int
    R: int
    maps: np.ndarray = field(repr=False)

    def __post_init__(self) -> None:
        _check_sizes(self.N, self.R)
        if self.maps.shape != (self.R, self.N):
            raise ValueError(f"maps must have shape (R, N) = {(self.R, self.N)}, got {self.maps.shape}")
        if self.maps.min() < 0 or self.maps.max() >= self.N:
            raise ValueError(f"maps entries must lie in [0, N) = [0, {self.N}), got range [{self.maps.min()}, {self.maps.max()}]")

    @classmethod
    def random(cls, N: int, R: int, seed: int = 0) -> "DisjointAttributeTask":
        """Each g_r a uniform bijection [N] -> A_r (the setting of Theorem F.1)."""
        return cls(N, R, random_bijections(N, R, seed))

    @property
    def n_attributes(self) -> int:
        return self.R * self.N

    @property
    def is_injective(self) -> bool:
        return all(len(np.unique(row)) == self.N for row in self.maps)

    def attribute(self, s: np.ndarray, r: np.ndarray) -> np.ndarray:
        """Global attribute id of g_r(s)."""
        return r * self.N + self.maps[r, s]

    def queries(self) -> Queries:
        tokens = single_hop_tokens(self.N, self.R)
        s, r = tokens[:, 0].numpy(), (tokens[:, 1] - self.N).numpy()
        return Queries(tokens, torch.as_tensor(self.attribute(s, r)))


@dataclass(frozen=True)
class KHopTask:
    """Section 2.1: R bijections g_r of [N]; a query (s_0, r_1, ..., r_k) asks for s_k = g_{r_k} o ... o g_{r_1}(s_0).

    k = 1 is the shared-attribute task. There are N R^k queries; `queries(sample=...)` draws a uniform
    random subset without replacement when enumerating them all is too much.
    """

    N: int
    R: int
    k: int
    bijections: np.ndarray = field(repr=False)  # (R, N): row r is g_r

    def __post_init__(self) -> None:
        if int(self.k) != self.k or self.k < 1:
            raise ValueError(f"k (number of hops) must be an integer >= 1, got {self.k!r}")
        SharedAttributeTask(self.N, self.R, self.bijections)  # same validation of N, R and the bijections

    @classmethod
    def random(cls, N: int, R: int, k: int, seed: int = 0) -> "KHopTask":
        return cls(N, R, k, random_bijections(N, R, seed))

    @property
    def n_queries(self) -> int:
        return self.N * self.R**self.k

    def path(self, s0: np.ndarray, relations: np.ndarray) -> np.ndarray:
        """(Q, k + 1) subjects s_0, ..., s_k visited by start subjects s0 (Q,) under relations (Q, k)."""
        steps = [np.asarray(s0)]
        for hop in range(self.k):
            steps.append(self.bijections[relations[:, hop], steps[-1]])
        return np.stack(steps, axis=1)

    def queries(self, sample: int | None = None, seed: int = 0) -> Queries:
        """All N R^k queries (subject-major, relation words in lexicographic order), or `sample` of them."""
        index = _sample_index(self.n_queries, sample, seed)
        s0, word = np.divmod(index, self.R**self.k)
        relations = (word[:, None] // self.R ** np.arange(self.k - 1, -1, -1)[None, :]) % self.R  # (Q, k)
        chain = torch.as_tensor(self.path(s0, relations))
        tokens = torch.as_tensor(np.concatenate([s0[:, None], self.N + relations], axis=1))
        return Queries(tokens, chain[:, -1].clone(), chain)
