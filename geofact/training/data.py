"""Single-hop training data: the N R facts (s, r, g_r(s)) and a batch sampler that is a function of
(seed, step) alone, so a run draws the same batches whether it trains alone or stacked with others.

Sequences are (s, r, g_r(s)). The loss is taken only where the answer is predicted (the relation
position): the relation after s is uniform over R and unpredictable from s, so a loss on it would
stay near log R and the 1e-4 early-stopping threshold could never be reached.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from geofact.task import SharedAttributeTask
from geofact.training import fused_ce, fused_sampler

_MASK32 = 0xFFFFFFFF
INDEX_BITS = 20
# Devices on which runs of different fact counts are hashed as one group, over the largest count, their facts
# beyond their own count keyed below every real key: more hashing (the capacity stack's 7 values of R, 42 runs at
# N = 4096: 2.75M keys a step against 1.6M) for 7 times fewer operations, which is what a GPU's step waits on
# (issue 47: the sampler's ~226 ops of that stack's ~540). A CPU, whose cost is the hashing, keeps a group per count.
PADDED_DEVICES = ("cuda", "meta")
# Devices whose keys come from geofact's Triton kernel (geofact.training.fused_sampler) where it is wanted
# (fused_ce.wanted): the same integers; geofact.ops.step_ab times the step both ways
FUSED_DEVICES = ("cuda", "meta")


def facts(N: int, R: int, task_seed: int) -> torch.Tensor:
    """All N R facts of SharedAttributeTask.random(N, R, task_seed) as rows (s, r, g_r(s)), subject-major.

    Shape (N R, 3), int64; r is the relation index (its token is N + r). Built with numpy from the
    task's tables: host data, made the same way under fake tensors (tests/training/test_fake_device.py).
    """
    bijections = SharedAttributeTask.random(N, R, task_seed).bijections  # (R, N)
    s, r = np.repeat(np.arange(N), R), np.tile(np.arange(R), N)
    return torch.as_tensor(np.stack([s, r, bijections[r, s]], axis=1).astype(np.int64))


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


class FactSampler:
    """Batch indices of stacked runs, a block of steps at a time, with no host read of a device value.

    Every fact gets the key hash(seed, step, index) with its index in the low bits (keys are unique,
    so the choice has no ties); the batch is the top keys. A run's facts beyond its own n_facts
    (padding when runs with different R are stacked, up to n_max) are never drawn: runs are hashed in
    groups of equal n_facts, over their own facts only, or (`padded`, PADDED_DEVICES) all together over
    n_max with the keys past a run's own facts set below every real one; either way the same batches. The
    groups are known from the configs, so their index tensors are made once per stack, not per draw.
    With `fused` (default: on FUSED_DEVICES where geofact's Triton kernels are wanted, fused_ce.wanted) the
    keys come from one kernel (geofact.training.fused_sampler), the same integers in one pass instead of about 30.
    """

    def __init__(self, seeds: Sequence[int], n_facts: Sequence[int], batch_size: int, n_max: int,
                 device: str | torch.device = "cpu", padded: bool | None = None, fused: bool | None = None) -> None:
        if len(seeds) != len(n_facts):
            raise ValueError(f"seeds and n_facts must have one entry per run, got {len(seeds)} and {len(n_facts)}")
        for n in n_facts:
            if not batch_size <= n <= n_max:
                raise ValueError(f"every run needs batch_size <= n_facts <= n_max ({batch_size}, {n_max}), got n_facts = {n}")
        self.seeds, self.n_facts = [int(s) for s in seeds], [int(n) for n in n_facts]
        self.batch_size, self.device = batch_size, torch.device(device)
        seed = torch.tensor(self.seeds, dtype=torch.long, device=self.device)
        self.seed_hash = _mix32(seed[:, None, None] * 0x9E3779B1 + 0x632BE5AB)  # (runs, 1, 1)
        sizes = sorted(set(self.n_facts))
        self.padded = self.device.type in PADDED_DEVICES if padded is None else padded
        self.counts = torch.tensor(self.n_facts, device=self.device)  # (runs,)
        self.beyond = None  # (runs, 1, n_max): the facts past each run's own, when hashed together
        if self.padded and len(sizes) > 1:
            index = torch.arange(max(sizes), device=self.device)
            self.beyond = (index[None, :] >= self.counts[:, None])[:, None, :]
            sizes = [max(sizes)]
        # the keys by one Triton kernel (geofact.training.fused_sampler: the same integers) on a GPU with Triton
        self.fused = self.device.type in FUSED_DEVICES and fused_ce.wanted() if fused is None else fused
        self.groups = [(n, None if len(sizes) == 1 else
                        torch.tensor([i for i, x in enumerate(self.n_facts) if x == n], device=self.device),
                        torch.arange(n, device=self.device)) for n in sizes]

    def keep(self, runs: Sequence[int]) -> FactSampler:
        """The sampler of the runs at these positions only."""
        return FactSampler([self.seeds[i] for i in runs], [self.n_facts[i] for i in runs], self.batch_size,
                           max(self.n_facts), self.device, self.padded, self.fused)

    def __call__(self, steps: range) -> torch.Tensor:
        """Fact indices (runs, len(steps), batch_size) of every run at each of these steps."""
        step = None if self.fused else torch.arange(steps.start, steps.stop, device=self.device)
        chosen = None  # (runs, steps, batch_size), where the runs are hashed in groups
        for n, runs, index in self.groups:
            seed_hash = self.seed_hash if runs is None else self.seed_hash[runs]
            if self.fused:
                keys = fused_sampler.sampler_keys(seed_hash.flatten(), self.counts if runs is None else self.counts[runs],
                                                  steps.start, len(steps), n, self.beyond is not None)
            else:
                step_hash = _mix32(step[:, None] * 0x85EBCA77 + index[None, :])  # (steps, n)
                keys = (_mix32(seed_hash ^ step_hash) << INDEX_BITS) | index  # (runs in group, steps, n)
                if self.beyond is not None:  # every real key is >= 0
                    keys.masked_fill_(self.beyond, -1)
            top = keys.topk(self.batch_size, dim=-1).indices
            if runs is None:
                return top
            if chosen is None:
                chosen = torch.empty(len(self.seeds), len(steps), self.batch_size, dtype=torch.long, device=self.device)
            chosen[runs] = top
        return chosen


def batch_indices(seeds: Sequence[int], steps: int | range, n_facts: Sequence[int], batch_size: int, n_max: int,
                  device: str | torch.device = "cpu") -> torch.Tensor:
    """For each run, `batch_size` distinct fact indices in [0, n_facts) at a step (shape (runs, batch)),
    or at each of a range of steps (shape (runs, steps, batch): the same batches, drawn in one go).
    See FactSampler."""
    sampler = FactSampler(seeds, n_facts, batch_size, n_max, device)
    return sampler(steps) if isinstance(steps, range) else sampler(range(steps, steps + 1))[:, 0]
