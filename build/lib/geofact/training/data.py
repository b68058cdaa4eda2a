"""Single-hop training data: the N R facts (s, r, g_r(s)) and a batch sampler that is a function of
(seed, step) alone, so a run draws the same batches whether it trains alone or stacked with others.

Sequences are (s, r, g_r(s)). The loss is taken only where the answer is predicted (the relation
position): the relation after s is uniform over R and unpredictable from s, so a loss on it would
stay near log R and the 1e-4 early-stopping threshold could never be reached.
"""

from __future__ import annotations

import torch

from geofact.task import SharedAttributeTask

_MASK32 = 0xFFFFFFFF
INDEX_BITS = 20


def facts(N: int, R: int, task_seed: int) -> torch.Tensor:
    """All N R facts of SharedAttributeTask.random(N, R, task_seed) as rows (s, r, g_r(s)), subject-major.

    Shape (N R, 3), int64; r is the relation index (its token is N + r).
    """
    q = SharedAttributeTask.random(N, R, task_seed).queries()
    return torch.stack([q.tokens[:, 0], q.tokens[:, 1] - N, q.targets], dim=1)


def _mix32(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer hash (lowbias32), on int64 tensors kept below 2^32 so products stay < 2^63.
    In place on x (which callers own): the hashes of a block of steps are the sampler's main cost."""
    x &= _MASK32
    x ^= x >> 16
    x *= 0x7FEB352D
    x &= _MASK32
    x ^= x >> 15
    x *= 0x846CA68B
    x &= _MASK32
    x ^= x >> 16
    return x


def batch_indices(seeds: torch.Tensor, steps: int | range, n_facts: torch.Tensor, batch_size: int, n_max: int) -> torch.Tensor:
    """For each run, `batch_size` distinct fact indices in [0, n_facts) at a step (shape (runs, batch)),
    or at each of a range of steps (shape (runs, steps, batch): the same batches, drawn in one go).

    Every fact gets the key hash(seed, step, index) with its index in the low bits (keys are unique,
    so the choice has no ties); the batch is the top keys. A run's facts beyond its own n_facts
    (padding when runs with different R are stacked, up to n_max) are never drawn: runs are hashed in
    groups of equal n_facts, over their own facts only.
    """
    device = seeds.device
    step = torch.as_tensor(steps if isinstance(steps, range) else [steps], device=device)
    seed_hash = _mix32(seeds[:, None, None] * 0x9E3779B1 + 0x632BE5AB)  # (runs, 1, 1)
    chosen = torch.empty(len(seeds), len(step), batch_size, dtype=torch.long, device=device)
    for n in n_facts.unique().tolist():
        if not batch_size <= n <= n_max:
            raise ValueError(f"every run needs batch_size <= n_facts <= n_max ({batch_size}, {n_max}), got n_facts = {n}")
        runs = torch.nonzero(n_facts == n).flatten()
        index = torch.arange(n, device=device)
        step_hash = _mix32(step[:, None] * 0x85EBCA77 + index[None, :])  # (steps, n)
        keys = (_mix32(seed_hash[runs] ^ step_hash) << INDEX_BITS) | index  # (runs in group, steps, n)
        chosen[runs] = keys.topk(batch_size, dim=-1).indices
    return chosen if isinstance(steps, range) else chosen[:, 0]
