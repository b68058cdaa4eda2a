"""The single-hop step under the bf16 policy with its backward written out (issue 47, item 2): bfloat16 matmuls,
float32 weights, loss and stop rule (geofact.precision), as geofact.training.step writes out the float32 step.

The definition is autograd through `geofact.training.model.forward` under `torch.autocast(bfloat16)`, and this
computes what that computes: the same casts and the same bfloat16 ops, the float32 ones (the RMSNorms' backward) by
formulas that round otherwise (Section 5's model, Appendix B's recipe; the precision is this project's check, not
the paper's):
- forward: every batched matmul casts its inputs to bfloat16 and returns bfloat16 (accumulating in float32); the
  residual additions promote back to float32, so every RMSNorm reads float32, and the GELU runs on the MLP's
  bfloat16 pre-activations, as autocast leaves it; the loss is the cross-entropy of the logits cast up to float32;
- backward: a gradient reaching a bfloat16 matmul output is rounded to bfloat16 there (the logits' (softmax -
  one-hot) / B included), each matmul's two gradients are bfloat16 matmuls, a weight's gradient is its bfloat16
  gradient cast up to float32, and a bias's its bfloat16 sum over the batch, cast up.
What it saves over autograd: autograd's float32 copy of the (M, B, N) logits and their log-softmax, and the
log-softmax backward's passes over them; each weight's gradient is still computed in bfloat16 and copied up, as
autocast's is (counted by geofact.training.traffic).

It covers uniform attention with whole logits (`covers_bf16`): learned attention's softmax is float32 under CUDA's
autocast and bfloat16 under the CPU's, so no one written-out step is both; those runs, and runs whose logits a
device splits into chunks, go through autograd. tests/training/test_step_bf16.py checks it against autograd in
float64 (`low` = float64: every cast an identity, the algebra exact) and against autocast in bfloat16.
"""

from __future__ import annotations

from collections.abc import Collection

import torch
from torch.nn import functional as F

from geofact.training.step import _gradient_targets, _normed, _rms_backward, covers, entity_chunk, gathered_inputs, table_grads

LOW = torch.bfloat16  # the policy's matmul dtype
CAST = ("W_V", "W_O", "W_1", "b_1", "W_2", "b_2", "E_out")  # what autocast casts to it: every matmul's weights


def covers_bf16(params: dict[str, torch.Tensor], B: int, device: torch.device) -> bool:
    """Whether `loss_and_grads_bf16` covers this stack: float32 weights (autocast leaves float64 ones alone),
    uniform attention, no learned positions, whole logits."""
    N = params["E_out"].shape[-1]
    return (params["E_out"].dtype == torch.float32 and covers(params) and "W_Q" not in params
            and entity_chunk(B, N, device) >= N)


