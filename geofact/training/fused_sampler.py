"""The batch sampler's keys in one Triton kernel: the same integers as geofact.training.data's torch ops (issue 47).

`FactSampler` gives every fact of every stacked run, at every step, the key hash(seed, step, index) << 20 | index
and takes each run's top `batch_size` keys. In torch ops that is about 30 passes over the (runs, steps, n) int64
keys: each of the two 32-bit hashes is eight in-place integer ops (`data._mix32`), then the shift, the or and the
mask of the facts past a run's own. At the capacity grid's stack (42 runs, n = 4096 x 16 facts) that was 0.68 of
the 2.32 GB a step moved at d = 32 once the output layer was fused (geofact.training.fused_ce). Here each key is
computed in registers and written once; torch's `topk` then reads them.

The arithmetic is the torch ops', on int64 with the same masks (a product that passes 2^63 wraps in both, and
its low 32 bits, all that is kept, are the same), so the keys and the batches are identical, bit for bit:
tests/training/test_fused_sampler.py checks it in Triton's interpreter, and that a run draws the same batches
whichever way its keys are made. As a custom op its count is its output written once (dispatch_count).
"""

from __future__ import annotations  # the kernel's `tl.constexpr` annotations stay strings: no Triton at import

import torch

from geofact.training.fused_ce import build

BLOCK = 1024  # facts a program


def _keys_kernel(seed_hash, n_facts, keys, n, first_step, s_kr, s_ks, s_kn,
                 BLOCK: tl.constexpr, PADDED: tl.constexpr):
    """Program (fact block, step, run): the keys of `BLOCK` facts of one run at one step (data.FactSampler)."""
    index = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    step = tl.program_id(1).to(tl.int64)  # 64-bit offsets: runs x steps x facts can pass 2^31
    run = tl.program_id(2).to(tl.int64)
    ok = index < n
    mask = 0xFFFFFFFF
    # the step's hash of each index (data._mix32 of step * 0x85EBCA77 + index)
    x = ((first_step + step) * 0x85EBCA77 + index.to(tl.int64)) & mask
    x ^= x >> 16
    x = (x * 0x7FEB352D) & mask
    x ^= x >> 15
    x = (x * 0x846CA68B) & mask
    x ^= x >> 16
    # mixed with the run's seed hash, hashed again
    x = (tl.load(seed_hash + run).to(tl.int64) ^ x) & mask
    x ^= x >> 16
    x = (x * 0x7FEB352D) & mask
    x ^= x >> 15
    x = (x * 0x846CA68B) & mask
    x ^= x >> 16
    key = (x << 20) | index.to(tl.int64)
    if PADDED:  # a run's facts past its own count are keyed below every real key
        key = tl.where(index >= tl.load(n_facts + run), -1, key)
    tl.store(keys + run * s_kr + step * s_ks + index * s_kn, key, mask=ok)


@torch.library.custom_op("geofact::sampler_keys", mutates_args=())
def sampler_keys(seed_hash: torch.Tensor, n_facts: torch.Tensor, first_step: int, steps: int, n: int, padded: bool
                 ) -> torch.Tensor:
    """Keys (runs, steps, n) int64 of the runs whose seed hashes are `seed_hash` (runs,) at steps first_step,
    first_step + 1, ...; with `padded`, -1 past each run's n_facts (runs,)."""
    runs = seed_hash.shape[0]
    keys = torch.empty(runs, steps, n, dtype=torch.long, device=seed_hash.device)
    build(_keys_kernel, seed_hash.device, ("first_step",))[(-(-n // BLOCK), steps, runs)](  # one compile for every step
        seed_hash, n_facts, keys, n, first_step, *keys.stride(), BLOCK=BLOCK, PADDED=padded)
    return keys


@sampler_keys.register_fake
def _(seed_hash, n_facts, first_step, steps, n, padded):
    return seed_hash.new_empty(seed_hash.shape[0], steps, n, dtype=torch.long)
