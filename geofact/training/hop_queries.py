"""Multi-hop training data (Appendix C, `app::exp-multihop`): sequences with and without chain-of-thought.

A query (s_0, r_1, ..., r_k) asks for s_k = g_{r_k} o ... o g_{r_1}(s_0) (geofact.task.KHopTask).
Token ids as everywhere in geofact: entities 0..N-1, relation r is N + r. Outputs are entities.

    no CoT   tokens  s_0 r_1 ... r_k                      target s_k at the last position (k)
    CoT      tokens  s_0 r_1 ... r_k s_1 ... s_{k-1}      targets s_1 ... s_k at positions k ... 2k - 1

With chain-of-thought the model writes the path: the token after the prompt is s_1, and each emitted
s_i is read back as the input that asks for s_{i+1} (teacher-forced in training, generated at eval).
Positions that carry no target hold IGNORE (-100, torch's cross-entropy ignore_index).

Which queries train and which evaluate (the query space N R^k reaches 2^27 at the paper's scale, and
the paper does not say) is set by MultiHopConfig.train_queries and .eval_seen:

* fresh (train_queries=None): every batch is drawn uniformly from all N R^k queries by a hash of
  (seed, step, slot), so a run draws the same batches alone or stacked. Held out (eval_seen=False):
  a batch query that is an eval query is redrawn; the eval set is then at most half the space.
* pool (train_queries=P): P distinct queries drawn once; batches draw uniformly from them. The eval
  set is a subset of the pool (eval_seen=True) or drawn outside it (False).

A query is the row (s_0, r_1, ..., r_k) of relation indices (not tokens); its id s_0 R^k + word, with
r_1 the most significant digit, is KHopTask's enumeration order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch.nn import functional as F

from geofact.host import to_host
from geofact.task import KHopTask
from geofact.training.config import MultiHopConfig
from geofact.training.data import _mix32

IGNORE = -100
MAX_REDRAWS = 64  # a held-out eval set is at most half the space, so 64 redraws miss with p <= 2^-64


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


def query_ids(queries: torch.Tensor, R: torch.Tensor | int) -> torch.Tensor:
    """Ids s_0 R^k + word of queries (..., k + 1); R broadcasts against the leading dims."""
    ids = queries[..., 0]
    for hop in range(1, queries.shape[-1]):
        ids = ids * R + queries[..., hop]
    return ids


@dataclass(frozen=True)
class QuerySets:
    """One run's fixed queries: eval (E, k + 1) and, with train_queries set, the pool (P, k + 1)."""

    task: KHopTask
    eval: torch.Tensor
    pool: torch.Tensor | None


