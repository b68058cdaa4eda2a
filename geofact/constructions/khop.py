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

import torch

from geofact.codes import n_bits
from geofact.constructions.base import Construction
from geofact.constructions.primitives import (
    binary,
    check_tau,
    gate,
    hamming_unembedding,
    lay_out,
    mismatch_weights,
    position_one_hot,
    predecessor_head,
    relay_head,
    width,
)
from geofact.host import as_device
from geofact.task import KHopTask
from geofact.transformer import MLP, AttentionHead, Layer, Transformer

# ---- Theorem 4.3 (1): the key-value memory, stage by stage ------------------------------------


def kv_layout(N: int, R: int, k: int, scratch: bool = False) -> dict[str, slice]:
    """[flag | bin(s) (d_S) | bin(r) (d_R) | (scratch (d_R)) | position one-hot (k + 1)].

    With the scratch block this is the proof's D = 1 + d_S + 2 d_R + k plus one position coordinate
    (k + 1 tokens need k + 1); the last-token layout does without the scratch block.
    """
    d_S, d_R = n_bits(N), n_bits(R)
    return lay_out([("flag", 1), ("bin(s)", d_S), ("bin(r)", d_R)] + [("scratch", d_R)] * scratch
                   + [("position", k + 1)])


def kv_embeddings(task: KHopTask, blocks: dict[str, slice], dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Token (N + R, d) and position (k + 1, d) embeddings: subject s is (1; bin(s); 0), relation r is
    (0; 0; bin(r)), and position i adds e_i."""
    d = blocks["position"].stop
    embed = torch.zeros(task.N + task.R, d, dtype=dtype)
    embed[: task.N, blocks["flag"]] = 1
    embed[: task.N, blocks["bin(s)"]] = binary(task.N, dtype)
    embed[task.N :, blocks["bin(r)"]] = binary(task.R, dtype)
    return embed, position_one_hot(d, blocks["position"], dtype)


def fact_neurons(task: KHopTask, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The proof's lookup table: one neuron per fact (s, r), at index s R + r.

    Returns its weights on the subject bits (N R, d_S) and on the relation bits (N R, d_R), its bias
    (N R,) and what it writes (N R, d_S). With the flag's +1 the pre-activation is
    1 - Hamming(x, bin s) - Hamming(y, bin r): 1 on the fact (s, r) itself, <= 0 on any other, and the
    neuron writes bin(g_r(s)) - bin(s), which turns the subject bits into the answer's.
    """
    N, R = task.N, task.R
    bin_s, bin_r = binary(N, dtype), binary(R, dtype)
    s_idx, r_idx = torch.arange(N).repeat_interleave(R), torch.arange(R).repeat(N)
    w_s, b_s = mismatch_weights(bin_s)
    w_r, b_r = mismatch_weights(bin_r)
    out = bin_s[torch.as_tensor(task.bijections)[r_idx, s_idx]] - bin_s[s_idx]  # bin(g_r(s)) - bin(s)
    return w_s[s_idx], w_r[r_idx], b_s[s_idx] + b_r[r_idx], out


def lookup_mlp(task: KHopTask, blocks: dict[str, slice], relation: str, position: int | None,
               dtype: torch.dtype) -> MLP:
    """The MLP of one layer: the fact neurons reading the relation bits from block `relation`.

    `position` gates them to one position (the proof's 2 e_l - 1 term: 0 there, -2 elsewhere); None
    leaves them ungated. With a scratch block, d_R more neurons erase it after use (ReLU of a
    non-negative block, written back negated), so the next layer's relation lands on a clean block.
    """
    d = blocks["position"].stop
    w_s, w_r, bias, out = fact_neurons(task, dtype)
    facts = len(bias)
    scratch = blocks.get("scratch")
    n_erase = width(scratch) if scratch else 0
    w1, b1 = torch.zeros(d, facts + n_erase, dtype=dtype), torch.zeros(facts + n_erase, dtype=dtype)
    w1[blocks["flag"], :facts] = 1
    w1[blocks["bin(s)"], :facts] = w_s.T
    w1[blocks[relation], :facts] = w_r.T
    if position is None:
        b1[:facts] = bias
    else:
        w_pos, b_pos = gate(d, blocks["position"], [position], dtype)
        w1[:, :facts] += w_pos[:, None]
        b1[:facts] = bias + b_pos
    w2 = torch.zeros(facts + n_erase, d, dtype=dtype)
    w2[:facts, blocks["bin(s)"]] = out
    if scratch:
        w1[scratch, facts:] = torch.eye(n_erase, dtype=dtype)
        w2[facts:, scratch] = -torch.eye(n_erase, dtype=dtype)
    return MLP([w1, w2], [b1, torch.zeros(d, dtype=dtype)])


def handoff_head(blocks: dict[str, slice], k: int, tau: float, dtype: torch.dtype) -> AttentionHead:
    """Every position q >= 1 reads position q - 1 and copies its (flag; bin(s)): the running subject is
    handed one token down the prompt per layer (the repair of the proof's first-token layout)."""
    carried = slice(blocks["flag"].start, blocks["bin(s)"].stop)
    return predecessor_head(blocks["position"].stop, blocks["position"], k, tau, carried, dtype)


def fetch_relation_head(blocks: dict[str, slice], layer: int, tau: float, causal: bool,
                        dtype: torch.dtype) -> AttentionHead:
    """The proof's head of layer l: position 0 (the subject) reads position l and copies its bin(r_l)
    into the scratch block. Only unmasked attention lets position 0 see a later token."""
    head = relay_head(blocks["position"].stop, blocks["position"], [(0, layer)], tau, blocks["bin(r)"], dtype)
    head.W_O = torch.zeros(width(blocks["bin(r)"]), blocks["position"].stop, dtype=dtype)
    head.W_O[:, blocks["scratch"]] = torch.eye(width(blocks["scratch"]), dtype=dtype)
    head.causal = causal
    return head


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
    check_tau(tau)
    N, R, k = task.N, task.R, task.k
    blocks = kv_layout(N, R, k)
    embed, pos_embed = kv_embeddings(task, blocks, dtype)
    layers = [Layer([handoff_head(blocks, k, tau, dtype)], lookup_mlp(task, blocks, "bin(r)", ell, dtype))
              for ell in range(1, k + 1)]
    unembed = hamming_unembedding(N, embed.shape[1], blocks["bin(s)"], blocks["flag"].start, dtype)
    model = Transformer(embed, layers, unembed, pos_embed).to(as_device(device))
    d_S, d_R = n_bits(N), n_bits(R)
    formulas = {"d_model": 1 + d_S + 2 * d_R + k, "mlp_width": N * R, "n_layers": k, "n_heads": 1}
    return Construction("k-hop, key-value memory (Theorem 4.3 (1))", model, formulas, blocks=blocks)


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
    check_tau(tau)
    N, R, k = task.N, task.R, task.k
    blocks = kv_layout(N, R, k, scratch=True)
    embed, pos_embed = kv_embeddings(task, blocks, dtype)
    layers = [Layer([fetch_relation_head(blocks, ell, tau, causal, dtype)],
                    lookup_mlp(task, blocks, "scratch", None, dtype))
              for ell in range(1, k + 1)]
    unembed = hamming_unembedding(N, embed.shape[1], blocks["bin(s)"], blocks["flag"].start, dtype)
    model = Transformer(embed, layers, unembed, pos_embed, readout_position=0).to(as_device(device))
    d_S, d_R = n_bits(N), n_bits(R)
    formulas = {"d_model": 1 + d_S + 2 * d_R + k, "mlp_width": N * R, "n_layers": k, "n_heads": 1}
    mask = "causal" if causal else "no mask"
    return Construction(f"k-hop, key-value memory, first-token layout, {mask} (Theorem 4.3 (1))", model, formulas,
                        blocks=blocks)


# ---- Theorem 4.3 (2): embedding pre-computation, stage by stage --------------------------------


def tree_layout(N: int, R: int, k: int) -> dict[str, slice]:
    """[tree (R^k d_S) | bin(r) (d_R) | position one-hot (k + 1)]."""
    return lay_out([("tree", R**k * n_bits(N)), ("bin(r)", n_bits(R)), ("position", k + 1)])


def tree_embeddings(task: KHopTask, blocks: dict[str, slice], dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Subject s holds tree(s): bin(s_k) for every relation word (r_1..r_k), in lexicographic order with
    r_1 most significant, so the subtree under relation r_1 is block r_1 of the tree. Relation r is
    (0; bin(r)); position i adds e_i."""
    N, R, k = task.N, task.R, task.k
    d = blocks["position"].stop
    all_words = KHopTask(N, R, k, task.bijections).queries()  # subject-major, words lexicographic
    leaves = all_words.targets.reshape(N, R**k)  # (N, R^k): s_k for each word
    embed = torch.zeros(N + R, d, dtype=dtype)
    embed[:N, blocks["tree"]] = binary(N, dtype)[leaves].reshape(N, width(blocks["tree"]))
    embed[N:, blocks["bin(r)"]] = binary(R, dtype)
    return embed, position_one_hot(d, blocks["position"], dtype)


def subtree_sizes(N: int, R: int, k: int, layer: int) -> tuple[int, int]:
    """(V_{l-1}, V_l): the tree's size before and after layer l, V_l = R^{k-l} d_S."""
    return R ** (k - layer + 1) * n_bits(N), R ** (k - layer) * n_bits(N)


def tree_relay_head(blocks: dict[str, slice], k: int, v_in: int, tau: float, dtype: torch.dtype) -> AttentionHead:
    """Every position q >= 1 reads position q - 1 and copies the front V_{l-1} coordinates of the tree
    block: the tree that is left after the previous layers' choices."""
    return predecessor_head(blocks["position"].stop, blocks["position"], k, tau, slice(0, v_in), dtype)


def subtree_selector_mlp(blocks: dict[str, slice], R: int, layer: int, v_in: int, v_out: int,
                         dtype: torch.dtype) -> MLP:
    """Keep the subtree of relation r_l, gated to position l, and erase the rest.

    Selector neuron (r, j), j < V_l, sits at index r V_l + j and reads tree coordinate r V_l + j with
    pre-activation tree[r V_l + j] - Hamming(bin r, bin r_l): the bit itself for r = r_l, <= 0
    otherwise; it writes to coordinate j, the front of the tree. V_{l-1} ReLU-identity neurons erase the
    old tree first (the proof's "erase the other sub-trees"), so position l ends with the chosen
    subtree of size V_l in front.
    """
    d = blocks["position"].stop
    w_r, b_r = mismatch_weights(binary(R, dtype))
    w_pos, b_pos = gate(d, blocks["position"], [layer], dtype)
    n_sel = R * v_out
    w1, b1 = torch.zeros(d, n_sel + v_in, dtype=dtype), torch.zeros(n_sel + v_in, dtype=dtype)
    sel_r = torch.arange(R).repeat_interleave(v_out)  # the relation r of selector (r, j)
    sel = torch.arange(n_sel)
    w1[sel, sel] = 1  # tree coordinate r V_l + j is exactly the selector's index
    w1[blocks["bin(r)"], :n_sel] = w_r[sel_r].T
    w1[:, :n_sel] += w_pos[:, None]
    b1[:n_sel] = b_r[sel_r] + b_pos
    erase = torch.arange(v_in)
    w1[erase, n_sel + erase] = 1
    w2 = torch.zeros(n_sel + v_in, d, dtype=dtype)
    w2[sel, sel % v_out] = 1
    w2[n_sel + erase, erase] = -1
    return MLP([w1, w2], [b1, torch.zeros(d, dtype=dtype)])


def embedding_precomputation(
    task: KHopTask, tau: float = 50.0, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float64
) -> Construction:
    """Theorem 4.3 (2): depth k, d = R^k d_S + d_R + k + 1, MLP width 2 R^k d_S (first layer).

    Coordinates [tree (R^k d_S) | bin(r) (d_R) | position one-hot (k + 1)]. The subject token holds
    tree(s_0) (`tree_embeddings`). Layer l: position l copies the tree of size V_{l-1} = R^{k-l+1} d_S
    from position l - 1 (`tree_relay_head`), and the MLP keeps the subtree of relation r_l
    (`subtree_selector_mlp`). After layer k the last token holds bin(s_k) in the tree's first d_S
    coordinates, read out against the position-k coordinate as bias.
    """
    check_tau(tau)
    N, R, k = task.N, task.R, task.k
    blocks = tree_layout(N, R, k)
    embed, pos_embed = tree_embeddings(task, blocks, dtype)
    layers = []
    for ell in range(1, k + 1):
        v_in, v_out = subtree_sizes(N, R, k, ell)
        layers.append(Layer([tree_relay_head(blocks, k, v_in, tau, dtype)],
                            subtree_selector_mlp(blocks, R, ell, v_in, v_out, dtype)))
    answer = slice(0, n_bits(N))
    unembed = hamming_unembedding(N, embed.shape[1], answer, blocks["position"].start + k, dtype)
    model = Transformer(embed, layers, unembed, pos_embed).to(as_device(device))
    T = width(blocks["tree"])
    formulas = {"d_model": T + n_bits(R) + k + 1, "mlp_width": T, "n_layers": k, "n_heads": 1}
    return Construction("k-hop, embedding pre-computation (Theorem 4.3 (2))", model, formulas, blocks=blocks)
