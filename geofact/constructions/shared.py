"""Theorem 4.1 (`thm:shared attr`, proof in Appendix G): shared attributes in dimension ~ 4 R log N.

Three constructions of the proof, each as weights of `geofact.transformer.Transformer`:

1. `shared_attribute_mlp`: uniform attention and a ReLU MLP acting as a relation-conditioned
   selector; d = 4 R log N + 1.
2. `shared_attribute_attention`: no MLP, R heads (one per relation), d = 4 R log N + 4 log R + 1.
3. `shared_attribute_hierarchical`: 2 heads per layer, 1 + log R layers, a BOS token.

Common to all: the subject i is embedded as the stack (v_{g_1(i)}; ...; v_{g_R(i)}) of the codes of
its R attributes (Lemma G.1 codes, length m = ceil(4 log2 N), `geofact.codes.construction_codes`), and the answer is decoded by argmax of
<state, v_a> over the N attributes. Choices the proof leaves implicit are stated per function.
"""

from __future__ import annotations

import math

import torch

from geofact.codes import construction_codes, index_bits, lemma_code_length
from geofact.constructions.base import Construction
from geofact.constructions.primitives import averaging_head, lay_out
from geofact.host import as_device
from geofact.task import SharedAttributeTask
from geofact.transformer import MLP, AttentionHead, Layer, Transformer


def answer_stacks(task: SharedAttributeTask, v: torch.Tensor) -> torch.Tensor:
    """(N, R m): row i is (v_{g_1(i)}; ...; v_{g_R(i)}), the answer stack every construction embeds subject i as."""
    return torch.cat([v[torch.as_tensor(task.bijections[r])] for r in range(task.R)], dim=1)


def slot_blocks(R: int, m: int) -> list[tuple[str, int]]:
    """The answer stack's R slots of m coordinates, slot j holding v_{g_j(i)}."""
    return [(f"slot {j + 1}", m) for j in range(R)]


def first_slot_unembedding(v: torch.Tensor, d: int) -> torch.Tensor:
    """(d, N): attribute a is read as <state, (v_a; 0)>, i.e. against slot 1 only."""
    unembed = torch.zeros(d, len(v), dtype=v.dtype)
    unembed[: v.shape[1]] = v.T
    return unembed


def _finish(name: str, model: Transformer, formulas: dict[str, float], device, blocks: dict[str, slice],
            prefix=()) -> Construction:
    return Construction(name, model.to(as_device(device)), formulas, tuple(prefix), blocks=blocks)


# ---- the MLP version ---------------------------------------------------------------------------


def mlp_embeddings(task: SharedAttributeTask, v: torch.Tensor, blocks: dict[str, slice]) -> torch.Tensor:
    """x_i = (stack_i; 0) and r_j = (0; j) with j in 1..R: the relation is one scalar coordinate."""
    N, R = task.N, task.R
    embed = torch.zeros(N + R, blocks["j"].stop, dtype=v.dtype)
    embed[:N, : R * v.shape[1]] = answer_stacks(task, v)
    embed[N + torch.arange(R), blocks["j"].start] = torch.arange(1, R + 1, dtype=v.dtype)
    return embed


