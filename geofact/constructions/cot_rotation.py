"""A chain-of-thought model whose dimension does not grow with k: Table 1's O~(R) row and Section 3's
"with CoT, d = O(R log N) suffices for any number of hops", which Theorem 4.4's proof does not reach.

Theorem 4.4's proof (`geofact.constructions.cot`) writes positions as a one-hot of 2k + 1 coordinates, so its
d = 1 + d_S + d_R + R d_S + 2k + 1 grows linearly in k: the theorem's O~(R + k). Its head, though, does one
uniform shift: position p >= k reads position p - k (the last prompt token reads s_0, the token at k + l reads
r_l). A shift is a rotation. With the positions on a half circle, e_p = (cos p theta, sin p theta) and
theta = pi / (2k + 1), a query that turns its own position back by k theta scores position j by
scale * cos((p - k - j) theta): every angle lies within (-pi/2, pi/2), so the score is highest at j = p - k,
by scale * (1 - cos theta) over any other position (a position m steps away loses by at least 4 m^2 tau / pi^2,
so the weight the softmax leaks stays about 2 e^-tau whatever k). Two coordinates carry every position. The
proof's tau -> infinity becomes scale = tau / (1 - cos theta), which grows like k^2: the query weights and the
position entries need O(log k) more bits, not more dimensions, the usual log-precision regime (a float32 model
resolves the margin up to k of about a thousand, `max_rotation_k`; float64 to about 10^7).

The proof's MLP gates its neurons by position (the selectors and the erasure at the generation positions
k + 1..2k, the copy of s_0 at position k), which two coordinates cannot do for the k generation positions with
the proof's exact 0 / -2 gates. Here they read the subject flag instead: at position k the current token is the relation r_k (flag 0), and at k + 1..2k an emitted
subject (flag 1); the head copies everything but the flag and the positions, so the flag stays the current
token's. At positions below k the outputs are never read (the prompt is given).

Not the paper's construction: geofact's, built to test the claims the proof does not reach
(notebooks/thm-khop-cot.py). Sizes: d = 1 + d_S + d_R + R d_S + 2 and MLP width (R + 2) d_S, one layer,
one head, for every k.
"""

from __future__ import annotations

import math

import torch

from geofact.codes import n_bits
from geofact.constructions.base import Construction
from geofact.constructions.cot import neighbourhood_embeddings
from geofact.constructions.primitives import binary, check_tau, lay_out, mismatch_weights, width
from geofact.host import as_device
from geofact.task import KHopTask
from geofact.transformer import MLP, AttentionHead, Layer, Transformer

POSITION_CODE = 2  # coordinates of the rotation position code, whatever k
# A score is about scale = tau / (1 - cos theta) in size and must resolve differences of tau: the dtype's relative
# rounding times scale must stay below tau / MARGIN_ROUNDING (measured in float32: margin 44 of 50 at k = 1024,
# the wrong position at k = 4096)
MARGIN_ROUNDING = 8.0


def rotation_layout(N: int, R: int) -> dict[str, slice]:
    """[flag | bin(s) (d_S) | bin(r) (d_R) | hop (R d_S) | position (2)]: the proof's blocks, the positions
    on a circle instead of a one-hot."""
    d_S, d_R = n_bits(N), n_bits(R)
    return lay_out([("flag", 1), ("bin(s)", d_S), ("bin(r)", d_R), ("hop", R * d_S), ("position", POSITION_CODE)])


def rotation_angle(k: int) -> float:
    """theta = pi / (2k + 1): the 2k + 1 positions' pairwise angles all within (-pi/2, pi/2) of the shift."""
    return math.pi / (2 * k + 1)


