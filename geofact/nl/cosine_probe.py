"""Low-rank affine probes with the cosine objective (`sec:real-lm-probing`, `app:real-lm-probing-train`).

Per (category, relation, layer) a probe W s + b with W = A B of rank k maps the subject state s to the
LM-head row D[t_o] of the answer's first token, trained on L = 1 - cos(W s + b, D[t_o]) with AdamW
(lr 1e-3, weight decay 1e-3), up to 200 epochs with patience-5 early stopping on a subject-disjoint
80/20 split, and scored by ranking cos(W s + b, D[v]) over the whole vocabulary.

The probes of all layers of one relation are trained at once as one stacked model: the loss is a sum
over layers and AdamW acts element-wise, so every layer follows exactly the trajectory it would follow
alone; each layer stops on its own patience and keeps its best-validation weights.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F

from geofact.training.optim import fused_adamw


@dataclass(frozen=True)
class ProbeConfig:
    rank: int = 512                 # k; capped at min(d_in, d_out) when the model is narrower
    lr: float = 1e-3
    weight_decay: float = 1e-3
    max_epochs: int = 200
    patience: int = 5               # epochs without a better validation loss before a layer stops
    batch_size: int = 64
    val_fraction: float = 0.2       # subject-disjoint held-out share (the paper: 80/20)
    seed: int = 0

    def __post_init__(self) -> None:
        ranges = {"rank": (self.rank >= 1, ">= 1"), "lr": (self.lr > 0, "> 0"),
                  "weight_decay": (self.weight_decay >= 0, ">= 0"), "max_epochs": (self.max_epochs >= 1, ">= 1"),
                  "patience": (self.patience >= 1, ">= 1"), "batch_size": (self.batch_size >= 1, ">= 1"),
                  "val_fraction": (0 < self.val_fraction < 1, "in (0, 1)")}
        for name, (ok, allowed) in ranges.items():
            if not ok:
                raise ValueError(f"ProbeConfig.{name} must be {allowed}, got {getattr(self, name)!r}")

    def as_dict(self) -> dict:
        return asdict(self)


def subject_split(subjects: list[str], val_fraction: float, seed: int) -> tuple[list[int], list[int]]:
    """Indices of a subject-disjoint split: a subject's side is fixed by a hash of (seed, name), so it
    is the same for every relation, layer and model, and no subject is on both sides."""
    def side(name: str) -> float:
        digest = hashlib.sha256(f"{seed}/{name}".encode()).digest()
        return int.from_bytes(digest[:8], "big") / 2**64

    val = [i for i, s in enumerate(subjects) if side(s) < val_fraction]
    train = [i for i, s in enumerate(subjects) if side(s) >= val_fraction]
    if not train or not val:
        raise ValueError(f"a split of {len(subjects)} subjects at val_fraction={val_fraction} leaves one side empty")
    return train, val


def _cos_loss(pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """1 - cos per layer, averaged over examples.  pred (L, n, d), target (n, d) -> (L,)"""
    return (1 - F.cosine_similarity(pred, target.unsqueeze(0), dim=-1)).mean(dim=1)


class StackedProbes(torch.nn.Module):
    """One rank-k affine probe per layer: (x A + a) B + b, biases on both factors."""

    def __init__(self, n_layers: int, d_in: int, d_out: int, rank: int, generator: torch.Generator) -> None:
        super().__init__()

        def uniform(*shape: int, fan_in: int) -> torch.nn.Parameter:  # nn.Linear's default init
            bound = 1 / math.sqrt(fan_in)
            return torch.nn.Parameter((torch.rand(*shape, generator=generator) * 2 - 1) * bound)

        self.A = uniform(n_layers, d_in, rank, fan_in=d_in)       # (L, d_in, k)
        self.a = uniform(n_layers, 1, rank, fan_in=d_in)          # (L, 1, k)
        self.B = uniform(n_layers, rank, d_out, fan_in=rank)      # (L, k, d_out)
        self.b = uniform(n_layers, 1, d_out, fan_in=rank)         # (L, 1, d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (L, n, d_in) -> (L, n, d_out)"""
        return torch.baddbmm(self.b, torch.baddbmm(self.a, x, self.A), self.B)


