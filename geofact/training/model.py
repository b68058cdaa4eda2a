"""The trained model of Section 5 / Appendix B, written for many runs at once (stacked parameters).

One layer, one head, Pre-RMSNorm, two-layer GELU MLP, separate input embedding and output
unembedding over the N entities (relations have input embeddings only; the answer is always an
entity). Every tensor has a leading run dimension M, so M independent models train as one
computation; with M = 1 it is one ordinary model.

    x   = E_in[tokens] (+ P)                                   # (M, B, L, d)
    h   = x + Attn(rms(x) * g_attn)                            # uniform: causal mean; learned: causal softmax(QK^T/sqrt d)
    h   = h + W_2 gelu(W_1 (rms(h) * g_mlp) + b_1) + b_2
    out = (rms(h) * g_final) E_out                             # (M, B, N) logits

Single-hop reads one position, the last: `hidden` returns the post-attention state there (what the
mechanism analyses read), `head` the rest, `forward` the two in turn. Multi-hop with chain-of-thought
predicts at several positions: `causal_hidden` gives the states at the positions read (Appendix C).
"""

from __future__ import annotations

import math

import torch
from torch.nn import functional as F

from geofact.training.config import MultiHopConfig, TrainConfig

RMS_EPS = 1e-6
INIT_STD = 0.02


def init_params(config: TrainConfig | MultiHopConfig, dtype: torch.dtype = torch.float32) -> dict[str, torch.Tensor]:
    """One run's parameters from its seed, in a fixed order (so stacked and solo runs start equal)."""
    g = torch.Generator().manual_seed(config.seed)
    d, w = config.d, config.width

    def normal(*shape: int) -> torch.Tensor:
        return (torch.randn(*shape, generator=g, dtype=torch.float64) * INIT_STD).to(dtype)

    p = {"E_ent": normal(config.N, d), "E_rel": normal(config.R, d)}
    if config.learned_positions:
        p["P"] = normal(config.seq_len, d)
    if config.attention == "learned":
        p["W_Q"], p["W_K"] = normal(d, d), normal(d, d)
    p["W_V"], p["W_O"] = normal(d, d), normal(d, d)
    p["g_attn"], p["g_mlp"], p["g_final"] = (torch.ones(d, dtype=dtype) for _ in range(3))
    p["W_1"], p["b_1"] = normal(d, w), torch.zeros(w, dtype=dtype)
    p["W_2"], p["b_2"] = normal(w, d), torch.zeros(d, dtype=dtype)
    p["E_out"] = normal(d, config.N)
    return p


def n_params(config: TrainConfig | MultiHopConfig) -> int:
    """Parameters of one run (entries of every tensor init_params makes)."""
    d, w, N, R = config.d, config.width, config.N, config.R
    attention = (4 if config.attention == "learned" else 2) * d * d
    positions = config.seq_len * d if config.learned_positions else 0
    return (N + R) * d + positions + attention + 3 * d + d * w + w + w * d + d + d * N


def rms(x: torch.Tensor, gain: torch.Tensor) -> torch.Tensor:
    """RMSNorm over the last dim; gain (M, d) broadcast over the middle dims of x (M, ..., d)."""
    gain = gain.reshape(gain.shape[0], *([1] * (x.dim() - 2)), gain.shape[-1])
    return F.rms_norm(x, (x.shape[-1],), eps=RMS_EPS) * gain


def embed(p: dict[str, torch.Tensor], tokens: torch.Tensor) -> torch.Tensor:
    """Input embeddings x (M, B, L, d) of tokens (M, B, L): entities 0..N-1, relations N + r (as in geofact.task)."""
    M, B, L = tokens.shape
    E_in = torch.cat([p["E_ent"], p["E_rel"]], dim=1)  # (M, N + R, d)
    rows = tokens + (torch.arange(M, device=tokens.device) * E_in.shape[1])[:, None, None]
    x = F.embedding(rows, E_in.flatten(0, 1))  # one flat table, so the backward is one scatter
    if "P" in p:
        x = x + p["P"][:, None, :L]
    return x


