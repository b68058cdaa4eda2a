"""Theorem F.1 (`thm:disjoint-attr`, Appendix F): disjoint attributes in dimension d = 4 log(NR).

Proof, as implemented (choices the proof leaves implicit are marked *):

* codes v_1..v_N in {±1}^{m_N} and u_1..u_R in {±1}^{m_R} from Lemma G.1 (`geofact.codes`);
* embeddings: subject x_i = (v_i; 0), relation r_j = (0; u_j), attribute g_j(i) = (v_i; u_j);
* one layer, one head with uniform attention over the causal prefix, so at the relation token
  (position 2) the head averages (x_i + r_j)/2, and W_V = 2 I undoes the average;
* the output is decoded by argmax of inner products with the attribute embeddings (unembedding).

Choices made explicit here:

* (*) log base 2 and integer sizes: d = ceil(4 log2(NR)), m_N = ceil(4 log2 N), m_R = d - m_N.
  This meets the theorem's d exactly up to the ceiling; m_R equals ceil(4 log2 R) or one less, which
  still leaves room for distinct codes (m_R >= log2 R for R >= 2). R = 1 needs no relation code.
* (*) the residual connection. Section 2.2 adds the attention output to the residual stream, which
  the proof ignores: with W_V = 2 I the relation token ends at x_i + 2 r_j = (v_i; 2 u_j), not at the
  attribute embedding. It still decodes correctly (both blocks are maximised by the true (i, j)),
  and `literal_value_matrix=True` builds exactly that. The default uses W_V = 2 diag(I_{m_N}, 0), so
  the final state is *exactly* (v_i; u_j), the attribute's embedding, as the proof says.
* (*) no MLP: the theorem's layer is attention only (the MLP is the zero map, width 0).
* (*) the statement needs each g_r injective (a bijection onto A_r, so |A| = R N); otherwise the
  attribute g_j(i) = g_j(i') gets two embeddings. `allow_non_injective=True` gives such an attribute
  the embedding of its smallest preimage, which is how the counterexample in the notebook is built.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from geofact.codes import construction_codes, lemma_code_length
from geofact.constructions.base import Construction
from geofact.constructions.primitives import averaging_head, lay_out
from geofact.host import as_device
from geofact.task import DisjointAttributeTask
from geofact.transformer import Layer, Transformer


def disjoint_dimensions(N: int, R: int) -> tuple[int, int, int]:
    """(d, m_N, m_R) with d = ceil(4 log2(NR)) split into the subject and relation blocks."""
    d = math.ceil(4 * math.log2(N * R))
    m_N = lemma_code_length(N, "2")
    return d, m_N, d - m_N


def disjoint_embeddings(N: int, R: int, v: torch.Tensor, u: torch.Tensor) -> tuple[torch.Tensor, dict[str, slice]]:
    """Token embeddings (N + R, d), subjects then relations: x_i = (v_i; 0), r_j = (0; u_j)."""
    blocks = lay_out([("v", v.shape[1]), ("u", u.shape[1])])
    embed = torch.zeros(N + R, blocks["u"].stop, dtype=v.dtype)
    embed[:N, blocks["v"]] = v
    embed[N:, blocks["u"]] = u
    return embed, blocks


def attribute_unembedding(task: DisjointAttributeTask, v: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """(d, R N): attribute g_r(i), at index r N + g_r(i), is read against its embedding (v_i; u_r).

    For a bijection the preimage i is unique. Otherwise (`allow_non_injective`) the attribute takes its
    smallest preimage's embedding; attributes outside the image keep a zero column.
    """
    N, R, m_N = task.N, task.R, v.shape[1]
    unembed = torch.zeros(m_N + u.shape[1], task.n_attributes, dtype=v.dtype)
    for r in range(R):
        first = np.full(N, N)
        np.minimum.at(first, task.maps[r], np.arange(N))
        hit = np.nonzero(first < N)[0]
        unembed[:m_N, r * N + hit] = v[first[hit]].T
        unembed[m_N:, r * N + hit] = u[r][:, None]
    return unembed


def disjoint_attribute_transformer(
    task: DisjointAttributeTask,
    seed: int = 0,
    literal_value_matrix: bool = False,
    allow_non_injective: bool = False,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float64,
) -> Construction:
    """Build Theorem F.1's one-layer transformer for `task` (see the module docstring for every choice).

    Stages: codes, `disjoint_embeddings`, one `averaging_head` (W_V = 2 I on the subject block, or on
    everything with `literal_value_matrix`), `attribute_unembedding`.
    """
    if not task.is_injective and not allow_non_injective:
        raise ValueError(
            "Theorem F.1's construction needs every g_r injective (a bijection onto A_r); "
            "pass allow_non_injective=True to build it anyway (attributes take their smallest preimage's embedding)"
        )
    N, R = task.N, task.R
    d, m_N, m_R = disjoint_dimensions(N, R)
    v = torch.as_tensor(construction_codes(N, m_N, seed), dtype=dtype)  # (N, m_N)
    u = torch.as_tensor(construction_codes(R, m_R, seed + 1), dtype=dtype)  # (R, m_R)
    embed, blocks = disjoint_embeddings(N, R, v, u)
    # the relation block arrives through the residual unless the proof's literal W_V = 2 I is asked for
    head = averaging_head(d, slice(0, d) if literal_value_matrix else blocks["v"], 2, dtype)
    model = Transformer(embed=embed, layers=[Layer([head])], unembed=attribute_unembedding(task, v, u))
    formulas = {"d_model": 4 * math.log2(N * R), "n_layers": 1, "mlp_width": 0}
    return Construction("disjoint-attributes (Theorem F.1)", model.to(as_device(device)), formulas, blocks=blocks)