def _keep_layers(probes: StackedProbes, optimiser: torch.optim.Optimizer, keep: torch.Tensor,
                 config: ProbeConfig) -> tuple[StackedProbes, torch.optim.Optimizer]:
    """The probes and AdamW state of the stack's layers `keep` (positions in the stack) only.

    A layer that has stopped on patience has its best weights saved and needs no more steps; dropping it
    from the stack saves the third of the probes' time the stopped layers cost (measured over the real-LM
    page's 56 relations). AdamW acts element-wise and each layer's loss term is its own, so the layers
    left follow the trajectory they followed in the larger stack."""
    state = optimiser.state_dict()
    for name, param in list(probes.named_parameters()):
        setattr(probes, name, torch.nn.Parameter(param.detach()[keep]))
    kept = fused_adamw(probes.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    state["state"] = {i: {k: v if k == "step" else v[keep] for k, v in s.items()} for i, s in state["state"].items()}
    kept.load_state_dict(state)
    return probes, kept


def fit_probes(states: torch.Tensor, targets: torch.Tensor, train: list[int], val: list[int],
               config: ProbeConfig, device: str | torch.device = "cpu") -> tuple[StackedProbes, dict]:
    """Train one probe per layer on states (n, L, d_in) -> targets (n, d_out) on `device`; returns the
    probes (on the CPU) at each layer's best validation loss and a log (epochs run and best validation
    loss per layer). A layer leaves the stack when it stops (`_keep_layers`)."""
    n, n_layers, d_in = states.shape
    d_out = targets.shape[1]
    rank = min(config.rank, d_in, d_out)
    generator = torch.Generator().manual_seed(config.seed)
    probes = StackedProbes(n_layers, d_in, d_out, rank, generator).to(device)
    optimiser = fused_adamw(probes.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    x = states.transpose(0, 1).contiguous().to(device)  # (L, n, d_in)
    targets = targets.to(device)
    x_train, y_train = x[:, train], targets[train]  # (L_live, n_train, d_in): the layers still training
    x_val, y_val = x[:, val], targets[val]
    best = torch.full((n_layers,), math.inf, device=device)
    best_params = {k: v.detach().clone() for k, v in probes.state_dict().items()}  # (L, ...) each
    waited = torch.zeros(n_layers, dtype=torch.long, device=device)
    epochs = torch.zeros(n_layers, dtype=torch.long, device=device)
    live = torch.arange(n_layers, device=device)  # the layers in the stack, by index into L
    for _ in range(config.max_epochs):
        order = torch.randperm(len(train), generator=generator)
        for start in range(0, len(train), config.batch_size):
            idx = order[start: start + config.batch_size].to(device)
            loss = _cos_loss(probes(x_train[:, idx]), y_train[idx]).sum()
            optimiser.zero_grad(set_to_none=True)
            loss.backward()
            optimiser.step()
        epochs[live] += 1
        with torch.no_grad():
            val_loss = _cos_loss(probes(x_val), y_val)  # (L_live,)
            improved = val_loss < best[live]
            best[live] = torch.where(improved, val_loss, best[live])
            waited[live] = torch.where(improved, torch.zeros_like(val_loss, dtype=torch.long), waited[live] + 1)
            for name, value in probes.state_dict().items():
                best_params[name][live[improved]] = value[improved]
            going = waited[live] < config.patience
        if not going.all():  # the epoch's one host read
            if not going.any():
                break
            keep = going.nonzero()[:, 0]
            live, x_train, x_val = live[keep], x_train[keep], x_val[keep]
            probes, optimiser = _keep_layers(probes, optimiser, keep, config)
    for name, value in best_params.items():  # every layer back in the stack, at its best weights
        setattr(probes, name, torch.nn.Parameter(value))
    return probes.cpu(), {"epochs": epochs.tolist(), "best_val_loss": best.tolist(), "rank": rank}


@torch.no_grad()
def unit_rows(unembedding: torch.Tensor) -> torch.Tensor:
    """The LM-head rows scaled to unit length, what `gold_ranks` scores against: computed once per model,
    not once per (relation, layer).  (V, d) -> (V, d)"""
    return F.normalize(unembedding.float(), dim=-1)


def gold_ranks(pred: torch.Tensor, gold: torch.Tensor, d_unit: torch.Tensor, chunk: int = 4096,
               rows: int = 1024) -> torch.Tensor:
    """Rank (1 = best) of each gold token when cos(pred, D[v]) is ranked over the whole vocabulary;
    ties count against the gold token.  pred (n, d), gold (n,), d_unit = unit_rows(D) (V, d) -> (n,)

    Each block of `rows` predictions is scored against the vocabulary once, `chunk` rows of D at a time,
    and the gold score is read off those same scores: a separately computed dot product can differ in the
    last bit and rank the gold token behind itself (and scoring twice cost the real-LM page 44 s)."""
    p_unit = F.normalize(pred.float(), dim=-1)
    ranks = torch.empty(len(gold), dtype=torch.long)
    for first in range(0, len(gold), rows):
        block = slice(first, first + rows)
        scores = torch.cat([p_unit[block] @ d_unit[start: start + chunk].T
                            for start in range(0, d_unit.shape[0], chunk)], dim=1)  # (rows, V)
        gold_score = scores.gather(1, gold[block, None])  # (rows, 1)
        ranks[block] = (scores > gold_score).sum(-1) + 1
    return ranks


def probe_and_score(states: torch.Tensor, gold: torch.Tensor, subjects: list[str], unembedding: torch.Tensor,
                    d_unit: torch.Tensor, config: ProbeConfig, device: str | torch.device = "cpu",
                    score_seen: bool = False) -> dict:
    """The probing protocol for one relation: a subject-disjoint split, per-layer probes from the states
    (n, L, d_in) to the LM-head rows of the gold tokens (n,), whole-vocabulary metrics per layer on the
    held-out subjects (and, with `score_seen`, on the training subjects), and the majority baseline."""
    train, val = subject_split(subjects, config.val_fraction, config.seed)
    probes, log = fit_probes(states, unembedding[gold], train, val, config, device=device)

    def scored(rows: list[int]) -> list[dict]:
        with torch.no_grad():
            predictions = probes(states[rows].transpose(0, 1).contiguous())  # (L, n_rows, d)
        return [{"layer": layer, **rank_metrics(gold_ranks(pred, gold[rows], d_unit))} for layer, pred in enumerate(predictions)]

    result = {"n_train": len(train), "n_val": len(val), "layers": scored(val),
              "majority": rank_metrics(majority_ranks(gold[train], gold[val], d_unit.shape[0])), **log}
    if score_seen:
        result["train_layers"] = scored(train)
    return result


def rank_metrics(ranks: torch.Tensor) -> dict[str, float]:
    ranks = ranks.float()
    return {"hits1": (ranks <= 1).float().mean().item(), "hits10": (ranks <= 10).float().mean().item(),
            "mrr": (1 / ranks).mean().item()}


def chance_metrics(vocab_size: int) -> dict[str, float]:
    """A uniformly random ranking of the vocabulary: Hits@k = k / V, MRR = H_V / V."""
    harmonic = math.log(vocab_size) + 0.5772156649 + 1 / (2 * vocab_size)
    return {"hits1": 1 / vocab_size, "hits10": min(10, vocab_size) / vocab_size, "mrr": harmonic / vocab_size}


def majority_ranks(train_gold: torch.Tensor, val_gold: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Ranks under the constant ranking by training-answer frequency (the majority answer first, ties by
    token id); a token never seen in training gets the expected rank of a random order of the rest."""
    tokens, counts = torch.unique(train_gold, return_counts=True)
    order = sorted(range(len(tokens)), key=lambda i: (-int(counts[i]), int(tokens[i])))
    position = {int(tokens[i]): float(r + 1) for r, i in enumerate(order)}
    unseen = len(tokens) + (vocab_size - len(tokens) + 1) / 2
    return torch.tensor([position.get(int(t), unseen) for t in val_gold])
