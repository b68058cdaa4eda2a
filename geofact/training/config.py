"""Configuration of one single-hop training run (Section 5, Appendix B), validated on construction."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from typing import Literal

Attention = Literal["uniform", "learned"]
MAX_FACTS = 2**20  # the batch sampler keys facts with 20 index bits (geofact.training.data)


@dataclass(frozen=True)
class TrainConfig:
    """One run: the task (N, R, task seed), the model (d, MLP width, options) and the optimiser.

    Defaults are Appendix B's single-hop recipe except `lr`: the paper's 1.0 is a config away
    (`lr=1.0`), and the exp-capacity page shows what it does here.
    """

    N: int = 4096  # entities (subjects = attributes)
    R: int = 8  # relations, one random bijection of [N] each
    d: int = 128  # embedding dimension
    mlp_width: int | None = None  # hidden width of the GELU MLP; None means 4 d
    frozen_embeddings: bool = False  # keep the input entity embeddings at their random init (Appendix D)
    attention: Attention = "uniform"  # "uniform": fixed average over the causal prefix; "learned": W_Q, W_K
    learned_positions: bool = False  # add a learned positional embedding
    lr: float = 1e-2
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    batch_size: int = 1024  # facts per step, drawn without replacement from all N R
    max_steps: int = 15_000
    loss_threshold: float = 1e-4  # early stop once the training loss is below this
    seed: int = 0  # initialisation and batch order
    task_seed: int | None = None  # the bijections; None means `seed`

    def __post_init__(self) -> None:
        def need(ok: bool, name: str, allowed: str) -> None:
            if not ok:
                raise ValueError(f"{name} must be {allowed}, got {getattr(self, name)!r}")

        need(isinstance(self.N, int) and self.N >= 2, "N", "an integer >= 2")
        need(isinstance(self.R, int) and 1 <= self.R <= self.N, "R", f"an integer in [1, N={self.N}]")
        need(self.N * self.R <= MAX_FACTS, "R", f"such that N R <= {MAX_FACTS}")
        need(isinstance(self.d, int) and self.d >= 1, "d", "an integer >= 1")
        need(self.mlp_width is None or (isinstance(self.mlp_width, int) and self.mlp_width >= 1), "mlp_width", "None or an integer >= 1")
        need(self.attention in ("uniform", "learned"), "attention", "'uniform' or 'learned'")
        need(self.lr > 0, "lr", "> 0")
        need(self.weight_decay >= 0, "weight_decay", ">= 0")
        need(self.grad_clip > 0, "grad_clip", "> 0")
        need(isinstance(self.batch_size, int) and 1 <= self.batch_size <= self.N * self.R, "batch_size",
             f"an integer in [1, N R = {self.N * self.R}] (batches are drawn without replacement)")
        need(isinstance(self.max_steps, int) and self.max_steps >= 1, "max_steps", "an integer >= 1")
        need(self.loss_threshold >= 0, "loss_threshold", ">= 0")

    @property
    def width(self) -> int:
        return self.mlp_width if self.mlp_width is not None else 4 * self.d

    @property
    def bijection_seed(self) -> int:
        return self.seed if self.task_seed is None else self.task_seed

    def shape_key(self) -> tuple:
        """Runs with equal keys can be stacked into one batched computation (R may differ: it is padded)."""
        return (self.N, self.d, self.width, self.attention, self.learned_positions, self.batch_size,
                self.max_steps, self.weight_decay, self.grad_clip, self.loss_threshold)

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)

    def key(self) -> str:
        """Stable id of the run: sha256 of its JSON (the cache file name)."""
        return hashlib.sha256(json.dumps(self.as_dict(), sort_keys=True).encode()).hexdigest()[:16]
