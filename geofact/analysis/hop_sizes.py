"""What the theory predicts for the multi-hop experiment (Appendix C) at a given (N, R, k, d).

The experiment's model has one layer and embedding dimension d. Beside its measured accuracy the
exp-multihop page puts the sizes of the paper's constructions for the same (N, R, k):

* chain-of-thought (Theorem 4.4, geofact.constructions.cot): one layer, d = 1 + d_S + d_R + R d_S + 2k + 1,
  MLP width (R + 2) d_S. If this fits in d, a one-layer model of that width provably exists.
* no chain-of-thought (Theorem 4.3 (2), embedding pre-computation): d = R^k d_S + d_R + k + 1, but
  depth k; (1), key-value memory: MLP width N R per layer, depth k. Neither is a one-layer model, so
  for the one-layer experiment they are what the known constructions need, not a proof of failure.

with d_S = ceil(log2 N), d_R = ceil(log2 R) as in geofact.constructions.khop. tests/analysis/
tests/analysis/test_hop_sizes.py checks these formulas against the built constructions.
"""

from __future__ import annotations

from geofact.codes import n_bits


def cot_dimension(N: int, R: int, k: int) -> int:
    """d of Theorem 4.4's one-layer chain-of-thought construction."""
    d_S, d_R = n_bits(N), n_bits(R)
    return 1 + d_S + d_R + R * d_S + 2 * k + 1


def cot_mlp_width(N: int, R: int) -> int:
    """MLP width of Theorem 4.4's construction: R d_S selectors, d_S copying, d_S erasing neurons."""
    return (R + 2) * n_bits(N)


def no_cot_tree_dimension(N: int, R: int, k: int) -> int:
    """d of Theorem 4.3 (2), the embedding pre-computation (k layers): the whole k-hop answer tree."""
    d_S, d_R = n_bits(N), n_bits(R)
    return R**k * d_S + d_R + k + 1


def predicted_cells(N: int, d: int, k_values: list[int], R_values: list[int]) -> dict[str, list[list[bool]]]:
    """(k, R) grids of whether each construction's d fits in the experiment's d."""
    return {
        "cot": [[cot_dimension(N, R, k) <= d for R in R_values] for k in k_values],
        "no_cot_tree": [[no_cot_tree_dimension(N, R, k) <= d for R in R_values] for k in k_values],
    }
