"""One trained single-hop run as the mechanism analyses read it (Section 5.1, Appendix B.3).

The three objects the analyses relate: the subject's input embedding s_x (a row of E_ent), the
post-attention hidden state h(x, r) at the answer position, and the attribute vector a_y (the output
unembedding of entity y, a column of E_out; see geofact.analysis.readout for why that vector).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Iterator

import torch

from geofact.task import SharedAttributeTask
from geofact.training.config import TrainConfig
from geofact.training.model import head, hidden
from geofact.training.sweep import load_weights, run_sweep


@dataclass(frozen=True)
class TrainedModel:
    config: TrainConfig
    weights: dict[str, torch.Tensor]  # one run's parameters, as train_group returns them (no run dimension)

    @classmethod
    def load(cls, cache_dir: Path, config: TrainConfig) -> "TrainedModel":
        """A run from the run cache (geofact.training.sweep, trained with save_weights=True)."""
        return cls(config, load_weights(cache_dir, config))

    @cached_property  # drawn and validated once: every analysis and accuracy() reads it
    def answers(self) -> torch.Tensor:
        """(R, N): g_r(x), the bijections the run was trained on."""
        c = self.config
        return torch.as_tensor(SharedAttributeTask.random(c.N, c.R, c.bijection_seed).bijections)

    @property
    def subject_embeddings(self) -> torch.Tensor:
        """(N, d): s_x."""
        return self.weights["E_ent"]

    @property
    def attribute_vectors(self) -> torch.Tensor:
        """(N, d): a_y, the output unembedding of each entity."""
        return self.weights["E_out"].T

    def _stacked(self) -> dict[str, torch.Tensor]:
        return {k: v[None] for k, v in self.weights.items()}

    @torch.no_grad()
    def hidden_states(self, embeddings: torch.Tensor | None = None) -> torch.Tensor:
        """(R, N, d): h(x, r) for every subject and relation; `embeddings` (N, d) replaces s_x if given."""
        p = self._stacked()
        if embeddings is not None:
            p["E_ent"] = embeddings[None].to(p["E_ent"].dtype)
        N, R = self.config.N, self.config.R
        tokens = torch.stack([torch.arange(N).repeat(R), N + torch.arange(R).repeat_interleave(N)], 1)  # (R N, 2)
        return hidden(p, tokens[None])[0].view(R, N, -1)

    @torch.no_grad()
    def predict(self, h: torch.Tensor) -> torch.Tensor:
        """Predicted entity ids (...) from hidden states (..., d): the MLP block and unembedding, argmax."""
        shape = h.shape[:-1]
        return head(self._stacked(), h.reshape(1, -1, h.shape[-1]))[0].argmax(-1).view(shape)

    def accuracy(self, embeddings: torch.Tensor | None = None, answers: torch.Tensor | None = None) -> float:
        """Fraction of the N R facts answered right, optionally with other subject embeddings / bijections."""
        answers = self.answers if answers is None else answers
        return float((self.predict(self.hidden_states(embeddings)) == answers).double().mean())


def trained_grid(configs: dict, cache_dir: Path, device: str = "cpu") -> tuple[dict, Iterator[tuple[Any, TrainedModel]]]:
    """({key: run record}, (key, TrainedModel) pairs) for a dict of configs, training the missing runs
    through the run cache (geofact.training.sweep.run_sweep) first. The models load one at a time as the
    pairs are consumed: a paper-scale grid does not fit in memory at once."""
    records = dict(zip(configs, run_sweep(list(configs.values()), cache_dir, device=device)))
    return records, ((k, TrainedModel.load(cache_dir, c)) for k, c in configs.items())
