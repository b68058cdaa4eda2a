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

from geofact.codes import construction_codes, lemma_code_length
from geofact.constructions.base import Construction
from geofact.device import resolve_device
from geofact.task import SharedAttributeTask
from geofact.transformer import MLP, AttentionHead, Layer, Transformer


def _stack(task: SharedAttributeTask, v: torch.Tensor) -> torch.Tensor:
    """(N, R*m): row i is (v_{g_1(i)}; ...; v_{g_R(i)}), the answer stack of subject i."""
    return torch.cat([v[torch.as_tensor(task.bijections[r])] for r in range(task.R)], dim=1)


def _zeros(*shape: int, dtype: torch.dtype) -> torch.Tensor:
    return torch.zeros(*shape, dtype=dtype)


def _finish(name: str, model: Transformer, formulas: dict[str, float], device, prefix=()) -> Construction:
    return Construction(name, model.to(resolve_device(device)), formulas, tuple(prefix))


def shared_attribute_mlp(
    task: SharedAttributeTask,
    seed: int = 0,
    literal_value_matrix: bool = False,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float64,
) -> Construction:
    """Theorem 4.1, MLP version: uniform attention, then a 3-layer ReLU MLP selects block j.

    Embeddings (d = R m + 1): x_i = (stack_i; 0), r_j = (0; j) with j in 1..R. The proof's MLP computes
    f_l(j) = 2(|j - l|) (zero iff l = j, else >= 2) and gates every coordinate of block l with
    [s - f_l]_+ - [-s - f_l]_+, which is s when l = j and 0 otherwise (entries are ±1).

    Choices made explicit:
    * residual: as in Theorem F.1, W_V = 2 diag(I_{Rm}, 0) so that the state after attention is exactly
      (stack_i; j). `literal_value_matrix=True` builds the proof's W_V = 2 I, which with Section 2.2's
      residual gives (stack_i; 2j): the gate of block 2j opens (none when 2j > R), not block j's;
    * layers of the MLP: hidden 1 = ReLU identity of the stack (2Rm units) and [l - j]_+, [j - l]_+
      (2R units); hidden 2 = the 2Rm gates plus a ReLU identity of block 1 (2m units); output = block 1
      receives sum_l gate_l - block 1, so after the MLP's residual block 1 holds exactly v_{g_j(i)};
    * the unembedding reads block 1: attribute a has column (v_a; 0).
    Widths: 2Rm + 2R and 2Rm + 2m, i.e. O(R log N) neurons as the proof says; the statement's
    "width R" is not what the proof builds (the notebook compares both).
    """
    N, R = task.N, task.R
    m = lemma_code_length(N, "2")
    d = R * m + 1
    j_coord = R * m
    v = torch.as_tensor(construction_codes(N, m, seed), dtype=dtype)  # (N, m)

    embed = _zeros(N + R, d, dtype=dtype)
    embed[:N, : R * m] = _stack(task, v)
    embed[N + torch.arange(R), j_coord] = torch.arange(1, R + 1, dtype=dtype)

    w_v = 2 * torch.eye(d, dtype=dtype)
    if not literal_value_matrix:
        w_v[j_coord, j_coord] = 0  # the relation index arrives once, through the residual
    head = AttentionHead(_zeros(d, 1, dtype=dtype), _zeros(d, 1, dtype=dtype), w_v, torch.eye(d, dtype=dtype), "uniform")

    # hidden 1: [P (Rm) | Q (Rm) | A (R) | B (R)] = [z]_+, [-z]_+, [l - j]_+, [j - l]_+
    h1 = 2 * R * m + 2 * R
    w1, b1 = _zeros(d, h1, dtype=dtype), _zeros(h1, dtype=dtype)
    stack = torch.arange(R * m)
    w1[stack, stack] = 1
    w1[stack, R * m + stack] = -1
    ell = torch.arange(1, R + 1, dtype=dtype)
    a_idx, b_idx = 2 * R * m + torch.arange(R), 2 * R * m + R + torch.arange(R)
    w1[j_coord, a_idx], b1[a_idx] = -1, ell
    w1[j_coord, b_idx], b1[b_idx] = 1, -ell

    # hidden 2: [G+ (Rm) | G- (Rm) | S+ (m) | S- (m)]; s = P - Q, f_l = 2 (A_l + B_l)
    h2 = 2 * R * m + 2 * m
    w2, b2 = _zeros(h1, h2, dtype=dtype), _zeros(h2, dtype=dtype)
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

    # output: block 1 += sum_l (G+_l - G-_l) - (S+ - S-)
    w3, b3 = _zeros(h2, d, dtype=dtype), _zeros(d, dtype=dtype)
    coord = stack % m
    w3[stack, coord] = 1
    w3[R * m + stack, coord] = -1
    w3[2 * R * m + first, first] = -1
    w3[2 * R * m + m + first, first] = 1

    unembed = _zeros(d, N, dtype=dtype)
    unembed[:m] = v.T
    model = Transformer(embed, [Layer([head], MLP([w1, w2, w3], [b1, b2, b3]))], unembed)
    formulas = {"d_model": 4 * R * math.log2(N) + 1, "mlp_width": R, "n_layers": 1}  # the statement's numbers
    return _finish("shared attributes, MLP (Theorem 4.1)", model, formulas, device)


