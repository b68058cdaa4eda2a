"""The single-hop model's loss and gradients, with the backward written out (uniform attention).

`geofact.training.model.forward` under autograd is the definition; this computes the same losses and
gradients in fewer, larger operations: the cross-entropy gradient as softmax minus one-hot, each
RMSNorm's backward in closed form, the GELU's through torch's own kernel, the embeddings' as one
scatter-add. A small model's step is mostly per-operation costs (bench/bench_grid_step.py), which
is what this saves. tests/training/test_step.py checks it against autograd in float64.

RMSNorm backward, for y = g * v r with r = (mean(v^2) + eps)^(-1/2) and v^ = v r:
    dg = sum over positions of dy * v^,    dv = r (u - v^ mean(u * v^)),    u = dy * g
"""

from __future__ import annotations

import torch
from torch.nn import functional as F

from geofact.training.model import RMS_EPS


def covers(params: dict[str, torch.Tensor]) -> bool:
    """Whether `loss_and_grads` covers this model: uniform attention and no learned positions."""
    return "W_Q" not in params and "P" not in params


def _rms(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(x^, r): x normalised over its last dim, and r = 1 / rms (keepdim)."""
    r = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + RMS_EPS)
    return x * r, r


def _rms_backward(dy: torch.Tensor, x_hat: torch.Tensor, r: torch.Tensor, gain: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(dx, dgain) for y = gain * x^ ; dy, x^ (M, ..., d), r (M, ..., 1), gain (M, d)."""
    gain = gain.reshape(gain.shape[0], *([1] * (dy.dim() - 2)), gain.shape[-1])
    d_gain = (dy * x_hat).flatten(1, -2).sum(1)  # (M, d)
    u = dy * gain
    dx = (u - x_hat * (u * x_hat).mean(-1, keepdim=True)).mul_(r)
    return dx, d_gain


def loss_and_grads(p: dict[str, torch.Tensor], tokens: torch.Tensor, targets: torch.Tensor
                   ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Each run's mean cross-entropy (M,) on tokens (M, B, L) with answers targets (M, B), and the
    gradient of their sum with respect to every tensor of p (geofact.training.model's layout)."""
    if not covers(p):
        raise ValueError("loss_and_grads covers uniform attention without learned positions; use autograd")
    p = {k: v.detach() for k, v in p.items()}
    M, B, L = tokens.shape
    N = p["E_ent"].shape[1]
    E_in = torch.cat([p["E_ent"], p["E_rel"]], dim=1)  # (M, N + R, d)
    rows = (tokens + (torch.arange(M, device=tokens.device) * E_in.shape[1])[:, None, None]).flatten()
    x = E_in.flatten(0, 1)[rows].view(M, B, L, -1)  # (M, B, L, d)

    # forward, keeping what the backward reads
    x_hat, r0 = _rms(x)
    mixed = (x_hat * p["g_attn"][:, None, None]).mean(2)  # (M, B, d)
    a = torch.bmm(mixed, p["W_V"])
    h = x[:, :, -1] + torch.bmm(a, p["W_O"])  # (M, B, d): hidden()
    h_hat, r1 = _rms(h)
    hn = h_hat * p["g_mlp"][:, None]
    z1 = torch.baddbmm(p["b_1"][:, None], hn, p["W_1"])  # (M, B, w)
    z = F.gelu(z1)
    h2 = torch.baddbmm(p["b_2"][:, None], z, p["W_2"]).add_(h)
    h2_hat, r2 = _rms(h2)
    hf = h2_hat * p["g_final"][:, None]
    logits = torch.bmm(hf, p["E_out"])  # (M, B, N)
    lse = torch.logsumexp(logits, -1, keepdim=True)  # (M, B, 1)
    picked = logits.gather(-1, targets[..., None])
    losses = (lse - picked)[..., 0].mean(1)  # (M,)

    # backward of losses.sum()
    d_logits = logits.sub_(lse).exp_()  # softmax, in place of the logits
    d_logits.scatter_add_(-1, targets[..., None], torch.full_like(picked, -1.0)).div_(B)
    g = {"E_out": torch.bmm(hf.transpose(1, 2), d_logits)}
    d_hf = torch.bmm(d_logits, p["E_out"].transpose(1, 2))
    d_h2, g["g_final"] = _rms_backward(d_hf, h2_hat, r2, p["g_final"])
    g["W_2"], g["b_2"] = torch.bmm(z.transpose(1, 2), d_h2), d_h2.sum(1)
    d_z1 = torch.ops.aten.gelu_backward(torch.bmm(d_h2, p["W_2"].transpose(1, 2)), z1)
    g["W_1"], g["b_1"] = torch.bmm(hn.transpose(1, 2), d_z1), d_z1.sum(1)
    d_h, g["g_mlp"] = _rms_backward(torch.bmm(d_z1, p["W_1"].transpose(1, 2)), h_hat, r1, p["g_mlp"])
    d_h += d_h2
    g["W_O"] = torch.bmm(a.transpose(1, 2), d_h)
    d_a = torch.bmm(d_h, p["W_O"].transpose(1, 2))
    g["W_V"] = torch.bmm(mixed.transpose(1, 2), d_a)
    d_mixed = torch.bmm(d_a, p["W_V"].transpose(1, 2)).div_(L)  # the mean's share to every position
    d_x, g["g_attn"] = _rms_backward(d_mixed[:, :, None].expand(M, B, L, -1), x_hat, r0, p["g_attn"])
    d_x[:, :, -1] += d_h
    d_E_in = torch.zeros_like(E_in).flatten(0, 1).index_add_(0, rows, d_x.flatten(0, 2)).view_as(E_in)
    g["E_ent"], g["E_rel"] = d_E_in[:, :N], d_E_in[:, N:]
    return losses, g
