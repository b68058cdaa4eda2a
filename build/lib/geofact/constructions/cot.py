"""Theorem 4.4 (`thm:k-hop-cot`, proof in Appendix G): one layer and chain-of-thought solve k hops.

The subject embedding stores only its 1-hop neighbourhood hop(s) = (bin(g_1(s)); ...; bin(g_R(s))),
and the model writes the path out token by token: the unembedding turns each step's answer back into
a subject token, whose embedding brings the next neighbourhood (the "discrete memory fetch").
d = 1 + d_S + d_R + R d_S + (2k + 1), MLP width (R + 2) d_S, one layer, one head.
"""

from __future__ import annotations

import torch

from geofact.constructions.base import Construction
from geofact.constructions.khop import _check_tau, binary, gate, mismatch_weights, n_bits, relay_head
from geofact.device import resolve_device
from geofact.task import KHopTask
from geofact.transformer import MLP, Layer, Transformer


def chain_of_thought(
    task: KHopTask, tau: float = 50.0, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float64
) -> Construction:
    """Theorem 4.4: the proof's one-layer model, generating s_0, s_1, ..., s_k after the prompt.

    Coordinates [flag | bin(s) (d_S) | bin(r) (d_R) | hop (R d_S) | position one-hot (2k + 1)].
    Subject token (1; bin(s); 0; hop(s)), relation token (0; 0; bin(r); 0), position i adds e_i.
    The head's Q_pos = e_0 e_k^T + sum_l e_l e_{k+l}^T: the last prompt token (position k) reads s_0,
    and the token at position k + l (the emitted s_{l-1}) reads r_l. The MLP (one hidden layer) has
    * R d_S selector neurons (r, j): hop bit (r, j) - Hamming(bin r, fetched relation), gated to the
      generation positions k+1..2k (the proof's neurons and biases);
    * d_S neurons copying bin(s_0) at position k (the proof's first block) and d_S erasing the current
      bin(s) at generation positions (the proof's "last layer zeroes out"),
    and writes 2 bin(next) - 1 into the subject block. The unembedding is the embedding's own subject
    block, bin(a) ("compare only the subject coordinates"): <2x - 1, bin(a)> = |x & a| - |a \\ x| is
    maximal, by exactly 1, at a = x.

    As in the proof the first emitted token copies s_0 (position k can read only one token and its
    own relation is r_k, not r_1), so the model emits k + 1 tokens, s_0..s_k, and the sequence reaches
    2k + 1 positions; the statement's "generates s_1..s_k" counts one fewer. Relations and subjects
    are 0-indexed, tau as in `geofact.constructions.khop`.
    """
    _check_tau(tau)
    N, R, k = task.N, task.R, task.k
    d_S, d_R = n_bits(N), n_bits(R)
    n_pos = 2 * k + 1
    flag, S = 0, slice(1, 1 + d_S)
    Rb = slice(S.stop, S.stop + d_R)
    hop = slice(Rb.stop, Rb.stop + R * d_S)
    pos = slice(hop.stop, hop.stop + n_pos)
    d = pos.stop
    bin_s, bin_r = binary(N, d_S, dtype), binary(R, d_R, dtype)

    embed = torch.zeros(N + R, d, dtype=dtype)
    embed[:N, flag] = 1
    embed[:N, S] = bin_s
    embed[:N, hop] = torch.cat([bin_s[torch.as_tensor(task.bijections[r])] for r in range(R)], dim=1)
    embed[N:, Rb] = bin_r
    pos_embed = torch.zeros(n_pos, d, dtype=dtype)
    pos_embed[:, pos] = torch.eye(n_pos, dtype=dtype)

    head = relay_head(d, pos, [(k, 0)] + [(k + ell, ell) for ell in range(1, k + 1)], tau, slice(0, hop.stop), dtype)

    generating = list(range(k + 1, 2 * k + 1))
    w_gen, b_gen = gate(d, pos, generating, dtype)
    w_first, b_first = gate(d, pos, [k], dtype)
    w_r, b_r = mismatch_weights(bin_r)
    width = R * d_S + 2 * d_S
    sel, copy, erase = slice(0, R * d_S), slice(R * d_S, (R + 1) * d_S), slice((R + 1) * d_S, width)
    w1, b1 = torch.zeros(d, width, dtype=dtype), torch.zeros(width, dtype=dtype)
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
    w2, b2 = torch.zeros(width, d, dtype=dtype), torch.zeros(d, dtype=dtype)
    w2[torch.arange(R * d_S), S.start + torch.arange(R * d_S) % d_S] = 2
    w2[copy.start + bits, S.start + bits] = 1
    w2[erase.start + bits, S.start + bits] = -1
    b2[S] = -1

    unembed = torch.zeros(d, N, dtype=dtype)
    unembed[S] = embed[:N, S].T  # tied to the embedding's subject block
    model = Transformer(embed, [Layer([head], MLP([w1, w2], [b1, b2]))], unembed, pos_embed)
    model = model.to(resolve_device(device))
    formulas = {"d_model": 1 + d_S + d_R + R * d_S + 2 * k + 1, "mlp_width": R * d_S, "n_layers": 1, "n_heads": 1}
    return Construction("k-hop, chain of thought (Theorem 4.4)", model, formulas, cot_steps=k + 1)