def query_sets(config: MultiHopConfig) -> QuerySets:
    """The run's task (bijections from its task seed), eval set and training pool, drawn from its seed."""
    task = KHopTask.random(config.N, config.R, config.k, config.bijection_seed)
    total, E, P = task.n_queries, config.eval_queries, config.train_queries
    if P is None:
        eval_size = min(E, total if config.eval_seen else total // 2)
        return QuerySets(task, _draw(task, eval_size, config.seed), None)
    P = min(P, total)
    if config.eval_seen:
        pool = _draw(task, P, config.seed)
        return QuerySets(task, pool[: min(E, P)], pool)
    drawn = _draw(task, P + min(E, total - P), config.seed)
    return QuerySets(task, drawn[P:], drawn[:P])


def _draw(task: KHopTask, size: int, seed: int) -> torch.Tensor:
    """`size` distinct queries (s_0, r_1..r_k) in random order."""
    q = task.queries(sample=size, seed=seed)
    order = torch.as_tensor(np.random.default_rng(seed + 1).permutation(len(q.targets)))
    return torch.cat([q.tokens[:, :1], q.tokens[:, 1:] - task.N], dim=1)[order]


def _hashes(seeds: torch.Tensor, steps: range, batch_size: int, width: int, salt: int) -> torch.Tensor:
    """32-bit hashes (M, steps, batch, width) of (seed, step, slot, salt): the same for a run alone or stacked."""
    slot = torch.arange(batch_size * width, device=seeds.device).view(1, batch_size, width)
    step = torch.arange(steps.start, steps.stop, device=seeds.device)[:, None, None]
    seed_hash = _mix32(seeds * 0x9E3779B1 + 0x632BE5AB + salt * 0x27D4EB2F)[:, None, None, None]
    return _mix32(seed_hash ^ _mix32(step * 0x85EBCA77 + slot))


class BatchSampler:
    """Training queries (M, steps, B, k + 1) for stacked runs, a function of (run, step) alone.

    `counts` (M,) pool sizes and `pools` (M, P_max, k + 1) zero-padded in pool mode; `held_out`
    (M, E_max) eval ids (-1 padding) to redraw in fresh held-out mode. Only the held-out redraws read
    the device on the host (whether a clash is left, once per round for a whole draw of steps).
    """

    def __init__(self, configs: list[MultiHopConfig], sets: list[QuerySets], device: torch.device) -> None:
        first = configs[0]
        self.N, self.k, self.batch_size = first.N, first.k, first.batch_size
        self.seeds = torch.tensor([c.seed for c in configs], device=device)
        self.R = torch.tensor([c.R for c in configs], device=device)
        self.pools = self.counts = self.held_out = None
        if first.train_queries is not None:
            self.counts = torch.tensor([len(s.pool) for s in sets], device=device)
            self.pools = _pad([s.pool for s in sets], device)
        elif not first.eval_seen:
            self.ids = [query_ids(s.eval, c.R).to(device) for c, s in zip(configs, sets)]
            self.space = max(c.n_queries for c in configs)
            self._shift_ids()

    def _shift_ids(self) -> None:
        # run m's ids shifted by m * space, so that one sorted isin serves every run
        self.held_out = torch.cat([i + m * self.space for m, i in enumerate(self.ids)])

    def keep(self, runs: list[int]) -> None:
        """Sample for the runs at these indices only (the others have left the stack)."""
        rows = torch.tensor(runs, device=self.seeds.device)
        self.seeds, self.R = self.seeds[rows], self.R[rows]
        if self.pools is not None:
            self.counts, self.pools = self.counts[rows], self.pools[rows]
        if self.held_out is not None:
            self.ids = [self.ids[m] for m in runs]
            self._shift_ids()

    def __call__(self, steps: range) -> torch.Tensor:
        B = self.batch_size
        if self.pools is not None:
            index = _hashes(self.seeds, steps, B, 1, 0)[..., 0] % self.counts[:, None, None]  # (M, steps, B)
            return self.pools[torch.arange(len(self.seeds), device=index.device)[:, None, None], index]
        queries = self._fresh(steps, 0)
        if self.held_out is None:
            return queries
        run = torch.arange(len(self.seeds), device=queries.device)[:, None, None]
        for salt in range(1, MAX_REDRAWS + 1):
            clash = torch.isin(query_ids(queries, self.R[:, None, None]) + run * self.space, self.held_out)  # (M, steps, B)
            (left,) = to_host(clash.any())
            if not left:
                return queries
            queries = torch.where(clash[..., None], self._fresh(steps, salt), queries)
        raise RuntimeError("held-out redraws did not clear the eval set (is it most of the query space?)")

    def _fresh(self, steps: range, salt: int) -> torch.Tensor:
        h = _hashes(self.seeds, steps, self.batch_size, self.k + 1, salt)  # (M, steps, B, k + 1)
        modulus = torch.cat([torch.full_like(self.R[:, None], self.N), self.R[:, None].expand(-1, self.k)], dim=1)
        return h % modulus[:, None, None, :]


def _pad(tensors: list[torch.Tensor], device: torch.device) -> torch.Tensor:
    """Stack (n_i, ...) tensors into (M, max n_i, ...), zero-padded."""
    n = max(len(t) for t in tensors)
    return torch.stack([F.pad(t, (0, 0, 0, n - len(t))) for t in tensors]).to(device)


def walk(tables: torch.Tensor, queries: torch.Tensor) -> torch.Tensor:
    """Paths (M, Q, k + 1) s_0..s_k of queries (M, Q, k + 1) under stacked bijection tables (M, R_max, N)."""
    M, R_max, N = tables.shape
    flat = tables.flatten()
    base = (torch.arange(M, device=queries.device) * R_max * N)[:, None]
    path = [queries[..., 0]]
    for hop in range(1, queries.shape[-1]):
        path.append(flat[base + queries[..., hop] * N + path[-1]])
    return torch.stack(path, dim=-1)
