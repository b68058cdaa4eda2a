"""The plain one-run-at-a-time loop: an nn.Module, torch.optim.AdamW and clip_grad_norm_.

It is the yardstick of the batched trainer: the equivalence test trains runs both ways and
compares, and bench/bench_trainer.py times both. Same math as geofact.training.model, written
with torch's own modules so that the comparison tests the stacking, not a shared helper.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from geofact.training.config import TrainConfig
from geofact.training.data import batch_indices, facts
from geofact.training.model import RMS_EPS, init_params


class SingleRunModel(nn.Module):
    def __init__(self, config: TrainConfig, dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        self.config = config
        init = init_params(config, dtype=dtype)
        self.E_ent = nn.Parameter(init["E_ent"], requires_grad=not config.frozen_embeddings)
        self.E_rel = nn.Parameter(init["E_rel"])
        self.P = nn.Parameter(init["P"]) if "P" in init else None
        self.W_Q = nn.Parameter(init["W_Q"]) if "W_Q" in init else None
        self.W_K = nn.Parameter(init["W_K"]) if "W_K" in init else None
        self.W_V, self.W_O = nn.Parameter(init["W_V"]), nn.Parameter(init["W_O"])
        self.g_attn, self.g_mlp, self.g_final = (nn.Parameter(init[k]) for k in ("g_attn", "g_mlp", "g_final"))
        self.W_1, self.b_1 = nn.Parameter(init["W_1"]), nn.Parameter(init["b_1"])
        self.W_2, self.b_2 = nn.Parameter(init["W_2"]), nn.Parameter(init["b_2"])
        self.E_out = nn.Parameter(init["E_out"])

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Logits (B, N) at the last position of tokens (B, L)."""
        x = torch.cat([self.E_ent, self.E_rel])[tokens]  # (B, L, d)
        L = tokens.shape[1]
        if self.P is not None:
            x = x + self.P[:L]
        xn = F.rms_norm(x, (x.shape[-1],), self.g_attn, eps=RMS_EPS)
        causal = torch.ones(L, L, dtype=torch.bool, device=x.device).tril()
        if self.W_Q is not None:
            scores = (xn @ self.W_Q) @ (xn @ self.W_K).transpose(1, 2) / math.sqrt(self.W_Q.shape[1])
            mixed = scores.masked_fill(~causal, float("-inf")).softmax(-1) @ xn
        else:
            mixed = (causal / causal.sum(1, keepdim=True)).to(x.dtype) @ xn
        h = (x + mixed @ self.W_V @ self.W_O)[:, -1]
        h = h + F.gelu(F.rms_norm(h, (h.shape[-1],), self.g_mlp, eps=RMS_EPS) @ self.W_1 + self.b_1) @ self.W_2 + self.b_2
        return F.rms_norm(h, (h.shape[-1],), self.g_final, eps=RMS_EPS) @ self.E_out


def answered(model: SingleRunModel, table: torch.Tensor, config: TrainConfig, step: int) -> int | None:
    """At an accuracy check of `TrainConfig.stop_accuracy` (before this step's update), how many of its facts
    the run answers by argmax; None at a step that is no check."""
    if config.stop_accuracy is None or step == 0 or step % config.stop_accuracy[1]:
        return None
    with torch.no_grad():
        right = model(torch.stack([table[:, 0], config.N + table[:, 1]], 1)).argmax(-1) == table[:, 2]
    return int(right.sum())


def train_single(config: TrainConfig, device: str | torch.device = "cpu",
                 dtype: torch.dtype = torch.float32) -> tuple[SingleRunModel, int, float]:
    """Train one run the plain way. Returns the model, the steps taken and the last training loss (a run
    stopped at an accuracy check, having crossed its level or given up, at that check's step)."""
    model = SingleRunModel(config, dtype=dtype).to(device)
    table = facts(config.N, config.R, config.bijection_seed).to(device)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=config.lr,
                            weight_decay=config.weight_decay, foreach=False)
    loss_value, tops = float("nan"), []  # the best count of facts answered so far, at each accuracy check
    for step in range(config.max_steps):
        batch = table[batch_indices([config.seed], step, [len(table)], config.batch_size, len(table), device)[0]]
        loss = F.cross_entropy(model(torch.stack([batch[:, 0], config.N + batch[:, 1]], 1)), batch[:, 2])
        loss_value = float(loss.detach())
        if loss_value < config.loss_threshold:
            return model, step, loss_value
        correct = answered(model, table, config, step)
        if correct is not None:
            tops.append(max(tops[-1], correct) if tops else correct)
            if correct / len(table) >= config.stop_accuracy[0] or config.gives_up(tops):
                return model, step, loss_value
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
        opt.step()
    return model, config.max_steps, loss_value
