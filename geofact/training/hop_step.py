"""The multi-hop model's loss and gradients, with the backward written out (Appendix C; the model of
`geofact.training.model`: `causal_hidden`, then `final_state` and the unembedding at the targets' positions).

`geofact.training.hop_trainer` under autograd is the definition; this computes the same losses and
gradients as `geofact.training.step` does for single-hop, and shares its MLP block, final norm and output
layer (`head_loss_and_grads`): the cross-entropy's gradient as softmax minus one-hot, each RMSNorm with its gain and
the GELU's backward with its bias's gradient through geofact's kernels on a GPU (geofact.training.fused_norm,
fused_gelu) and torch's elsewhere, the gradients written straight into the optimiser's flat buffer (`out`), the
embedding tables' as one accumulating index-put of their gathered rows. Counted on fake `meta` tensors at Appendix
C's shapes (30 runs, N = 2048, d = 256, batch 1024, k = 4 with CoT, geofact.training.traffic), autograd's step moved
42.8 GB (with geofact's output-layer kernels), this one 25.1 (10.3 without CoT, against 20.0); autograd's elementwise
passes (the RMSNorms' decompositions and backward, the residual adds, the attention's broadcasts) were the most of it.

The attention at the T positions read (the last T of L), for normed inputs xn (M, B, L, d), learned:

    q = xn[T] W_Q,  k = xn W_K,  s = q k^T / sqrt(d) masked causally,  pattern = softmax(s),  mixed = pattern xn
    d_xn = pattern^T d_mixed + d_k W_K^T (+ d_q W_Q^T at the T positions),  d_s = pattern * (d_pattern - <pattern, d_pattern>)

uniform (the causal mean): mixed_l = sum over j <= l of xn_j / (l + 1), so d_xn_j = sum over read l >= j of
d_mixed_l / (l + 1), a reversed cumulative sum. tests/training/test_hop_step.py checks it against autograd in
float64.
"""

from __future__ import annotations

import math
from collections.abc import Collection

import torch

from geofact.training.model import embed
from geofact.training.step import _gradient_targets, _normed, _rms_backward, _table_grad, _weight_grad, head_loss_and_grads

# Where the multi-hop trainer takes this step for fp32 and tf32 stacks unless told (bf16 goes through autograd
# under autocast): the GPU, whose step it was written for, and the fake device that counts it. The CPU keeps
# autograd, which trained every laptop record, so those stay reproducible bit for bit.
DEVICES = ("cuda", "meta")


