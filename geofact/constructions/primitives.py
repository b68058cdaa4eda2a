"""Pieces the proofs share, so that each construction reads as its own stages.

* every proof: coordinate blocks laid end to end (`lay_out`) and the uniform head that averages the
  prompt and undoes the average (`averaging_head`: Theorems F.1 and 4.1);
* the k-hop proofs (Theorems 4.3 and 4.4, Appendix G): binary codes, Hamming-distance neurons,
  position-gated neurons, one-hot positions, the head that relays a block of coordinates from one
  position to another, and the Hamming read-out.

Nothing here knows a task.
"""

from __future__ import annotations

import torch

from geofact.codes import index_bits
from geofact.transformer import AttentionHead

__all__ = [
    "averaging_head", "binary", "check_tau", "gate", "hamming_unembedding", "lay_out", "mismatch_weights",
    "position_one_hot", "predecessor_head", "relay_head", "width",
]


def averaging_head(d: int, kept: slice, scale: float, dtype: torch.dtype) -> AttentionHead:
    """Uniform attention over the causal prefix with W_V = scale * diag(I on `kept`, 0 elsewhere), W_O = I.

    Over a prompt of `scale` tokens the head returns the sum of their `kept` blocks, which is how the
    proofs move a subject's block into the relation token.
    """
    w_v = scale * torch.eye(d, dtype=dtype)
    outside = torch.ones(d, dtype=torch.bool)
    outside[kept] = False
    w_v[outside] = 0
    zeros = torch.zeros(d, 1, dtype=dtype)
    return AttentionHead(zeros, zeros.clone(), w_v, torch.eye(d, dtype=dtype), "uniform")


def binary(n: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """bin(i) in {0,1}^{ceil(log2 n)} for i in [0, n), least significant bit first. Shape (n, n_bits(n))."""
    return torch.as_tensor(index_bits(n), dtype=dtype)


def width(block: slice) -> int:
    """Number of coordinates in a block of the residual stream."""
    return block.stop - block.start


def mismatch_weights(codes: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(2 bin - 1, -|bin|_1): with them <w, x> + b = -Hamming(x, bin) for binary x, 0 only on a match."""
    return 2 * codes - 1, -codes.sum(dim=-1)


def relay_head(d: int, positions: slice, targets: list[tuple[int, int]], tau: float, value: slice,
               dtype: torch.dtype) -> AttentionHead:
    """A head in which position q attends position t for each (q, t) in `targets`, copying coordinates `value`.

    Queries and keys read the position one-hot `positions`; the score of (q, t) is tau, all others 0.
    """
    n_pos = width(positions)
    w_q = torch.zeros(d, n_pos, dtype=dtype)
    for q, t in targets:
        w_q[positions.start + q, t] = tau
    w_k = torch.zeros(d, n_pos, dtype=dtype)
    w_k[positions, :] = torch.eye(n_pos, dtype=dtype)
    w_v = torch.zeros(d, width(value), dtype=dtype)
    w_v[value, :] = torch.eye(width(value), dtype=dtype)
    return AttentionHead(w_q, w_k, w_v, w_v.T.clone(), "softmax")


def predecessor_head(d: int, positions: slice, k: int, tau: float, value: slice, dtype: torch.dtype) -> AttentionHead:
    """The relay head in which every position q = 1..k reads position q - 1 (copying coordinates `value`)."""
    return relay_head(d, positions, [(q, q - 1) for q in range(1, k + 1)], tau, value, dtype)


def gate(d: int, positions: slice, active: list[int], dtype: torch.dtype) -> tuple[torch.Tensor, float]:
    """Weights (d,) and bias adding 0 to a neuron's pre-activation at `active` positions and -2 elsewhere
    (the proofs' "2 e_l - 1" term on the position one-hot)."""
    w = torch.zeros(d, dtype=dtype)
    w[positions] = -1
    w[[positions.start + p for p in active]] = 1
    return w, -1.0


def check_tau(tau: float) -> None:
    """The attention scale must be positive (the proofs' hard lookups need tau large; 1 is their literal choice)."""
    if not tau > 0:
        raise ValueError(f"tau (attention scale) must be > 0, got {tau}")


def lay_out(blocks: list[tuple[str, int]]) -> dict[str, slice]:
    """Consecutive coordinate blocks of the residual stream from (name, width) pairs, in order."""
    slices, start = {}, 0
    for name, size in blocks:
        slices[name] = slice(start, start + size)
        start += size
    return slices


def position_one_hot(d: int, positions: slice, dtype: torch.dtype) -> torch.Tensor:
    """Position embeddings (n_pos, d): position i adds e_i to the block `positions`."""
    pos_embed = torch.zeros(width(positions), d, dtype=dtype)
    pos_embed[:, positions] = torch.eye(width(positions), dtype=dtype)
    return pos_embed


def hamming_unembedding(n: int, d: int, bits: slice, bias: int, dtype: torch.dtype) -> torch.Tensor:
    """(d, n) read-out scoring the bits x in block `bits` against index a by 2<x, bin(a)> - |bin(a)|.

    That is |x| - Hamming(x, bin(a)): a unique maximum, with margin 1, at bin(a) = x. The bias -|bin(a)|
    rides on coordinate `bias`, which must be 1 at the read-out token.
    """
    codes = binary(n, dtype)
    unembed = torch.zeros(d, n, dtype=dtype)
    unembed[bits] = 2 * codes.T
    unembed[bias] = -codes.sum(dim=1)
    return unembed