def max_rotation_k(dtype: torch.dtype) -> int:
    """The largest k whose scores `dtype` resolves to within tau / MARGIN_ROUNDING: eps / (1 - cos theta) <= 1 / 8."""
    theta_min = math.acos(1 - MARGIN_ROUNDING * torch.finfo(dtype).eps)
    return int((math.pi / theta_min - 1) // 2)


def rotation_positions(blocks: dict[str, slice], k: int, dtype: torch.dtype) -> torch.Tensor:
    """Position embeddings (2k + 1, d): position p adds (cos p theta, sin p theta) to the position block."""
    theta = rotation_angle(k)
    angles = torch.arange(2 * k + 1, dtype=dtype) * theta
    pos_embed = torch.zeros(2 * k + 1, blocks["position"].stop, dtype=dtype)
    pos_embed[:, blocks["position"]] = torch.stack([angles.cos(), angles.sin()], dim=1)
    return pos_embed


def shift_head(blocks: dict[str, slice], k: int, tau: float, dtype: torch.dtype) -> AttentionHead:
    """Position p reads position p - k: keys are the position code, the query is it turned back by k theta and
    scaled so that the right position wins by tau, as the proof's one-hot head's does. It copies bin(s),
    bin(r) and hop, not the flag."""
    theta, pos, d = rotation_angle(k), blocks["position"], blocks["position"].stop
    back = torch.tensor([[math.cos(k * theta), -math.sin(k * theta)],
                         [math.sin(k * theta), math.cos(k * theta)]], dtype=dtype)  # rotation by +k theta
    scale = tau / (1 - math.cos(theta))
    w_k = torch.zeros(d, POSITION_CODE, dtype=dtype)
    w_k[pos, :] = torch.eye(POSITION_CODE, dtype=dtype)
    w_q = torch.zeros(d, POSITION_CODE, dtype=dtype)
    w_q[pos, :] = scale * back  # (cos p, sin p) @ back = (cos (p - k), sin (p - k)) theta
    value = slice(blocks["bin(s)"].start, blocks["hop"].stop)
    w_v = torch.zeros(d, width(value), dtype=dtype)
    w_v[value, :] = torch.eye(width(value), dtype=dtype)
    return AttentionHead(w_q, w_k, w_v, w_v.T.clone(), "softmax")


def flag_gated_mlp(blocks: dict[str, slice], R: int, dtype: torch.dtype) -> MLP:
    """The proof's next-step MLP (`geofact.constructions.cot.next_step_mlp`) with its position gates read off the
    current token's subject flag: the R d_S selectors and the d_S erasers fire where it is 1 (an emitted
    subject), the d_S copies of bin(s_0) where it is 0 (the relation r_k at position k); each gate adds 0 where
    it opens and -2 where it shuts, as the proof's do."""
    S, Rb, hop, flag = blocks["bin(s)"], blocks["bin(r)"], blocks["hop"], blocks["flag"].start
    d, d_S = blocks["position"].stop, width(S)
    w_r, b_r = mismatch_weights(binary(R, dtype))
    n_hidden = R * d_S + 2 * d_S
    sel, copy, erase = slice(0, R * d_S), slice(R * d_S, (R + 1) * d_S), slice((R + 1) * d_S, n_hidden)
    w1, b1 = torch.zeros(d, n_hidden, dtype=dtype), torch.zeros(n_hidden, dtype=dtype)
    sel_r = torch.arange(R).repeat_interleave(d_S)  # selector (r, j) at index r * d_S + j reads hop bit (r, j)
    bits = torch.arange(d_S)
    w1[hop.start + torch.arange(R * d_S), torch.arange(R * d_S)] = 1
    w1[Rb, sel] = w_r[sel_r].T
    w1[flag, sel], b1[sel] = 2, b_r[sel_r] - 2  # open at flag 1
    w1[S.start + bits, copy.start + bits] = 1
    w1[flag, copy] = -2  # open at flag 0
    w1[S.start + bits, erase.start + bits] = 1
    w1[flag, erase], b1[erase] = 2, -2  # open at flag 1
    w2, b2 = torch.zeros(n_hidden, d, dtype=dtype), torch.zeros(d, dtype=dtype)
    w2[torch.arange(R * d_S), S.start + torch.arange(R * d_S) % d_S] = 2
    w2[copy.start + bits, S.start + bits] = 1
    w2[erase.start + bits, S.start + bits] = -1
    b2[S] = -1
    return MLP([w1, w2], [b1, b2])


def rotation_chain_of_thought(
    task: KHopTask, tau: float = 50.0, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float64
) -> Construction:
    """One layer, one head, chain of thought, d = 1 + d_S + d_R + R d_S + 2 at every k: the proof's model
    (`geofact.constructions.chain_of_thought`) with its positions on a circle (`shift_head`) and its MLP gated
    by the subject flag (`flag_gated_mlp`). It emits s_0..s_k as the proof's does; tau is the margin of the
    right position's score over any other, as there."""
    check_tau(tau)
    N, R, k = task.N, task.R, task.k
    if k > max_rotation_k(dtype):
        raise ValueError(f"k = {k} is too long for the rotation code in {dtype}: its scores cannot resolve the margin "
                         f"tau past k = {max_rotation_k(dtype)}; build it in torch.float64")
    blocks = rotation_layout(N, R)
    embed, _ = neighbourhood_embeddings(task, blocks, dtype)  # its one-hot positions are replaced below
    layer = Layer([shift_head(blocks, k, tau, dtype)], flag_gated_mlp(blocks, R, dtype))
    unembed = torch.zeros(embed.shape[1], N, dtype=dtype)
    unembed[blocks["bin(s)"]] = embed[:N, blocks["bin(s)"]].T
    model = Transformer(embed, [layer], unembed, rotation_positions(blocks, k, dtype)).to(as_device(device))
    return Construction("k-hop, chain of thought, rotation position code (geofact's)", model, cot_steps=k + 1,
                        blocks=blocks)
