"""Theorem 4.4 (`thm:k-hop-cot`, proof in Appendix G): one layer and chain-of-thought solve k hops.

The subject embedding stores only its 1-hop neighbourhood hop(s) = (bin(g_1(s)); ...; bin(g_R(s))),
and the model writes the path out token by token: the unembedding turns each step's answer back into
a subject token, whose embedding brings the next neighbourhood (the "discrete memory fetch").
d = 1 + d_S + d_R + R d_S + (2k + 1), MLP width (R + 2) d_S, one layer, one head.
"""

from __future__ import annotations

import torch

from geofact.codes import n_bits
from geofact.constructions.base import Construction
from geofact.constructions.primitives import (
    binary,
    check_tau,
    gate,
    lay_out,
    mismatch_weights,
    position_one_hot,
    relay_head,
    width,
)
from geofact.host import as_device
from geofact.task import KHopTask
from geofact.transformer import MLP, AttentionHead, Layer, Transformer


def cot_layout(N: int, R: int, k: int) -> dict[str, slice]:
    """[flag | bin(s) (d_S) | bin(r) (d_R) | hop (R d_S) | position one-hot (2k + 1)]."""
    d_S, d_R = n_bits(N), n_bits(R)
    return lay_out([("flag", 1), ("bin(s)", d_S), ("bin(r)", d_R), ("hop", R * d_S), ("position", 2 * k + 1)])


def neighbourhood_embeddings(task: KHopTask, blocks: dict[str, slice],
                             dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Subject s is (1; bin(s); 0; hop(s)) with hop(s) = (bin(g_1(s)); ...; bin(g_R(s))), its 1-hop
    neighbourhood; relation r is (0; 0; bin(r); 0); position i adds e_i."""
    N, R = task.N, task.R
    d = blocks["position"].stop
    bin_s = binary(N, dtype)
    embed = torch.zeros(N + R, d, dtype=dtype)
    embed[:N, blocks["flag"]] = 1
    embed[:N, blocks["bin(s)"]] = bin_s
    embed[:N, blocks["hop"]] = torch.cat([bin_s[torch.as_tensor(task.bijections[r])] for r in range(R)], dim=1)
    embed[N:, blocks["bin(r)"]] = binary(R, dtype)
    return embed, position_one_hot(d, blocks["position"], dtype)


def path_head(blocks: dict[str, slice], k: int, tau: float, dtype: torch.dtype) -> AttentionHead:
    """The proof's Q_pos = e_0 e_k^T + sum_l e_l e_{k+l}^T: the last prompt token (position k) reads the
    subject s_0, and the token at position k + l (the emitted s_{l-1}) reads the relation r_l. It copies
    everything but the positions: flag, bin(s), bin(r) and hop."""
    targets = [(k, 0)] + [(k + ell, ell) for ell in range(1, k + 1)]
    return relay_head(blocks["position"].stop, blocks["position"], targets, tau, slice(0, blocks["hop"].stop), dtype)


def next_step_mlp(blocks: dict[str, slice], R: int, k: int, dtype: torch.dtype) -> MLP:
    """One hidden layer that writes 2 bin(next) - 1 into the subject block.

    * R d_S selector neurons (r, j): hop bit (r, j) - Hamming(bin r, fetched relation), gated to the
      generation positions k+1..2k (the proof's neurons and biases);
    * d_S neurons copying bin(s_0) at position k (the proof's first block) and d_S erasing the current
      bin(s) at generation positions (the proof's "last layer zeroes out").
    """
    S, Rb, hop, pos = blocks["bin(s)"], blocks["bin(r)"], blocks["hop"], blocks["position"]
    d, d_S = pos.stop, width(S)
    w_gen, b_gen = gate(d, pos, list(range(k + 1, 2 * k + 1)), dtype)
    w_first, b_first = gate(d, pos, [k], dtype)
    w_r, b_r = mismatch_weights(binary(R, dtype))
    n_hidden = R * d_S + 2 * d_S
    sel, copy, erase = slice(0, R * d_S), slice(R * d_S, (R + 1) * d_S), slice((R + 1) * d_S, n_hidden)
    w1, b1 = torch.zeros(d, n_hidden, dtype=dtype), torch.zeros(n_hidden, dtype=dtype)
    sel_r = torch.arange(R).repeat_interleave(d_S)  # selector (r, j) at index r * d_S + j reads hop bit (r, j)
    w1[hop.start + torch.arange(R * d_S), torch.arange(R * d_S)] = 1
    w1[Rb, sel] = w_r[sel_r].T
    w1[:, sel] += w_gen[:, None]
    b1[sel] = b_r[sel_r] + b_gen
    bits = torch.arange(d_S)
    w1[S.start + bits, copy.start + bits] = 1
    w1[:, copy] += w_first[:, None]
    b1[copy] = b_first
    w1[S.start + bits, erase.start + bits] = 1
    w1[:, erase] += w_gen[:, None]
    b1[erase] = b_gen
    w2, b2 = torch.zeros(n_hidden, d, dtype=dtype), torch.zeros(d, dtype=dtype)
    w2[torch.arange(R * d_S), S.start + torch.arange(R * d_S) % d_S] = 2
    w2[copy.start + bits, S.start + bits] = 1
    w2[erase.start + bits, S.start + bits] = -1
    b2[S] = -1
    return MLP([w1, w2], [b1, b2])


def chain_of_thought(
    task: KHopTask, tau: float = 50.0, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float64
) -> Construction:
    """Theorem 4.4: the proof's one-layer model, generating s_0, s_1, ..., s_k after the prompt.

    Coordinates [flag | bin(s) (d_S) | bin(r) (d_R) | hop (R d_S) | position one-hot (2k + 1)]
    (`neighbourhood_embeddings`); one head (`path_head`) and one MLP (`next_step_mlp`). The unembedding
    is the embedding's own subject block, bin(a) ("compare only the subject coordinates"):
    <2x - 1, bin(a)> = |x & a| - |a \\ x| is maximal, by exactly 1, at a = x.

    As in the proof the first emitted token copies s_0 (position k can read only one token and its
    own relation is r_k, not r_1), so the model emits k + 1 tokens, s_0..s_k, and the sequence reaches
    2k + 1 positions; the statement's "generates s_1..s_k" counts one fewer. Relations and subjects
    are 0-indexed, tau as in `geofact.constructions.khop`.
    """
    check_tau(tau)
    N, R, k = task.N, task.R, task.k
    blocks = cot_layout(N, R, k)
    embed, pos_embed = neighbourhood_embeddings(task, blocks, dtype)
    layer = Layer([path_head(blocks, k, tau, dtype)], next_step_mlp(blocks, R, k, dtype))
    unembed = torch.zeros(embed.shape[1], N, dtype=dtype)
    unembed[blocks["bin(s)"]] = embed[:N, blocks["bin(s)"]].T  # tied to the embedding's subject block
    model = Transformer(embed, [layer], unembed, pos_embed).to(as_device(device))
    d_S, d_R = n_bits(N), n_bits(R)
    formulas = {"d_model": 1 + d_S + d_R + R * d_S + 2 * k + 1, "mlp_width": R * d_S, "n_layers": 1, "n_heads": 1}
    return Construction("k-hop, chain of thought (Theorem 4.4)", model, formulas, cot_steps=k + 1, blocks=blocks)