def selector_mlp(R: int, m: int, dtype: torch.dtype) -> MLP:
    """The proof's relation-conditioned selector: after it (and its residual) slot 1 holds v_{g_j(i)}.

    Hidden 1 = [P | Q | A | B] = [z]_+, [-z]_+ of the stack (2 R m units) and [l - j]_+, [j - l]_+
    (2 R units), so that f_l(j) = 2 (A_l + B_l) = 2 |j - l| is zero iff l = j, else >= 2.
    Hidden 2 = the gates [s - f_l]_+ and [-s - f_l]_+ of every stack coordinate, s = P - Q (2 R m
    units: s when l = j, 0 otherwise, since entries are ±1), plus a ReLU identity of slot 1 (2 m units).
    Output: slot 1 += sum_l gate_l - slot 1, so after the residual slot 1 holds exactly v_{g_j(i)}.
    """
    d, j_coord = R * m + 1, R * m
    h1 = 2 * R * m + 2 * R
    w1, b1 = torch.zeros(d, h1, dtype=dtype), torch.zeros(h1, dtype=dtype)
    stack = torch.arange(R * m)
    w1[stack, stack] = 1
    w1[stack, R * m + stack] = -1
    ell = torch.arange(1, R + 1, dtype=dtype)
    a_idx, b_idx = 2 * R * m + torch.arange(R), 2 * R * m + R + torch.arange(R)
    w1[j_coord, a_idx], b1[a_idx] = -1, ell
    w1[j_coord, b_idx], b1[b_idx] = 1, -ell

    h2 = 2 * R * m + 2 * m  # [G+ (Rm) | G- (Rm) | S+ (m) | S- (m)]
    w2, b2 = torch.zeros(h1, h2, dtype=dtype), torch.zeros(h2, dtype=dtype)
    block_of = stack // m  # relation slot of each stack coordinate
    for sign, offset in ((1, 0), (-1, R * m)):
        w2[stack, offset + stack] = sign
        w2[R * m + stack, offset + stack] = -sign
        w2[a_idx[block_of], offset + stack] = -2
        w2[b_idx[block_of], offset + stack] = -2
    first = torch.arange(m)
    for sign, offset in ((1, 2 * R * m), (-1, 2 * R * m + m)):
        w2[first, offset + first] = sign
        w2[R * m + first, offset + first] = -sign

    w3, b3 = torch.zeros(h2, d, dtype=dtype), torch.zeros(d, dtype=dtype)  # slot 1 += sum_l (G+_l - G-_l) - (S+ - S-)
    coord = stack % m
    w3[stack, coord] = 1
    w3[R * m + stack, coord] = -1
    w3[2 * R * m + first, first] = -1
    w3[2 * R * m + m + first, first] = 1
    return MLP([w1, w2, w3], [b1, b2, b3])


def shared_attribute_mlp(
    task: SharedAttributeTask,
    seed: int = 0,
    literal_value_matrix: bool = False,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float64,
) -> Construction:
    """Theorem 4.1, MLP version: uniform attention, then a 3-layer ReLU MLP selects block j.

    Embeddings (d = R m + 1, `mlp_embeddings`): x_i = (stack_i; 0), r_j = (0; j). The head averages the
    two tokens (`averaging_head`) and the MLP (`selector_mlp`) keeps block j in slot 1.

    Choices made explicit:
    * residual: as in Theorem F.1, W_V = 2 diag(I_{Rm}, 0) so that the state after attention is exactly
      (stack_i; j). `literal_value_matrix=True` builds the proof's W_V = 2 I, which with Section 2.2's
      residual gives (stack_i; 2j): the gate of block 2j opens (none when 2j > R), not block j's;
    * the MLP has two hidden layers where the proof writes one (see `selector_mlp`);
    * the unembedding reads block 1: attribute a has column (v_a; 0).
    Widths: 2Rm + 2R and 2Rm + 2m, i.e. O(R log N) neurons as the proof says; the statement's
    "width R" is not what the proof builds (the notebook compares both).
    """
    N, R = task.N, task.R
    m = lemma_code_length(N, "2")
    blocks = lay_out(slot_blocks(R, m) + [("j", 1)])
    d = blocks["j"].stop
    v = torch.as_tensor(construction_codes(N, m, seed), dtype=dtype)  # (N, m)
    embed = mlp_embeddings(task, v, blocks)
    head = averaging_head(d, slice(0, d) if literal_value_matrix else slice(0, R * m), 2, dtype)
    model = Transformer(embed, [Layer([head], selector_mlp(R, m, dtype))], first_slot_unembedding(v, d))
    formulas = {"d_model": 4 * R * math.log2(N) + 1, "mlp_width": R, "n_layers": 1}  # the statement's numbers
    return _finish("shared attributes, MLP (Theorem 4.1)", model, formulas, device, blocks)


# ---- the attention-only version ----------------------------------------------------------------


def attention_embeddings(task: SharedAttributeTask, v: torch.Tensor, u: torch.Tensor,
                         blocks: dict[str, slice]) -> torch.Tensor:
    """x_i = (stack_i; 0; 1) and r_j = (0; u_j; -1): the last coordinate tells subject from relation."""
    N, R = task.N, task.R
    last = blocks["±1"].start
    embed = torch.zeros(N + R, last + 1, dtype=v.dtype)
    embed[:N, : R * v.shape[1]] = answer_stacks(task, v)
    embed[:N, last] = 1
    embed[N:, blocks["u"]] = u
    embed[N:, last] = -1
    return embed