def attend(p: dict[str, torch.Tensor], xn: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Learned attention's query at the last position of normed inputs xn (M, B, L, d): (q (M, B, d), k (M, B,
    L, d), pattern (M, B, L)). One query against L keys: elementwise products, not a batched matmul of one
    row per (run, example). geofact.training.step's backward reads q and k."""
    M, B, L, _ = xn.shape
    q = torch.bmm(xn[:, :, -1], p["W_Q"])
    k = torch.bmm(xn.flatten(1, 2), p["W_K"]).view(M, B, L, -1)
    return q, k, ((q[:, :, None] * k).sum(-1) / math.sqrt(q.shape[-1])).softmax(-1)


def hidden(p: dict[str, torch.Tensor], tokens: torch.Tensor) -> torch.Tensor:
    """Post-attention residual state h (M, B, d) at the last position for tokens (M, B, L).

    This is the "hidden state h" of the mechanism analyses (Appendix B.3): everything the MLP sees.
    With one layer only the last position is read, so attention is computed for that query alone:
    the last row of the causal pattern sees every position (uniform attention is then the plain mean).
    """
    x = embed(p, tokens)  # (M, B, L, d)
    xn = rms(x, p["g_attn"])
    if "W_Q" in p:
        mixed = (attend(p, xn)[2][..., None] * xn).sum(2)
    else:
        mixed = xn.mean(2)  # (M, B, d)
    return x[:, :, -1] + torch.bmm(torch.bmm(mixed, p["W_V"]), p["W_O"])  # (M, B, d)


def causal_hidden(p: dict[str, torch.Tensor], tokens: torch.Tensor, last: int | None = None) -> torch.Tensor:
    """Post-attention residual states (M, B, n, d) at the last n = `last` positions of tokens (M, B, L)
    (None: every position, n = L), causally masked.

    Position l sees positions 0..l, so the state at the last position equals `hidden`'s. With one layer
    a position's state needs the keys and values of the positions before it but no query or output of
    theirs, so only the n positions read pay for queries, values and the output projection (chain-of-thought
    reads its k targets of 2k positions: a sixth of the step's matmul FLOPs is saved at k = 4).
    """
    x = embed(p, tokens)  # (M, B, L, d)
    M, B, L, d = x.shape
    n = L if last is None else last
    if not 1 <= n <= L:
        raise ValueError(f"last must be None or in [1, {L}] (the sequence's length), got {last}")
    xn = rms(x, p["g_attn"])
    if "W_Q" in p:
        q = torch.bmm(xn[:, :, L - n:].flatten(1, 2), p["W_Q"]).view(M, B, n, d)
        k = torch.bmm(xn.flatten(1, 2), p["W_K"]).view(M, B, L, d)
        future = torch.ones(n, L, dtype=torch.bool, device=x.device).triu(L - n + 1)  # query i sits at L - n + i
        scores = torch.einsum("mbqe,mbke->mbqk", q, k) / math.sqrt(d)  # (M, B, n, L)
        mixed = scores.masked_fill(future, float("-inf")).softmax(-1) @ xn  # (M, B, n, d)
    else:
        mixed = (xn.cumsum(2) / torch.arange(1, L + 1, device=x.device, dtype=x.dtype)[:, None])[:, :, L - n:]
    return x[:, :, L - n:] + torch.bmm(torch.bmm(mixed.flatten(1, 2), p["W_V"]), p["W_O"]).view(M, B, n, d)


def final_state(p: dict[str, torch.Tensor], h: torch.Tensor) -> torch.Tensor:
    """MLP block and final norm: what the unembedding reads (M, B, d), from post-attention states h (M, B, d)."""
    z = F.gelu(torch.baddbmm(p["b_1"][:, None], rms(h, p["g_mlp"]), p["W_1"]))
    h = h + torch.baddbmm(p["b_2"][:, None], z, p["W_2"])
    return rms(h, p["g_final"])


def head(p: dict[str, torch.Tensor], h: torch.Tensor) -> torch.Tensor:
    """MLP block and unembedding: logits (M, B, N) from post-attention states h (M, B, d)."""
    return torch.bmm(final_state(p, h), p["E_out"])  # (M, B, N)


def forward(p: dict[str, torch.Tensor], tokens: torch.Tensor) -> torch.Tensor:
    """Logits (M, B, N) at the last position for stacked parameters and tokens (M, B, L)."""
    return head(p, hidden(p, tokens))
