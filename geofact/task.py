"""The factual-recall tasks (Section 2.1 and Appendix F of the paper).

Token conventions shared by every model in geofact:

* input vocabulary: subjects 0..N-1, then relations N..N+R-1 (a relation r is token N + r);
* a single-hop query is the sequence (s, N + r) and is answered at its last position;
* attributes live in an output vocabulary of their own, described by each task.

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


@dataclass(frozen=True)
class Queries:
    """All queries of a task with their answers: tokens (Q, seq) and target output ids (Q,)."""

    tokens: torch.Tensor
    targets: torch.Tensor

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

    def queries(self) -> Queries:
        tokens = single_hop_tokens(self.N, self.R)
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
