"""What every construction returns: explicit transformer weights plus exact, strict evaluation."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from geofact.task import Queries
from geofact.transformer import Transformer


@dataclass(frozen=True)
class Evaluation:
    """Strict scoring: a query counts only if the target logit beats every other logit (no ties)."""

    n_queries: int
    n_correct: int
    min_margin: float  # min over queries of (target logit - best other logit); > 0 iff all correct

    @property
    def accuracy(self) -> float:
        return self.n_correct / self.n_queries


@dataclass
class Construction:
    """A theorem's transformer: `model` holds the weights, `formulas` the paper's sizes for comparison.

    `prefix` is prepended to every prompt (e.g. a BOS token for the hierarchical construction).
    """

    name: str
    model: Transformer
    formulas: dict[str, float] = field(default_factory=dict)
    prefix: tuple[int, ...] = ()

    @property
    def d_model(self) -> int:
        return self.model.d_model

    @property
    def mlp_width(self) -> int:
        return self.model.mlp_width

    @property
    def n_layers(self) -> int:
        return self.model.n_layers

    @property
    def n_heads(self) -> int:
        return self.model.n_heads

    @property
    def n_params(self) -> int:
        return self.model.n_params

    @property
    def device(self) -> torch.device:
        return self.model.embed.device

    def _prompt(self, tokens: torch.Tensor) -> torch.Tensor:
        """Task prompts (batch, seq) -> model input (batch, len(prefix) + seq) on the model's device."""
        tokens = tokens.to(self.device)
        if not self.prefix:
            return tokens
        prefix = torch.tensor(self.prefix, device=self.device).expand(len(tokens), -1)
        return torch.cat([prefix, tokens], dim=1)

    def predict(self, tokens: torch.Tensor) -> torch.Tensor:
        """Argmax output id at the last position, for prompts (batch, seq)."""
        return self.model.logits(self._prompt(tokens)).argmax(dim=-1)

    def evaluate(self, queries: Queries, batch_size: int = 512) -> Evaluation:
        n_correct, min_margin = 0, float("inf")
        for start in range(0, len(queries), batch_size):
            tokens = self._prompt(queries.tokens[start : start + batch_size])
            targets = queries.targets[start : start + batch_size].to(self.device)
            logits = self.model.logits(tokens)  # (batch, vocab_out)
            target_logit = logits.gather(1, targets[:, None]).squeeze(1)
            others = logits.scatter(1, targets[:, None], float("-inf")).max(dim=1).values
            margin = target_logit - others
            n_correct += int((margin > 0).sum())
            min_margin = min(min_margin, float(margin.min()))
        return Evaluation(len(queries), n_correct, min_margin)

    def accuracy(self, task) -> float:
        """Fraction of all the task's queries answered correctly (strictly, see Evaluation)."""
        return self.evaluate(task.queries()).accuracy
