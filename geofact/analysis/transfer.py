"""MLP-freeze transfer (Section 5.1, Appendix B.3 "MLP freeze experiment"): the smart initialisation.

After training, draw fresh bijections g'_r and write subject embeddings that linearly encode the new
attributes under the readout maps of the trained model:

    s_x = (target_x - b_stack) W_stack^+,   W_stack = [W_1 | ... | W_R],   target_x = concat_r a_{g'_r(x)}

the minimum-norm s with s W_r + b_r = a_{g'_r(x)} for every r (the paper's maps are linear; ours are
affine, so the intercepts are subtracted first). If the MLP is a generic relation-conditioned
selector, the model answers g' with these embeddings and no retraining.
"""

from __future__ import annotations

import torch


def smart_init(maps: list[tuple[torch.Tensor, torch.Tensor]], vectors: torch.Tensor, new_answers: torch.Tensor) -> torch.Tensor:
    """Subject embeddings (N, d) encoding new_answers (R, N) under readout maps [(W_r (d, k), b_r (k,))]."""
    if len(maps) != new_answers.shape[0]:
        raise ValueError(f"need one readout map per relation: {new_answers.shape[0]} relations, {len(maps)} maps")
    W_stack = torch.cat([W for W, _ in maps], dim=1)  # (d, R k)
    b_stack = torch.cat([b for _, b in maps])  # (R k,)
    target = torch.cat([vectors[new_answers[r]] for r in range(len(maps))], dim=1)  # (N, R k)
    return (target - b_stack) @ torch.linalg.pinv(W_stack)