def relation_head(h: int, u: torch.Tensor, m: int, blocks: dict[str, slice], offset: float,
                  beta: float) -> AttentionHead:
    """Head h (relation h): key beta * (last coordinate), query 2 <u_h, u-block> + offset * (last
    coordinate), value = slot h, output into slot 1.

    At the relation token of relation j the query is 2 <u_h, u_j> - offset: positive, the head attends
    the subject (key +beta) and copies v_{g_h(i)} when h = j; negative, it attends its own token (key
    -beta), whose slot h is empty.
    """
    d, last = blocks["±1"].stop, blocks["±1"].start
    dtype = u.dtype
    w_q = torch.zeros(d, 1, dtype=dtype)
    w_q[blocks["u"], 0] = 2 * u[h]
    w_q[last, 0] = offset
    w_k = torch.zeros(d, 1, dtype=dtype)
    w_k[last, 0] = beta
    w_v = torch.zeros(d, m, dtype=dtype)
    w_v[h * m : (h + 1) * m] = torch.eye(m, dtype=dtype)
    w_o = torch.cat([torch.eye(m, dtype=dtype), torch.zeros(m, d - m, dtype=dtype)], dim=1)
    return AttentionHead(w_q, w_k, w_v, w_o, "softmax")


def shared_attribute_attention(
    task: SharedAttributeTask,
    seed: int = 0,
    beta: float = 10.0,
    query_offset: str = "repaired",
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float64,
) -> Construction:
    """Theorem 4.1, attention-only version: R heads, one per relation, no MLP.

    Embeddings (d = R m + d_u + 1, d_u = ceil(4 log2 R), `attention_embeddings`) and one head per
    relation (`relation_head`); the unembedding reads slot 1.

    The paper takes the query offset c = d_u (`query_offset="paper"`), which needs <u_h, u_j> < d_u / 2
    for h != j; Lemma G.1 only gives <= 3 d_u / 4, so some heads fire for the wrong relation. The repair
    (`"repaired"`, default) takes c = 2 d_u - 1: positive for h = j, at most -3 for any distinct codes.
    `beta` is the paper's "large beta": leakage is sigmoid(-2 beta |q|), below 1e-17 at beta = 10.
    """
    if query_offset not in ("repaired", "paper"):
        raise ValueError(f"query_offset must be 'repaired' or 'paper', got {query_offset!r}")
    if beta <= 0:
        raise ValueError(f"beta must be > 0, got {beta}")
    N, R = task.N, task.R
    m = lemma_code_length(N, "2")
    d_u = math.ceil(4 * math.log2(R))
    blocks = lay_out(slot_blocks(R, m) + [("u", d_u), ("±1", 1)])
    v = torch.as_tensor(construction_codes(N, m, seed), dtype=dtype)
    u = torch.as_tensor(construction_codes(R, d_u, seed + 1), dtype=dtype)  # (R, d_u)
    embed = attention_embeddings(task, v, u, blocks)
    c = d_u if query_offset == "paper" else 2 * d_u - 1
    heads = [relation_head(h, u, m, blocks, c, beta) for h in range(R)]
    model = Transformer(embed, [Layer(heads)], first_slot_unembedding(v, embed.shape[1]))
    formulas = {"d_model": 4 * R * math.log2(N) + 4 * math.log2(R) + 1, "n_heads": R, "head_dim": 4 * math.log2(N), "n_layers": 1}
    return _finish(f"shared attributes, attention only (Theorem 4.1, {query_offset} query)", model, formulas, device,
                   blocks)


# ---- the hierarchical version ------------------------------------------------------------------


def relation_bits(R: int) -> torch.Tensor:
    """b(j) in {±1}^{ceil(log2 R)}: bit t of j (0-indexed) as +1 if set, else -1. Shape (R, n_bits)."""
    return torch.as_tensor(2 * index_bits(R) - 1, dtype=torch.float64)


def hierarchical_embeddings(task: SharedAttributeTask, v: torch.Tensor, bits: torch.Tensor,
                            blocks: dict[str, slice]) -> torch.Tensor:
    """Subjects, relations, BOS: x_i = (stack_i; 0; 1; 0), r_j = (0; b(j); -1; 0), BOS = (0; 0; 0; 1)."""
    N, R = task.N, task.R
    flag, bos_flag = blocks["flag"].start, blocks["BOS"].start
    embed = torch.zeros(N + R + 1, bos_flag + 1, dtype=v.dtype)
    embed[:N, : R * v.shape[1]] = answer_stacks(task, v)
    embed[:N, flag] = 1
    embed[N : N + R, blocks["b"]] = bits
    embed[N : N + R, flag] = -1
    embed[N + R, bos_flag] = 1
    return embed


