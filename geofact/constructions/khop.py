"""Theorem 4.3 (`thm:k-hop-non-cot`, proof in Appendix G): k-hop recall in one forward pass, depth k.

1. `key_value_memory`: d = O~(k), one MLP per layer of width N R acting as a lookup table (s, r) -> g_r(s).
   `key_value_memory_first_token` is the proof's own layout (the first token gathers the relations),
   which needs Section 2.2's unmasked attention.
2. `embedding_precomputation`: the subject's embedding holds its whole k-hop answer tree,
   d = R^k d_S + d_R + k + 1, and each layer's MLP keeps the branch of the current relation.

Both use binary codes, d_S = ceil(log2 N) bits for subjects and d_R = ceil(log2 R) for relations,
indexed from 0 (the paper's [N] = {1..N} would need one more bit for s = N when N is a power of 2).
Every layer has one softmax head in which each position q >= 1 reads position q - 1 (score tau
against 0): position l holds nothing before layer l (its predecessor is still empty), reads s_{l-1}
(or the tree) at layer l, and the answer arrives at the last token, position k, after layer k.
Position 0 reads only itself; it is never read again after layer 1.

Choices the proof leaves implicit, made explicit here:
* tau: the proof writes W_Q, W_K with entries 1, i.e. scores 1 vs 0, which is not a hard lookup
  (softmax gives the target weight e / (e + l)). `tau` scales the scores; the default 50 leaves
  e^-50 ~ 2e-22 on the other tokens; `tau=1` is the literal choice (the notebook shows it fail).
* Decoding: the answer's bits x in {0,1}^{d_S} are scored against subject a by 2<x, bin(a)> - |bin(a)|
  = |x| - Hamming(x, bin(a)), a unique maximum with margin 1. The bias -|bin(a)| rides on a
  coordinate that is 1 at the last token (the flag in (1), the position-k coordinate in (2)).
* Gating to one position: a neuron gets weights 2 e_l - 1 on the position one-hot and bias -1,
  which adds 0 at position l and -2 elsewhere (the proof's "2e_l - 1" term).
"""

from __future__ import annotations

import math

import torch

from geofact.constructions.base import Construction
from geofact.device import resolve_device
from geofact.task import KHopTask
from geofact.transformer import MLP, AttentionHead, Layer, Transformer


def n_bits(n: int) -> int:
    """ceil(log2 n): bits of an index in [0, n) (0 for n = 1)."""
    return math.ceil(math.log2(n)) if n > 1 else 0