def shared_attribute_attention(
    task: SharedAttributeTask,
    seed: int = 0,
    beta: float = 10.0,
    query_offset: str = "repaired",
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float64,
) -> Construction:
    """Theorem 4.1, attention-only version: R heads, one per relation, no MLP.

    Embeddings (d = R m + d_u + 1, d_u = ceil(4 log2 R)): x_i = (stack_i; 0; 1), r_j = (0; u_j; -1).
    Head h has key beta * (last coordinate) (+beta at the subject, -beta at a relation), query
    2 <u_h, u-block> + c * (last coordinate), value = block h, output into block 1. At the relation
    token of relation j the query of head h is 2 <u_h, u_j> - c: the head copies v_{g_h(i)} from the
    subject when it is positive and reads its own (empty) block h when it is negative.

    The paper takes c = d_u (`query_offset="paper"`), which needs <u_h, u_j> < d_u / 2 for h != j;
    Lemma G.1 only gives <= 3 d_u / 4, so some heads fire for the wrong relation. The repair
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
    d = R * m + d_u + 1
    last = d - 1
    v = torch.as_tensor(construction_codes(N, m, seed), dtype=dtype)
    u = torch.as_tensor(construction_codes(R, d_u, seed + 1), dtype=dtype)  # (R, d_u)

    embed = _zeros(N + R, d, dtype=dtype)
    embed[:N, : R * m] = _stack(task, v)
    embed[:N, last] = 1
    embed[N:, R * m : R * m + d_u] = u
    embed[N:, last] = -1

    c = d_u if query_offset == "paper" else 2 * d_u - 1
    heads = []
    for h in range(R):
        w_q = _zeros(d, 1, dtype=dtype)
        w_q[R * m : R * m + d_u, 0] = 2 * u[h]
        w_q[last, 0] = c
        w_k = _zeros(d, 1, dtype=dtype)
        w_k[last, 0] = beta
        w_v = _zeros(d, m, dtype=dtype)
        w_v[h * m : (h + 1) * m] = torch.eye(m, dtype=dtype)
        w_o = torch.cat([torch.eye(m, dtype=dtype), _zeros(m, d - m, dtype=dtype)], dim=1)
        heads.append(AttentionHead(w_q, w_k, w_v, w_o, "softmax"))

    unembed = _zeros(d, N, dtype=dtype)
    unembed[:m] = v.T
    model = Transformer(embed, [Layer(heads)], unembed)
    formulas = {"d_model": 4 * R * math.log2(N) + 4 * math.log2(R) + 1, "n_heads": R, "head_dim": 4 * math.log2(N), "n_layers": 1}
    return _finish(f"shared attributes, attention only (Theorem 4.1, {query_offset} query)", model, formulas, device)


def relation_bits(R: int) -> torch.Tensor:
    """b(j) in {±1}^{ceil(log2 R)}: bit t of j (0-indexed) as +1 if set, else -1. Shape (R, n_bits)."""
    n_bits = math.ceil(math.log2(R)) if R > 1 else 0
    bits = (torch.arange(R)[:, None] >> torch.arange(n_bits)[None, :]) & 1
    return (2 * bits - 1).to(torch.float64)


def shared_attribute_hierarchical(
    task: SharedAttributeTask,
    seed: int = 0,
    beta: float = 10.0,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float64,
) -> Construction:
    """Theorem 4.1, hierarchical version (Appendix G): 2 heads per layer, 1 + log R layers, BOS token.

    Coordinates: [answer stack (R m) | bit block b (n_bits) | flag | BOS flag], d = R m + n_bits + 2.
    BOS = (0; 0; 0; 1), x_i = (stack_i; 0; 1; 0), r_j = (0; b(j); -1; 0); prompts are (BOS, s, r).
    Layer 0: one uniform head with W_VO = 3 P_stack copies the stack into the relation token (the
    average over BOS, subject, relation is undone by the 3). Layer t + 1 (bit t): keys beta (flag,
    BOS flag); head A's query beta/2 [(flag, -flag) + b_t (-1, -1)] and head B's with -b_t make, at the
    relation token, one head attend the relation itself and the other BOS; W_VO^A = -P^-_t and
    W_VO^B = -P^+_t erase the slots whose bit t disagrees with j. After all bits only slot j is left;
    the unembedding sums the slots (column a = (v_a; ...; v_a; 0)).

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
    d = R * m + n_bits + 2
    flag, bos_flag = R * m + n_bits, R * m + n_bits + 1
    bos = N + R
    v = torch.as_tensor(construction_codes(N, m, seed), dtype=dtype)

    embed = _zeros(N + R + 1, d, dtype=dtype)  # subjects, relations, BOS
    embed[:N, : R * m] = _stack(task, v)
    embed[:N, flag] = 1
    embed[N : N + R, R * m : R * m + n_bits] = bits
    embed[N : N + R, flag] = -1
    embed[bos, bos_flag] = 1

    eye = torch.eye(d, dtype=dtype)
    stack_proj = _zeros(d, d, dtype=dtype)
    stack_proj[: R * m, : R * m] = torch.eye(R * m, dtype=dtype)
    layers = [Layer([AttentionHead(_zeros(d, 1, dtype=dtype), _zeros(d, 1, dtype=dtype), 3 * stack_proj, eye, "uniform")])]

    w_k = _zeros(d, 2, dtype=dtype)
    w_k[flag, 0] = w_k[bos_flag, 1] = beta
    slot_bits = bits  # slot r's bits are b(r)
    for t in range(n_bits):
        bit = R * m + t
        proj = {}
        for sign in (1, -1):  # P^+_t (slots with bit t set), P^-_t
            p = _zeros(d, d, dtype=dtype)
            for r in range(R):
                if slot_bits[r, t] == sign:
                    p[r * m : (r + 1) * m, r * m : (r + 1) * m] = torch.eye(m, dtype=dtype)
            proj[sign] = p
        heads = []
        for polarity, erase in ((1, proj[-1]), (-1, proj[1])):  # head A, head B
            w_q = _zeros(d, 2, dtype=dtype)
            w_q[flag, 0], w_q[bit, 0] = beta / 2, -polarity * beta / 2
            w_q[flag, 1], w_q[bit, 1] = -beta / 2, -polarity * beta / 2
            heads.append(AttentionHead(w_q, w_k, -erase, eye, "softmax"))
        layers.append(Layer(heads))

    unembed = v.T.repeat(R, 1)  # (R m, N): every slot read against v_a
    unembed = torch.cat([unembed, _zeros(n_bits + 2, N, dtype=dtype)])
    model = Transformer(embed, layers, unembed)
    formulas = {"d_model": 4 * R * math.log2(N) + math.log2(R) + 2, "n_layers": 1 + math.log2(R), "n_heads": 2}
    return _finish("shared attributes, hierarchical attention (Theorem 4.1)", model, formulas, device, prefix=(bos,))