def bit_heads(t: int, bits: torch.Tensor, m: int, blocks: dict[str, slice], beta: float) -> list[AttentionHead]:
    """Layer t + 1's two heads: erase the slots whose bit t disagrees with the relation's.

    Keys are beta (flag, BOS flag). Head A's query is beta/2 [(flag, -flag) + b_t (-1, -1)] and head B's
    has -b_t, so at the relation token one head attends the relation itself (its slots are empty) and
    the other attends BOS; W_VO^A = -P^-_t and W_VO^B = -P^+_t then subtract, from the relation token's
    own state, the slots whose bit t is the other one (P^±_t: slots with bit t set, unset).
    """
    R, d, dtype = len(bits), blocks["BOS"].stop, bits.dtype
    flag, bit = blocks["flag"].start, blocks["b"].start + t
    eye = torch.eye(d, dtype=dtype)
    w_k = torch.zeros(d, 2, dtype=dtype)
    w_k[flag, 0] = w_k[blocks["BOS"].start, 1] = beta
    proj = {}
    for sign in (1, -1):  # P^+_t (slots with bit t set), P^-_t
        p = torch.zeros(d, d, dtype=dtype)
        for r in range(R):
            if bits[r, t] == sign:
                p[r * m : (r + 1) * m, r * m : (r + 1) * m] = torch.eye(m, dtype=dtype)
        proj[sign] = p
    heads = []
    for polarity, erase in ((1, proj[-1]), (-1, proj[1])):  # head A, head B
        w_q = torch.zeros(d, 2, dtype=dtype)
        w_q[flag, 0], w_q[bit, 0] = beta / 2, -polarity * beta / 2
        w_q[flag, 1], w_q[bit, 1] = -beta / 2, -polarity * beta / 2
        heads.append(AttentionHead(w_q, w_k, -erase, eye, "softmax"))
    return heads


def shared_attribute_hierarchical(
    task: SharedAttributeTask,
    seed: int = 0,
    beta: float = 10.0,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float64,
) -> Construction:
    """Theorem 4.1, hierarchical version (Appendix G): 2 heads per layer, 1 + log R layers, BOS token.

    Coordinates: [answer stack (R m) | bit block b (n_bits) | flag | BOS flag], d = R m + n_bits + 2;
    prompts are (BOS, s, r) (`hierarchical_embeddings`). Layer 0: one uniform head with W_VO = 3 P_stack
    copies the stack into the relation token (the average over BOS, subject, relation is undone by the
    3). Layer t + 1 erases the slots whose bit t disagrees with j (`bit_heads`). After all bits only
    slot j is left; the unembedding sums the slots (column a = (v_a; ...; v_a; 0)).

    Choice made explicit: the paper's query bias "(-1, 1) beta/2" needs a constant coordinate (its
    footnote); at the relation token, the only query that matters, flag = -1, so (flag, -flag) is that
    bias and d stays R m + log R + 2. The subject token's own state is never attended to after layer 0.
    """
    if beta <= 0:
        raise ValueError(f"beta must be > 0, got {beta}")
    N, R = task.N, task.R
    m = lemma_code_length(N, "2")
    bits = relation_bits(R).to(dtype)
    n_bits = bits.shape[1]
    blocks = lay_out(slot_blocks(R, m) + [("b", n_bits), ("flag", 1), ("BOS", 1)])
    d = blocks["BOS"].stop
    v = torch.as_tensor(construction_codes(N, m, seed), dtype=dtype)
    embed = hierarchical_embeddings(task, v, bits, blocks)
    layers = [Layer([averaging_head(d, slice(0, R * m), 3, dtype)])]
    layers += [Layer(bit_heads(t, bits, m, blocks, beta)) for t in range(n_bits)]
    unembed = v.T.repeat(R, 1)  # (R m, N): every slot read against v_a
    unembed = torch.cat([unembed, torch.zeros(n_bits + 2, N, dtype=dtype)])
    model = Transformer(embed, layers, unembed)
    formulas = {"d_model": 4 * R * math.log2(N) + math.log2(R) + 2, "n_layers": 1 + math.log2(R), "n_heads": 2}
    return _finish("shared attributes, hierarchical attention (Theorem 4.1)", model, formulas, device, blocks,
                   prefix=(N + R,))