def loss_and_grads_bf16(p: dict[str, torch.Tensor], subjects: torch.Tensor, relations: torch.Tensor, targets: torch.Tensor,
                        wanted: Collection[str] | None = None, out: dict[str, torch.Tensor] | None = None,
                        row_masks: dict[str, torch.Tensor] | None = None, low: torch.dtype = LOW
                        ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """geofact.training.step.loss_and_grads under the bf16 policy (module docstring): each run's mean cross-entropy
    (M,) in float32 and the gradients of their sum, in p's dtype, for uniform attention with whole logits.
    `wanted`, `out`, `row_masks`: as there. `low`: the matmul dtype (float64 in the tests: the casts then do
    nothing, and the step is the float64 one)."""
    if not covers(p) or "W_Q" in p:
        raise ValueError("loss_and_grads_bf16 covers uniform attention without learned positions; use autograd")
    out, row_masks = _gradient_targets(out, row_masks)
    p = {k: v.detach() for k, v in p.items()}
    cast = {k: p[k].to(low) for k in CAST}  # autocast's casts of the weights, once a step
    (M, B), L = subjects.shape, 2
    x = gathered_inputs(p, subjects, relations)  # (M, B, L, d), float32

    # forward: bfloat16 out of every matmul, float32 again at every residual addition
    xn, norm0 = _normed(x, p["g_attn"])  # (M, B, L, d)
    mixed = xn.mean(2).to(low)  # (M, B, d)
    a = torch.bmm(mixed, cast["W_V"])  # (M, B, d), low
    h = x[:, :, -1] + torch.bmm(a, cast["W_O"])  # (M, B, d), float32
    hn, norm1 = _normed(h, p["g_mlp"])
    hn_low = hn.to(low)
    z1 = torch.baddbmm(cast["b_1"][:, None], hn_low, cast["W_1"])  # (M, B, w), low
    z = F.gelu(z1)
    h2 = h + torch.baddbmm(cast["b_2"][:, None], z, cast["W_2"])  # (M, B, d), float32
    hf, norm2 = _normed(h2, p["g_final"])
    hf_low = hf.to(low)
    logits = torch.bmm(hf_low, cast["E_out"])  # (M, B, N), low
    # the loss of the logits cast up: softmax and log-sum-exp from its largest entry, as step's "softmax kernel, one max"
    softmax = torch.softmax(logits, -1, dtype=p["E_out"].dtype)  # (M, B, N), float32
    p_max, j = softmax.max(-1, keepdim=True)
    lse = logits.gather(-1, j).to(softmax.dtype) - p_max.log_()  # (M, B, 1)
    losses = (lse - logits.gather(-1, targets[..., None]).to(softmax.dtype))[..., 0].mean(1)  # (M,)
    softmax.scatter_add_(-1, targets[..., None], torch.full_like(p_max, -1.0))
    d_logits = torch.div(softmax, B, out=torch.empty_like(logits))  # (softmax - one-hot) / B, rounded as it reaches the logits

    # backward of losses.sum()
    wanted = set(p) if wanted is None else set(wanted)
    g: dict[str, torch.Tensor] = {}

    def weight(name: str, inputs: torch.Tensor, d_outputs: torch.Tensor) -> None:
        """g[name]: the low gradient inputs^T d_outputs per run, cast up (into out[name] where given); if wanted."""
        if name in wanted:
            grad = torch.bmm(inputs.transpose(1, 2), d_outputs)
            g[name] = out[name].copy_(grad) if name in out else grad.to(p[name].dtype)

    def bias(name: str, d_outputs: torch.Tensor) -> None:
        """g[name]: a bias's gradient, the low sum of d_outputs (M, B, n) over the batch, cast up."""
        grad = d_outputs.sum(1)
        g[name] = out[name].copy_(grad) if name in out else grad.to(p[name].dtype)

    weight("E_out", hf_low, d_logits)
    d_hf = torch.bmm(d_logits, cast["E_out"].transpose(1, 2)).to(hf.dtype)  # (M, B, d)
    d_h2, g["g_final"] = _rms_backward(d_hf, h2, norm2, p["g_final"], out.get("g_final"))
    d_o2 = d_h2.to(low)  # where it reaches the MLP's bfloat16 output
    weight("W_2", z, d_o2)
    bias("b_2", d_o2)
    d_z1 = torch.ops.aten.gelu_backward(torch.bmm(d_o2, cast["W_2"].transpose(1, 2)), z1)  # (M, B, w), low
    bias("b_1", d_z1)
    weight("W_1", hn_low, d_z1)
    d_hn = torch.bmm(d_z1, cast["W_1"].transpose(1, 2)).to(hn.dtype)
    d_h, g["g_mlp"] = _rms_backward(d_hn, h, norm1, p["g_mlp"], out.get("g_mlp"))
    d_h = d_h.add_(d_h2)  # (M, B, d), float32: the residual's share too
    d_o = d_h.to(low)
    weight("W_O", a, d_o)
    d_a = torch.bmm(d_o, cast["W_O"].transpose(1, 2))
    weight("W_V", mixed, d_a)
    d_mixed = torch.bmm(d_a, cast["W_V"].transpose(1, 2)).to(x.dtype).div_(L)  # the mean's share to every position
    d_x, g["g_attn"] = _rms_backward(d_mixed[:, :, None].expand(M, B, L, -1), x, norm0, p["g_attn"], out.get("g_attn"))
    d_x[:, :, -1].add_(d_h)
    table_grads(p, subjects, relations, d_x, g, wanted, out, row_masks)
    return losses, {name: value for name, value in g.items() if name in wanted}