def binary(n: int, width: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """bin(i) in {0,1}^width for i in [0, n), least significant bit first. Shape (n, width)."""
    return ((torch.arange(n)[:, None] >> torch.arange(width)[None, :]) & 1).to(dtype)


def mismatch_weights(codes: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(2 bin - 1, -|bin|_1): with them <w, x> + b = -Hamming(x, bin) for binary x, 0 only on a match."""
    return 2 * codes - 1, -codes.sum(dim=-1)


def relay_head(d: int, positions: slice, targets: list[tuple[int, int]], tau: float, value: slice,
               dtype: torch.dtype) -> AttentionHead:
    """A head in which position q attends position t for each (q, t) in `targets`, copying coordinates `value`.

    Queries and keys read the position one-hot `positions`; the score of (q, t) is tau, all others 0.
    """
    n_pos = positions.stop - positions.start
    w_q = torch.zeros(d, n_pos, dtype=dtype)
    for q, t in targets:
        w_q[positions.start + q, t] = tau
    w_k = torch.zeros(d, n_pos, dtype=dtype)
    w_k[positions, :] = torch.eye(n_pos, dtype=dtype)
    width = value.stop - value.start
    w_v = torch.zeros(d, width, dtype=dtype)
    w_v[value, :] = torch.eye(width, dtype=dtype)
    return AttentionHead(w_q, w_k, w_v, w_v.T.clone(), "softmax")


def gate(d: int, positions: slice, active: list[int], dtype: torch.dtype) -> tuple[torch.Tensor, float]:
    """Weights (d,) and bias adding 0 to a neuron's pre-activation at `active` positions and -2 elsewhere."""
    w = torch.zeros(d, dtype=dtype)
    w[positions] = -1
    w[[positions.start + p for p in active]] = 1
    return w, -1.0


def _check_tau(tau: float) -> None:
    if not tau > 0:
        raise ValueError(f"tau (attention scale) must be > 0, got {tau}")


def key_value_memory(
    task: KHopTask, tau: float = 50.0, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float64
) -> Construction:
    """Theorem 4.3 (1): depth k, d = d_S + d_R + k + 2, MLP width N R (one neuron per fact).

    Coordinates [flag | bin(s) (d_S) | bin(r) (d_R) | position one-hot (k + 1)]. Subject token:
    (1; bin(s_0); 0; e_0), relation token at position i: (0; 0; bin(r_i); e_i). Layer l: position l
    copies (flag; bin(s_{l-1})) from position l - 1, then the MLP, gated to position l, has neuron
    (s, r) with pre-activation flag - Hamming(bin s) - Hamming(bin r) (= 1 only for s = s_{l-1},
    r = r_l) and writes bin(g_r(s)) - bin(s), so position l ends with bin(s_l).

    Repair of the proof: its active token is the first one (position 0), which reads r_1..r_k from
    later positions. Under the causal attention of next-token prediction (Section 2.1) the first token
    sees only itself, so here the running subject is handed down the prompt instead and the answer
    sits at the last token like every other construction; the lookup table is the proof's. This
    layout has one relation block where the proof has two (d = d_S + d_R + k + 2 against the proof's
    1 + d_S + 2 d_R + k: equal at R = 2, smaller for R > 2, one more at R = 1).
    """
    _check_tau(tau)
    N, R, k = task.N, task.R, task.k
    d_S, d_R = n_bits(N), n_bits(R)
    flag, S, Rb, pos = 0, slice(1, 1 + d_S), slice(1 + d_S, 1 + d_S + d_R), slice(1 + d_S + d_R, 2 + d_S + d_R + k)
    d = pos.stop
    bin_s, bin_r = binary(N, d_S, dtype), binary(R, d_R, dtype)

    embed = torch.zeros(N + R, d, dtype=dtype)
    embed[:N, flag] = 1
    embed[:N, S] = bin_s
    embed[N:, Rb] = bin_r
    pos_embed = torch.zeros(k + 1, d, dtype=dtype)
    pos_embed[:, pos] = torch.eye(k + 1, dtype=dtype)

    # neuron (s, r) at index s * R + r
    s_idx, r_idx = torch.arange(N).repeat_interleave(R), torch.arange(R).repeat(N)
    w_s, b_s = mismatch_weights(bin_s)
    w_r, b_r = mismatch_weights(bin_r)
    out = bin_s[torch.as_tensor(task.bijections)[r_idx, s_idx]] - bin_s[s_idx]  # (N R, d_S): bin(g_r(s)) - bin(s)
    chain = [(q, q - 1) for q in range(1, k + 1)]  # every position reads its predecessor, in every layer
    layers = []
    for ell in range(1, k + 1):
        w_pos, b_pos = gate(d, pos, [ell], dtype)
        w1 = torch.zeros(d, N * R, dtype=dtype)
        w1[flag] = 1
        w1[S] = w_s[s_idx].T
        w1[Rb] = w_r[r_idx].T
        w1 += w_pos[:, None]
        b1 = b_s[s_idx] + b_r[r_idx] + b_pos
        w2 = torch.zeros(N * R, d, dtype=dtype)
        w2[:, S] = out
        head = relay_head(d, pos, chain, tau, slice(flag, S.stop), dtype)
        layers.append(Layer([head], MLP([w1, w2], [b1, torch.zeros(d, dtype=dtype)])))

    unembed = torch.zeros(d, N, dtype=dtype)
    unembed[S] = 2 * bin_s.T
    unembed[flag] = -bin_s.sum(dim=1)
    model = Transformer(embed, layers, unembed, pos_embed).to(resolve_device(device))
    formulas = {"d_model": 1 + d_S + 2 * d_R + k, "mlp_width": N * R, "n_layers": k, "n_heads": 1}
    return Construction("k-hop, key-value memory (Theorem 4.3 (1))", model, formulas)


def key_value_memory_first_token(
    task: KHopTask, causal: bool = False, tau: float = 50.0, device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float64,
) -> Construction:
    """Theorem 4.3 (1) in the proof's layout: the first token (the subject) fetches r_1..r_k, one per layer.

    Coordinates [flag | bin(s) (d_S) | bin(r) (d_R) | scratch (d_R) | position one-hot (k + 1)], as the
    proof's D = 1 + d_S + 2 d_R + k plus one position (k + 1 tokens need k + 1 one-hot coordinates; the
    proof's W_K = W_Q block I_{k+2} has one more still). Subject token: (1; bin(s_0); 0; 0; e_0),
    relation token at position i: (0; 0; bin(r_i); 0; e_i). Layer l: the head's query at position 0
    targets position l (score tau) and copies its bin(r_l) into the scratch block; the MLP's neuron
    (s, r) has pre-activation flag - Hamming(bin s, subject block) - Hamming(bin r, scratch) (= 1 only
    at the subject token on s = s_{l-1}, r = r_l) and writes bin(g_r(s)) - bin(s); d_R more neurons
    erase the scratch (ReLU of a non-negative block). After layer k the first token holds bin(s_k),
    and it is the one decoded (`readout_position = 0`).

    Where the proof is loose, the choice made: each layer's query names its target position (the
    proof instead increments the subject's position code, so that token 0 carries e_l exactly as
    token l does and the two tie in the scores; at layer 1 the proof's s_0 and r_1 both carry e_1).
    With `causal=False` (Section 2.2's attention, no mask) this is exact. With `causal=True` (the
    next-token model of Section 2.1) position 0 sees only itself, reads an all-zero relation and
    applies g_0 at every layer: the notebook measures that failure.
    """
    _check_tau(tau)
    N, R, k = task.N, task.R, task.k
    d_S, d_R = n_bits(N), n_bits(R)
    flag, S = 0, slice(1, 1 + d_S)
    Rb, scratch = slice(S.stop, S.stop + d_R), slice(S.stop + d_R, S.stop + 2 * d_R)
    pos = slice(scratch.stop, scratch.stop + k + 1)
    d = pos.stop
    bin_s, bin_r = binary(N, d_S, dtype), binary(R, d_R, dtype)

    embed = torch.zeros(N + R, d, dtype=dtype)
    embed[:N, flag] = 1
    embed[:N, S] = bin_s
    embed[N:, Rb] = bin_r
    pos_embed = torch.zeros(k + 1, d, dtype=dtype)
    pos_embed[:, pos] = torch.eye(k + 1, dtype=dtype)

    s_idx, r_idx = torch.arange(N).repeat_interleave(R), torch.arange(R).repeat(N)  # neuron (s, r) at s * R + r
    w_s, b_s = mismatch_weights(bin_s)
    w_r, b_r = mismatch_weights(bin_r)
    out = bin_s[torch.as_tensor(task.bijections)[r_idx, s_idx]] - bin_s[s_idx]  # (N R, d_S)
    facts, width = N * R, N * R + d_R
    layers = []
    for ell in range(1, k + 1):
        head = relay_head(d, pos, [(0, ell)], tau, Rb, dtype)
        head.W_O = torch.zeros(d_R, d, dtype=dtype)
        head.W_O[:, scratch] = torch.eye(d_R, dtype=dtype)  # the fetched relation lands in the scratch block
        head.causal = causal
        w1, b1 = torch.zeros(d, width, dtype=dtype), torch.zeros(width, dtype=dtype)
        w1[flag, :facts] = 1
        w1[S, :facts] = w_s[s_idx].T
        w1[scratch, :facts] = w_r[r_idx].T
        b1[:facts] = b_s[s_idx] + b_r[r_idx]
        w1[scratch, facts:] = torch.eye(d_R, dtype=dtype)
        w2 = torch.zeros(width, d, dtype=dtype)
        w2[:facts, S] = out
        w2[facts:, scratch] = -torch.eye(d_R, dtype=dtype)
        layers.append(Layer([head], MLP([w1, w2], [b1, torch.zeros(d, dtype=dtype)])))

    unembed = torch.zeros(d, N, dtype=dtype)
    unembed[S] = 2 * bin_s.T
    unembed[flag] = -bin_s.sum(dim=1)
    model = Transformer(embed, layers, unembed, pos_embed, readout_position=0).to(resolve_device(device))
    formulas = {"d_model": 1 + d_S + 2 * d_R + k, "mlp_width": N * R, "n_layers": k, "n_heads": 1}
    mask = "causal" if causal else "no mask"
    return Construction(f"k-hop, key-value memory, first-token layout, {mask} (Theorem 4.3 (1))", model, formulas)


def embedding_precomputation(
    task: KHopTask, tau: float = 50.0, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float64
) -> Construction:
    """Theorem 4.3 (2): depth k, d = R^k d_S + d_R + k + 1, MLP width 2 R^k d_S (first layer).

    Coordinates [tree (R^k d_S) | bin(r) (d_R) | position one-hot (k + 1)]. The subject token holds
    tree(s_0): bin(s_k) for every relation word (r_1..r_k) in lexicographic order, r_1 most
    significant, so the subtree of relation r_l is block r_l of the current tree. Layer l: position l
    copies the tree of size V_{l-1} = R^{k-l+1} d_S from position l - 1; the MLP has the proof's
    selector neurons (r, j), j < V_l, pre-activation tree[r V_l + j] - Hamming(bin r, bin r_l) gated
    to position l, plus V_{l-1} ReLU-identity neurons that erase the old tree ("erase the other
    sub-trees"), so position l ends with the chosen subtree of size V_l in front. After layer k the
    last token holds bin(s_k).
    """
    _check_tau(tau)
    N, R, k = task.N, task.R, task.k
    d_S, d_R = n_bits(N), n_bits(R)
    T = R**k * d_S
    tree, Rb, pos = slice(0, T), slice(T, T + d_R), slice(T + d_R, T + d_R + k + 1)
    d = pos.stop
    bin_s, bin_r = binary(N, d_S, dtype), binary(R, d_R, dtype)

    all_words = KHopTask(N, R, k, task.bijections).queries()  # subject-major, words lexicographic
    leaves = all_words.targets.reshape(N, R**k)  # (N, R^k): s_k for each word
    embed = torch.zeros(N + R, d, dtype=dtype)
    embed[:N, tree] = bin_s[leaves].reshape(N, T)
    embed[N:, Rb] = bin_r
    pos_embed = torch.zeros(k + 1, d, dtype=dtype)
    pos_embed[:, pos] = torch.eye(k + 1, dtype=dtype)

    w_r, b_r = mismatch_weights(bin_r)
    chain = [(q, q - 1) for q in range(1, k + 1)]
    layers = []
    for ell in range(1, k + 1):
        v_in, v_out = R ** (k - ell + 1) * d_S, R ** (k - ell) * d_S  # tree sizes before / after this layer
        head = relay_head(d, pos, chain, tau, slice(0, v_in), dtype)
        w_pos, b_pos = gate(d, pos, [ell], dtype)
        width = R * v_out + v_in
        w1, b1 = torch.zeros(d, width, dtype=dtype), torch.zeros(width, dtype=dtype)
        sel_r = torch.arange(R).repeat_interleave(v_out)  # selector (r, j) at index r * v_out + j
        sel = torch.arange(R * v_out)
        w1[sel, sel] = 1  # tree coordinate c(r, j) = r V_l + j is exactly the selector's index
        w1[Rb, : R * v_out] = w_r[sel_r].T
        w1[:, : R * v_out] += w_pos[:, None]
        b1[: R * v_out] = b_r[sel_r] + b_pos
        erase = torch.arange(v_in)
        w1[erase, R * v_out + erase] = 1
        w2 = torch.zeros(width, d, dtype=dtype)
        w2[sel, sel % v_out] = 1
        w2[R * v_out + erase, erase] = -1
        layers.append(Layer([head], MLP([w1, w2], [b1, torch.zeros(d, dtype=dtype)])))

    unembed = torch.zeros(d, N, dtype=dtype)
    unembed[:d_S] = 2 * bin_s.T
    unembed[pos.start + k] = -bin_s.sum(dim=1)
    model = Transformer(embed, layers, unembed, pos_embed).to(resolve_device(device))
    formulas = {"d_model": T + d_R + k + 1, "mlp_width": T, "n_layers": k, "n_heads": 1}
    return Construction("k-hop, embedding pre-computation (Theorem 4.3 (2))", model, formulas)
