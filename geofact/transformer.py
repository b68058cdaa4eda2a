"""The transformer of Section 2.2, with explicit weights, in which every construction is written.

Section 2.2 writes tokens as columns (X in R^{d x n}); here tokens are rows, X has shape
(batch, seq, d), and a matrix W of the paper acts as X @ W.T. With that change, one layer is exactly

    A_h  = softmax_causal( (X W_Q^h) (X W_K^h)^T )          # scores, no 1/sqrt(d) (the paper has none)
    Z    = sum_h A_h X W_V^h W_O^h                           # the paper's W_V is our W_V W_O
    X~   = X + Z                                             # residual
    X'   = X~ + MLP(X~),   MLP(z) = W_L ReLU(... ReLU(W_1 z + b_1) ...) + b_L

and the output is argmax over the unembedding, logits = X' @ U. "uniform" heads replace the score
matrix by the average over the causal prefix (the paper's "uniform attention"). No normalisation
layers: the theory has none (Section 2.2).

The mask: Section 2.2 writes softmax((W_K X)^T (W_Q X)) with no mask, while Section 2.1 trains a
causal next-token model. Heads are causal by default (every construction but one is built for the
causal model); `causal=False` gives Section 2.2's unmasked head, which the proof of Theorem 4.3 (1)
needs as written (its first token reads later ones), and `Transformer.readout_position` says which
position's state is decoded (the last by default).

Everything is plain tensors, so a construction is a function that fills in these fields, and the
forward pass is shared by all of them: no construction has a shortcut around the model.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import torch

Scores = Literal["softmax", "uniform"]


@dataclass
class AttentionHead:
    """One head. W_Q, W_K: (d, d_qk); W_V: (d, d_v); W_O: (d_v, d)."""

    W_Q: torch.Tensor
    W_K: torch.Tensor
    W_V: torch.Tensor
    W_O: torch.Tensor
    scores: Scores = "softmax"
    causal: bool = True  # False: Section 2.2's unmasked attention (every position sees every position)

    def __post_init__(self) -> None:
        if self.scores not in ("softmax", "uniform"):
            raise ValueError(f"scores must be 'softmax' or 'uniform', got {self.scores!r}")
        d = self.W_V.shape[0]
        if self.W_Q.shape != self.W_K.shape or self.W_Q.shape[0] != d:
            raise ValueError(f"W_Q {tuple(self.W_Q.shape)} and W_K {tuple(self.W_K.shape)} must both be (d={d}, d_qk)")
        if self.W_O.shape != (self.W_V.shape[1], d):
            raise ValueError(f"W_O must be (d_v, d) = {(self.W_V.shape[1], d)}, got {tuple(self.W_O.shape)}")

    def pattern(self, x: torch.Tensor) -> torch.Tensor:
        """Attention weights (batch, seq_q, seq_k): causal, or over every position with causal=False."""
        seq = x.shape[1]
        visible = torch.ones(seq, seq, dtype=torch.bool, device=x.device)
        if self.causal:
            visible = visible.tril()
        if self.scores == "uniform":
            weights = visible.to(x.dtype)
            return (weights / weights.sum(-1, keepdim=True)).expand(x.shape[0], seq, seq)
        scores = (x @ self.W_Q) @ (x @ self.W_K).transpose(1, 2)  # (batch, seq_q, seq_k)
        return scores.masked_fill(~visible, float("-inf")).softmax(dim=-1)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.pattern(x) @ (x @ self.W_V @ self.W_O)  # (batch, seq, d)

    def tensors(self) -> list[torch.Tensor]:
        return [self.W_Q, self.W_K, self.W_V, self.W_O]


@dataclass
class MLP:
    """ReLU MLP with len(weights) - 1 hidden layers. weights[i]: (fan_in, fan_out); biases[i]: (fan_out,)."""

    weights: list[torch.Tensor]
    biases: list[torch.Tensor]

    def __post_init__(self) -> None:
        if len(self.weights) != len(self.biases) or not self.weights:
            raise ValueError("MLP needs one bias per weight matrix and at least one layer")
        for i, (w, b) in enumerate(zip(self.weights, self.biases)):
            if b.shape != (w.shape[1],):
                raise ValueError(f"bias {i} must have shape ({w.shape[1]},), got {tuple(b.shape)}")
            if i and w.shape[0] != self.weights[i - 1].shape[1]:
                raise ValueError(f"layer {i} fan-in {w.shape[0]} != previous fan-out {self.weights[i - 1].shape[1]}")

    @property
    def hidden_widths(self) -> list[int]:
        return [w.shape[1] for w in self.weights[:-1]]

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        for i, (w, b) in enumerate(zip(self.weights, self.biases)):
            x = x @ w + b
            if i < len(self.weights) - 1:
                x = torch.relu(x)
        return x

    def tensors(self) -> list[torch.Tensor]:
        return [*self.weights, *self.biases]


@dataclass
class Layer:
    heads: list[AttentionHead]
    mlp: MLP | None = None

    def __call__(self, x: torch.Tensor, cache: dict[str, torch.Tensor] | None = None, name: str = "") -> torch.Tensor:
        """x (batch, seq, d) -> x + attention, then + MLP; with `cache`, each named state is kept in it
        under `name` (`run_with_cache`)."""
        if self.heads:
            attn_out = sum(head(x) for head in self.heads)  # (batch, seq, d)
            if cache is not None:
                for h, head in enumerate(self.heads):
                    cache[f"{name}.attn.pattern.{h}"] = head.pattern(x)  # (batch, seq_q, seq_k)
                cache[f"{name}.attn_out"] = attn_out
            x = x + attn_out
        if cache is not None:
            cache[f"{name}.resid_mid"] = x
        if self.mlp is not None:
            mlp_out = self.mlp(x)  # (batch, seq, d)
            if cache is not None:
                cache[f"{name}.mlp_out"] = mlp_out
            x = x + mlp_out
        if cache is not None:
            cache[f"{name}.resid_post"] = x
        return x


@dataclass
class Transformer:
    """Token embedding (vocab_in, d), layers, unembedding (d, vocab_out), optional positions (max_len, d).

    `readout_position` is the position whose final state is decoded (-1: the last token).
    """

    embed: torch.Tensor
    layers: list[Layer]
    unembed: torch.Tensor
    pos_embed: torch.Tensor | None = field(default=None)
    readout_position: int = -1

    def __post_init__(self) -> None:
        if self.unembed.shape[0] != self.d_model:
            raise ValueError(f"unembed must be (d={self.d_model}, vocab_out), got {tuple(self.unembed.shape)}")

    @property
    def d_model(self) -> int:
        return self.embed.shape[1]

    @property
    def n_layers(self) -> int:
        return len(self.layers)

    @property
    def n_heads(self) -> int:
        """Largest number of heads in any layer."""
        return max((len(layer.heads) for layer in self.layers), default=0)

    @property
    def mlp_width(self) -> int:
        """Largest hidden width of any MLP (0 when the model has none)."""
        return max((w for layer in self.layers if layer.mlp for w in layer.mlp.hidden_widths), default=0)

    def tensors(self) -> list[torch.Tensor]:
        out = [self.embed, self.unembed] + ([self.pos_embed] if self.pos_embed is not None else [])
        for layer in self.layers:
            out += [t for head in layer.heads for t in head.tensors()]
            out += layer.mlp.tensors() if layer.mlp is not None else []
        return out

    @property
    def n_params(self) -> int:
        """Entries of every weight matrix, embeddings included (zeros count: they are parameters)."""
        return sum(t.numel() for t in self.tensors())

    def residual(self, tokens: torch.Tensor, cache: dict[str, torch.Tensor] | None = None) -> torch.Tensor:
        """Final residual stream (batch, seq, d) for token ids (batch, seq); with `cache`, every
        intermediate state is kept in it (see `run_with_cache`)."""
        x = self.embed[tokens]  # (batch, seq, d)
        if self.pos_embed is not None:
            x = x + self.pos_embed[: tokens.shape[1]]
        if cache is not None:
            cache["embed"] = x
        for i, layer in enumerate(self.layers):
            x = layer(x, cache, f"blocks.{i}")
        return x

    def run_with_cache(self, tokens: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Logits at the readout position (batch, vocab_out) and the residual stream layer by layer.

        Names follow TransformerLens's hook points without their `hook_` prefix (its
        `blocks.0.hook_resid_post` is `blocks.0.resid_post` here), and attention patterns are kept per
        head: `embed` (token + position embedding, TransformerLens's `blocks.0.hook_resid_pre`; its own
        `hook_embed` is the token embedding alone); for each layer i `blocks.i.attn.pattern.h`
        (batch, seq_q, seq_k) for head h, `blocks.i.attn_out`, `blocks.i.resid_mid` (after attention),
        `blocks.i.mlp_out` and `blocks.i.resid_post`, each (batch, seq, d) unless said otherwise;
        states a layer lacks (no heads, no MLP) are absent."""
        cache: dict[str, torch.Tensor] = {}
        final = self.residual(tokens, cache)
        return final[:, self.readout_position] @ self.unembed, cache

    def logits(self, tokens: torch.Tensor) -> torch.Tensor:
        """Logits at the readout position (batch, vocab_out); the last one unless `readout_position` says otherwise."""
        return self.residual(tokens)[:, self.readout_position] @ self.unembed

    def generate(
        self, tokens: torch.Tensor, steps: int, output_to_input: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Greedy autoregressive generation (chain-of-thought, Theorem 4.4) from prompts (batch, seq).

        Each step appends argmax of the last position's logits, read as an input token through
        `output_to_input` (vocab_out,) (identity when None). No cache: every step reruns the whole
        prefix, which is the definition and cheap at these lengths.
        Returns the emitted output ids (batch, steps) and their logits (batch, steps, vocab_out).
        """
        if steps < 1:
            raise ValueError(f"steps must be >= 1, got {steps}")
        if self.readout_position != -1:
            raise ValueError(f"generation appends after the last token: readout_position must be -1, got {self.readout_position}")
        if self.pos_embed is not None and tokens.shape[1] + steps - 1 > self.pos_embed.shape[0]:
            raise ValueError(
                f"prompt length {tokens.shape[1]} + {steps - 1} generated tokens exceeds the "
                f"{self.pos_embed.shape[0]} positions of pos_embed"
            )
        outputs, all_logits = [], []
        for _ in range(steps):
            logits = self.logits(tokens)  # (batch, vocab_out)
            choice = logits.argmax(dim=-1)
            outputs.append(choice)
            all_logits.append(logits)
            next_token = choice if output_to_input is None else output_to_input.to(choice.device)[choice]
            tokens = torch.cat([tokens, next_token[:, None]], dim=1)
        return torch.stack(outputs, dim=1), torch.stack(all_logits, dim=1)

    def to(self, device: torch.device | str, dtype: torch.dtype | None = None) -> "Transformer":
        def move(t: torch.Tensor) -> torch.Tensor:
            return t.to(device=device, dtype=dtype if t.is_floating_point() and dtype else t.dtype)

        return Transformer(
            embed=move(self.embed),
            layers=[
                Layer(
                    [AttentionHead(*(move(t) for t in h.tensors()), scores=h.scores, causal=h.causal) for h in layer.heads],
                    MLP([move(w) for w in layer.mlp.weights], [move(b) for b in layer.mlp.biases]) if layer.mlp else None,
                )
                for layer in self.layers
            ],
            unembed=move(self.unembed),
            pos_embed=move(self.pos_embed) if self.pos_embed is not None else None,
            readout_position=self.readout_position,
        )
