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
    `cot_steps` > 0 marks a chain-of-thought model (Theorem 4.4): it generates that many tokens
    greedily, the last one being the answer; every emitted token must match the query's `chain`.
    `blocks` names the coordinate blocks of the residual stream as the proof names them, in order
    (e.g. {"flag": slice(0, 1), "bin(s)": slice(1, 4), ...}): what the pages label the weights with.
    """

    name: str
    model: Transformer
    formulas: dict[str, float] = field(default_factory=dict)
    prefix: tuple[int, ...] = ()
    cot_steps: int = 0
    blocks: dict[str, slice] = field(default_factory=dict)

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

    def _outputs(self, tokens: torch.Tensor) -> torch.Tensor:
        """Logits (batch, steps, vocab_out) of every emitted token: one step, or the whole chain of thought."""
        prompt = self._prompt(tokens)
        if not self.cot_steps:
            return self.model.logits(prompt)[:, None]
        return self.model.generate(prompt, self.cot_steps)[1]

    def predict(self, tokens: torch.Tensor) -> torch.Tensor:
        """The answer (argmax output id of the last emitted token) for prompts (batch, seq)."""
        return self._outputs(tokens)[:, -1].argmax(dim=-1)

    def evaluate(self, queries: Queries, batch_size: int = 512) -> Evaluation:
        """Strict accuracy and margin; a chain-of-thought query counts only if every emitted token is right."""
        if self.cot_steps and (queries.chain is None or queries.chain.shape[1] != self.cot_steps):
            raise ValueError(f"{self.name} emits {self.cot_steps} tokens: queries need a chain of that length")
        n_correct, min_margin = 0, float("inf")
        for start in range(0, len(queries), batch_size):
            tokens = queries.tokens[start : start + batch_size]
            if self.cot_steps:
                targets = queries.chain[start : start + batch_size]
            else:
                targets = queries.targets[start : start + batch_size, None]
            targets = targets.to(self.device)  # (batch, steps)
            logits = self._outputs(tokens)  # (batch, steps, vocab_out)
            target_logit = logits.gather(2, targets[..., None]).squeeze(2)
            others = logits.scatter(2, targets[..., None], float("-inf")).max(dim=2).values
            margin = (target_logit - others).min(dim=1).values  # the weakest step decides
            n_correct += int((margin > 0).sum())
            min_margin = min(min_margin, float(margin.min()))
        return Evaluation(len(queries), n_correct, min_margin)

    def accuracy(self, task) -> float:
        """Fraction of all the task's queries answered correctly (strictly, see Evaluation)."""
        return self.evaluate(task.queries()).accuracy

    def summary(self) -> dict[str, float]:
        """Built sizes next to the paper's formulas (keys of `formulas` prefixed "paper_")."""
        built = dict(d_model=self.d_model, mlp_width=self.mlp_width, n_layers=self.n_layers,
                     n_heads=self.n_heads, n_params=self.n_params)
        return built | {f"paper_{key}": value for key, value in self.formulas.items()}