def hop_loss_and_grads(p: dict[str, torch.Tensor], tokens: torch.Tensor, targets: torch.Tensor, k: int,
                       way: str | None = None, wanted: Collection[str] | None = None,
                       out: dict[str, torch.Tensor] | None = None,
                       row_masks: dict[str, torch.Tensor] | None = None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Each run's mean cross-entropy (M,) over its B T targets (M, B, T), predicted at the last T positions of
    tokens (M, B, L) (geofact.training.hop_queries.sequences: s_0 at position 0, the k relations N + r at positions
    1..k, with CoT the entities read back after them), and the gradient of the losses' sum with respect to every
    tensor of p. `way`: how the output layer computes (geofact.training.step.output_loss_and_grads; its logits
    are whole). `wanted`, `out`, `row_masks`: as geofact.training.step.loss_and_grads'."""
    out, row_masks = _gradient_targets(out, row_masks)
    (M, B, L), T = tokens.shape, targets.shape[2]
    if targets.shape[:2] != (M, B) or not 1 <= T <= L:
        raise ValueError(f"targets must be (M, B, T) = ({M}, {B}, T) with T in [1, L={L}], got {tuple(targets.shape)}")
    if not 1 <= k < L:
        raise ValueError(f"k (the relations at positions 1..k) must be in [1, L - 1 = {L - 1}], got {k}")
    if "P" in p and p["P"].shape[1] != L:
        raise ValueError(f"tokens must fill the {p['P'].shape[1]} learned positions, got L = {L}")
    p = {name: v.detach() for name, v in p.items()}
    N, d = p["E_ent"].shape[1], p["E_ent"].shape[2]
    wanted = set(p) if wanted is None else set(wanted)
    read = slice(L - T, L)  # the positions with a target

    # forward, keeping what the backward reads
    x = embed(p, tokens)  # (M, B, L, d), positional embeddings added
    xn, norm0 = _normed(x, p["g_attn"])  # (M, B, L, d)
    learned = "W_Q" in p
    if learned:  # per (run, example): its T queries against its L keys, as (M B)-batched matmuls of views
        queries = xn[:, :, read].flatten(1, 2)  # (M, B T, d)
        q = torch.bmm(queries, p["W_Q"]).view(M * B, T, d)
        keys = torch.bmm(xn.flatten(1, 2), p["W_K"]).view(M * B, L, d)
        future = torch.ones(T, L, dtype=torch.bool, device=x.device).triu(L - T + 1)  # query i sits at L - T + i
        scores = torch.bmm(q, keys.transpose(1, 2)).div_(math.sqrt(d)).masked_fill_(future, float("-inf"))
        pattern = torch.softmax(scores, -1)  # (M B, T, L)
        mixed = torch.bmm(pattern, xn.view(M * B, L, d)).view(M, B, T, d)
    else:
        counts = torch.arange(1, L + 1, device=x.device, dtype=x.dtype)[:, None]  # (L, 1): positions each one averages
        mixed = (xn.cumsum(2) / counts)[:, :, read]  # (M, B, T, d)
    mixed = mixed.flatten(1, 2)  # (M, B T, d)
    a = torch.bmm(mixed, p["W_V"])
    h = torch.baddbmm(x[:, :, read].flatten(1, 2), a, p["W_O"])  # (M, B T, d): causal_hidden()'s, position-minor
    g: dict[str, torch.Tensor] = {}
    losses, d_h = head_loss_and_grads(p, h, targets.flatten(1, 2), g, wanted, out, p["E_out"].shape[2], way=way)

    # backward of losses.sum(), through the attention
    _weight_grad(g, wanted, out, "W_O", a, d_h)
    d_a = torch.bmm(d_h, p["W_O"].transpose(1, 2))
    _weight_grad(g, wanted, out, "W_V", mixed, d_a)
    d_mixed = torch.bmm(d_a, p["W_V"].transpose(1, 2))  # (M, B T, d)
    if learned:
        d_mixed = d_mixed.view(M * B, T, d)
        d_xn = torch.bmm(pattern.transpose(1, 2), d_mixed)  # (M B, L, d): through the values
        d_pattern = torch.bmm(d_mixed, xn.view(M * B, L, d).transpose(1, 2))  # (M B, T, L)
        d_scores = (d_pattern - (pattern * d_pattern).sum(-1, keepdim=True)).mul_(pattern).div_(math.sqrt(d))
        d_q = torch.bmm(d_scores, keys).view(M, B * T, d)
        d_keys = torch.bmm(d_scores.transpose(1, 2), q).view(M, B * L, d)
        _weight_grad(g, wanted, out, "W_Q", queries, d_q)
        _weight_grad(g, wanted, out, "W_K", xn.flatten(1, 2), d_keys)
        d_xn = torch.baddbmm(d_xn.view(M, B * L, d), d_keys, p["W_K"].transpose(1, 2)).view(M, B, L, d)
        d_xn[:, :, read].add_(torch.bmm(d_q, p["W_Q"].transpose(1, 2)).view(M, B, T, d))  # add_: no copy back
    else:
        d_xn = torch.zeros_like(xn)
        d_xn[:, :, read] = d_mixed.view(M, B, T, d) / counts[read]
        d_xn = d_xn.flip(2).cumsum(2).flip(2)  # position j collects every read position l >= j
    d_x, g["g_attn"] = _rms_backward(d_xn, x, norm0, p["g_attn"], out.get("g_attn"))
    d_x[:, :, read].add_(d_h.view(M, B, T, d))
    if "P" in wanted and "P" in p:
        g["P"] = torch.sum(d_x, 1, out=out.get("P"))  # (M, L, d): every position's own embedding
    # the tables' rows by position: s_0 and the entities read back are E_ent's, the relations E_rel's
    for name, spans, first_row in (("E_ent", [(0, 1), (k + 1, L)], 0), ("E_rel", [(1, k + 1)], N)):
        if name in wanted:
            parts = [(torch.arange(M, device=tokens.device)[:, None, None].expand(M, B, hi - lo),
                      tokens[:, :, lo:hi] - first_row, d_x[:, :, lo:hi]) for lo, hi in spans if hi > lo]
            g[name] = _table_grad(p[name], parts, out.get(name), row_masks.get(name))
    return losses, {name: value for name, value in g.items() if name in wanted}

