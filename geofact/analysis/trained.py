"""One trained single-hop run as the mechanism analyses read it (Section 5.1, Appendix B.3).

The three objects the analyses relate: the subject's input embedding s_x (a row of E_ent), the
post-attention hidden state h(x, r) at the answer position, and the attribute vector a_y. The paper
does not say which vector a_y is in a model with separate input and output embeddings (Appendix B),
so both are offered (`TARGETS`): the output unembedding of entity y (a column of E_out, the direction
the final state must point to for y to win) and the input embedding of y (a row of E_ent, the vector
the model reads when y is a subject).

A TrainedModel is a run's final weights or, with `step`, its weights at a training checkpoint
(geofact.training.sweep keeps them): the analyses run the same way on both, on the device the weights
are on. What the host knows (the bijections, the subject splits, random draws from seeds) is made on
the host and moved there; the analyses read device values back only through `geofact.host.to_host`,
once per result (tests/analysis/test_fake_device.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Literal

import torch

from geofact import fast_paths
from geofact.analysis import rechecked
from geofact.host import as_device, on_host, to_host
from geofact.task import SharedAttributeTask
from geofact.training.config import TrainConfig
from geofact.training.model import final_state, head, hidden
from geofact.training.sweep import load_weights

Target = Literal["unembedding", "embedding"]
TARGETS: dict[str, str] = {
    "unembedding": "a_y = output unembedding of y (column of E_out)",
    "embedding": "a_y = input entity embedding of y (row of E_ent)",
}


@lru_cache(maxsize=64)  # the paper grid has 21 tasks (7 R x 3 seeds); 64 tables are at most 32 MB at N = 4096, R = 16
def task_answers(N: int, R: int, seed: int) -> torch.Tensor:
    """(R, N): the bijections of the task drawn from `seed`, on the host, drawn and validated once per task: 21 ms at
    the paper's N = 4096, R = 16 on a CPU, which every state of a mechanism page paid until 2026-11-30 while a GPU
    lease's device waited. Real CPU tensors even under the tests' fake tensors (geofact.host.on_host); callers copy
    them (`TrainedModel.answers`) or only read them."""
    with on_host():
        return torch.as_tensor(SharedAttributeTask.random(N, R, seed).bijections)


@dataclass(frozen=True)
class TrainedModel:
    config: TrainConfig
    weights: dict[str, torch.Tensor]  # one run's parameters, as train_group returns them (no run dimension)
    step: int | None = None  # the checkpoint these weights are (None: the run's final weights)

    @classmethod
    def load(cls, cache_dir: Path, config: TrainConfig, step: int | None = None,
             device: str | torch.device = "cpu") -> "TrainedModel":
        """A run from the run cache (geofact.training.sweep, trained with save_weights=True), final or at
        `step`, its weights on `device`."""
        device = as_device(device)
        return cls(config, {k: v.to(device) for k, v in load_weights(cache_dir, config, step).items()}, step)

    @property
    def device(self) -> torch.device:
        return self.weights["E_ent"].device

    @cached_property  # moved once: every analysis and accuracy() reads it
    def answers(self) -> torch.Tensor:
        """(R, N): g_r(x), the bijections the run was trained on (on the model's device, a copy of `task_answers`)."""
        c = self.config
        return task_answers(c.N, c.R, c.bijection_seed).to(self.device, copy=True)

    @property
    def subject_embeddings(self) -> torch.Tensor:
        """(N, d): s_x."""
        return self.weights["E_ent"]

    def attribute_vectors(self, target: Target = "unembedding") -> torch.Tensor:
        """(N, d): a_y for every entity y, as `target` defines it (TARGETS)."""
        if target == "unembedding":
            return self.weights["E_out"].T
        if target == "embedding":
            return self.weights["E_ent"]
        raise ValueError(f"target must be one of {sorted(TARGETS)}, got {target!r}")

    def _stacked(self) -> dict[str, torch.Tensor]:
        return {k: v[None] for k, v in self.weights.items()}

    @torch.no_grad()
    def hidden_states(self, embeddings: torch.Tensor | None = None) -> torch.Tensor:
        """(R, N, d): h(x, r) for every subject and relation; `embeddings` (N, d) replaces s_x if given."""
        p = self._stacked()
        if embeddings is not None:
            p["E_ent"] = embeddings[None].to(p["E_ent"].dtype)
        N, R, device = self.config.N, self.config.R, self.device
        tokens = torch.stack([torch.arange(N, device=device).repeat(R),
                              N + torch.arange(R, device=device).repeat_interleave(N)], 1)  # (R N, 2)
        return hidden(p, tokens[None])[0].view(R, N, -1)

    @torch.no_grad()
    def logits(self, h: torch.Tensor) -> torch.Tensor:
        """Logits (..., N) from hidden states (..., d): the MLP block and unembedding."""
        return head(self._stacked(), h.reshape(1, -1, h.shape[-1]))[0].view(*h.shape[:-1], self.config.N)

    @torch.no_grad()
    def final_states(self, h: torch.Tensor) -> torch.Tensor:
        """What the unembedding reads (..., d) from hidden states (..., d): the MLP block and final norm."""
        return final_state(self._stacked(), h.reshape(1, -1, h.shape[-1]))[0].view(h.shape)

    def predict(self, h: torch.Tensor) -> torch.Tensor:
        """Predicted entity ids (...) from hidden states (..., d): the argmax of `logits`."""
        return self.logits(h).argmax(-1)

    def answered(self, h: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Whether the prediction from each hidden state of h (..., d) is its target (...): float32's answer, decided
        through TF32 where the device has it and its rounding cannot change the answer (geofact.analysis.rechecked)."""
        if self.device.type in fast_paths.FAST_DEVICES:
            return rechecked.rechecked_answered(self, h, targets)
        return self.predict(h) == targets

    def correct_fraction(self, embeddings: torch.Tensor | None = None, answers: torch.Tensor | None = None) -> torch.Tensor:
        """Fraction of the N R facts answered right (a 0-d tensor on the device), optionally with other subject
        embeddings (N, d) / bijections (R, N)."""
        answers = self.answers if answers is None else answers.to(self.device)
        return self.answered(self.hidden_states(embeddings), answers).double().mean()

    def accuracy(self, embeddings: torch.Tensor | None = None, answers: torch.Tensor | None = None) -> float:
        """`correct_fraction`, read on the host."""
        return float(to_host(self.correct_fraction(embeddings, answers))[0])

