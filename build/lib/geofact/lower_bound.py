"""The combinatorics in the proof of Theorem 4.2 (`thm:k-hop lower bound`, Appendix G), checkable at small N.

The proof views R bijections as an R-regular edge-coloured graph G and argues that
* (Part I) if two graphs G, H give the same k-hop table Phi, then h_r = g_r o C for one permutation C
  ("right translation"), so every table has at most N! preimages and |Im Phi| >= (N!)^{R-1};
* (Part II) greedily picking roots and excluding each root's "forward-then-reverse" neighbourhood,
  whose size it bounds by R^{2k}, yields p = floor(N / (2 R^{2k})) roots with vertex-disjoint
  depth-k trees.
The functions here compute these objects exactly so the notebook can test each step.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np


def k_hop_table(bijections: np.ndarray, k: int) -> np.ndarray:
    """Phi(G): s_k for every subject and relation word (r_1..r_k, lexicographic). Shape (N, R^k)."""
    R, N = bijections.shape
    table = np.arange(N)[:, None]  # (N, words so far)
    for _ in range(k):
        table = bijections[:, table].transpose(1, 2, 0).reshape(N, -1)  # append one more relation
    return table


@dataclass(frozen=True)
class TranslationCheck:
    """Part I of the proof, over every graph in (S_N)^R."""

    N: int
    R: int
    k: int
    n_graphs: int  # (N!)^R
    n_tables: int  # |Im Phi|
    max_preimage: int  # largest number of graphs with one table
    all_right_translates: bool  # within every preimage, h_r = g_r o C for one C

    @property
    def claimed_min_tables(self) -> int:
        return math.factorial(self.N) ** (self.R - 1)


def translation_check(N: int, R: int, k: int) -> TranslationCheck:
    """Enumerate all (N!)^R graphs (keep it below ~10^5), group them by k-hop table, test Part I."""
    if math.factorial(N) ** R > 200_000:
        raise ValueError(f"(N!)^R = {math.factorial(N) ** R} graphs is too many to enumerate; use N!^R <= 200000")
    perms = np.array(list(itertools.permutations(range(N))))
    classes: dict[bytes, list[np.ndarray]] = {}
    for combo in itertools.product(range(len(perms)), repeat=R):
        g = perms[list(combo)]
        classes.setdefault(k_hop_table(g, k).tobytes(), []).append(g)
    right = True
    for members in classes.values():
        g = members[0]
        for h in members[1:]:
            C = np.argsort(g[0])[h[0]]  # g_0 o C = h_0  =>  C = g_0^{-1} o h_0
            right &= bool((g[:, C] == h).all())
    return TranslationCheck(N, R, k, len(perms) ** R, len(classes), max(map(len, classes.values())), right)


def forward_ball(bijections: np.ndarray, roots: np.ndarray, radius: int, exact: bool = False) -> np.ndarray:
    """Vertices reachable from `roots` in at most (or exactly, with exact=True) `radius` forward steps."""
    frontier, seen = np.unique(roots), [np.unique(roots)]
    for _ in range(radius):
        frontier = np.unique(bijections[:, frontier])
        seen.append(frontier)
    return frontier if exact else np.unique(np.concatenate(seen))


def backward_ball(bijections: np.ndarray, vertices: np.ndarray, radius: int) -> np.ndarray:
    """Vertices from which some vertex of `vertices` is reachable in at most `radius` steps."""
    return forward_ball(np.argsort(bijections, axis=1), vertices, radius)


def exclusion_set(bijections: np.ndarray, root: int, k: int, rule: str = "proof") -> np.ndarray:
    """Vertices a greedy step removes after choosing `root`.

    rule="proof": exactly k forward steps, then at most k backward ones (the proof's definition);
    rule="conflict": every v whose depth-k tree meets the root's, i.e. at most k backward steps from
    any vertex within k forward steps, which is what vertex-disjointness needs.
    """
    if rule not in ("proof", "conflict"):
        raise ValueError(f"rule must be 'proof' or 'conflict', got {rule!r}")
    ahead = forward_ball(bijections, np.array([root]), k, exact=rule == "proof")
    return backward_ball(bijections, ahead, k)


def greedy_disjoint_roots(bijections: np.ndarray, k: int, rule: str = "proof", seed: int = 0) -> np.ndarray:
    """The proof's greedy: pick a random remaining root, remove its exclusion set, until N/2 are removed."""
    N = bijections.shape[1]
    removed = np.zeros(N, dtype=bool)
    roots = []
    for v in np.random.default_rng(seed).permutation(N):
        if removed.sum() >= N / 2:
            break
        if removed[v]:
            continue
        roots.append(v)
        removed[exclusion_set(bijections, int(v), k, rule)] = True
    return np.array(roots, dtype=int)


def trees_disjoint(bijections: np.ndarray, roots: np.ndarray, k: int) -> bool:
    """Whether the depth-k trees (all vertices within k forward steps) of `roots` are pairwise vertex-disjoint."""
    balls = [forward_ball(bijections, np.array([r]), k) for r in roots]
    return sum(map(len, balls)) == len(np.unique(np.concatenate(balls))) if balls else True


def is_full_tree(bijections: np.ndarray, root: int, k: int) -> bool:
    """Whether the root's k-step neighbourhood is a full R-ary tree: 1 + R + ... + R^k distinct vertices."""
    R = bijections.shape[0]
    return len(forward_ball(bijections, np.array([root]), k)) == sum(R**i for i in range(k + 1))


def conflict_size_bound(R: int, k: int) -> int:
    """Worst case of the conflict set: (1 + R + ... + R^k)^2 (k steps forward, k back, from every vertex)."""
    return sum(R**i for i in range(k + 1)) ** 2


def repaired_tree_count(N: int, R: int, k: int) -> int:
    """floor(N / (2 (1 + R + ... + R^k)^2)): roots the greedy provably finds with the conflict rule."""
    return N // (2 * conflict_size_bound(R, k))
