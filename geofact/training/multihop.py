"""Multi-hop training data (Appendix C, `app::exp-multihop`): sequences with and without chain-of-thought.

A query (s_0, r_1, ..., r_k) asks for s_k = g_{r_k} o ... o g_{r_1}(s_0) (geofact.task.KHopTask).
Token ids as everywhere in geofact: entities 0..N-1, relation r is N + r. Outputs are entities.

    no CoT   tokens  s_0 r_1 ... r_k                      target s_k at the last position (k)
    CoT      tokens  s_0 r_1 ... r_k s_1 ... s_{k-1}      targets s_1 ... s_k at positions k ... 2k - 1

With chain-of-thought the model writes the path: the token after the prompt is s_1, and each emitted
s_i is read back as the input that asks for s_{i+1} (teacher-forced in training, generated at eval).
Positions that carry no target hold IGNORE (-100, torch's cross-entropy ignore_index).

Which queries train and which evaluate (the query space N R^k reaches 2^27 at the paper's scale):
`split_queries` draws a fixed training pool and an eval set; `eval_seen` says whether the eval
queries come from the pool (memorisation) or from outside it (composition of seen single hops).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from geofact.task import KHopTask

IGNORE = -100
MAX_POOL = 2**22  # queries held in memory as a training pool (tokens and paths, int64)


def sequences(chain: torch.Tensor, relations: torch.Tensor, N: int, cot: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Input tokens and per-position targets for queries with paths `chain` (Q, k + 1) = s_0..s_k and
    relations (Q, k). Returns (tokens, targets), both (Q, k + 1) without CoT and (Q, 2k) with it."""
    Q, k = relations.shape
    if chain.shape != (Q, k + 1):
        raise ValueError(f"chain must be (Q, k + 1) = {(Q, k + 1)} for relations of shape {tuple(relations.shape)}, got {tuple(chain.shape)}")
    prompt = torch.cat([chain[:, :1], N + relations], dim=1)  # (Q, k + 1): s_0 r_1 ... r_k
    if not cot:
        targets = torch.full_like(prompt, IGNORE)
        targets[:, -1] = chain[:, -1]
        return prompt, targets
    tokens = torch.cat([prompt, chain[:, 1:k]], dim=1)  # (Q, 2k): the emitted s_1..s_{k-1} read back
    targets = torch.full_like(tokens, IGNORE)
    targets[:, k:] = chain[:, 1:]  # position k + i - 1 predicts s_i
    return tokens, targets


@dataclass(frozen=True)
class QuerySplit:
    """Training and evaluation queries of one k-hop task: tokens (Q, k + 1) prompts, chain (Q, k + 1) paths."""

    train_prompts: torch.Tensor
    train_chain: torch.Tensor
    eval_prompts: torch.Tensor
    eval_chain: torch.Tensor
    eval_seen: bool  # True: the eval queries are a subset of the training pool


def split_queries(task: KHopTask, train_size: int | None, eval_size: int, eval_seen: bool, seed: int) -> QuerySplit:
    """A training pool of `train_size` queries (None: all N R^k) and `eval_size` eval queries, uniform
    without replacement; with eval_seen=False the two are disjoint, else the eval set is drawn from the pool."""
    total = task.n_queries
    train_size = total if train_size is None else train_size
    if not 1 <= train_size <= min(total, MAX_POOL):
        raise ValueError(f"train_size must be in [1, min(N R^k, {MAX_POOL}) = {min(total, MAX_POOL)}] "
                         f"(None: all N R^k = {total} queries), got {train_size}")
    if not 1 <= eval_size <= (train_size if eval_seen else total - train_size):
        limit = train_size if eval_seen else total - train_size
        raise ValueError(f"eval_size must be in [1, {limit}] ({'the pool' if eval_seen else 'queries outside the pool'}), got {eval_size}")
    drawn = task.queries(sample=train_size if eval_seen else train_size + eval_size, seed=seed)
    order = torch.as_tensor(np.random.default_rng(seed + 1).permutation(len(drawn.targets)))
    train = order[:train_size]
    evaluate = order[:eval_size] if eval_seen else order[train_size:]
    return QuerySplit(drawn.tokens[train], drawn.chain[train], drawn.tokens[evaluate], drawn.chain[evaluate], eval_seen)
