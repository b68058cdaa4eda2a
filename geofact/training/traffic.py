"""A training step's memory traffic and arithmetic, counted on the CPU (issue 47, item 1).

At the paper's shapes the GPU step is bound by the bytes its kernels move, not by its FLOPs, so the
yardstick between GPU leases is a count: `step_traffic` runs the stacked trainer (geofact.training.trainer)
on data-less `meta` tensors under torch's FakeTensorMode, each step's kernels launched one by one
(`eager_steps`), and counts per step

- **ops**: dispatcher ops that launch a kernel (views, allocations and a fake tensor's metadata queries apart);
- **bytes**: for each such op, the bytes of its tensor inputs and outputs (an `out=` argument counted as
  written only). Every op reads its inputs from device memory and writes its outputs there, so this is
  the traffic of the step without fusion: an upper bound on what a fused or cached kernel moves. An
  argument the op's schema says it writes and that it does not return (torch's fused AdamW updates its
  weights and moments in place and returns nothing) counts as written too. Three
  kinds of op touch less than their tensors, and are counted for what they touch: a gather, scatter or
  indexed add reads (and writes) only the indexed elements of the tensor it indexes (`INDEXED`); a copy
  or fill writes its first argument without reading it (`WRITTEN`); `zeros_like` and its kin read no
  input at all (`SHAPED`); a kernel of geofact's own (geofact.training.fused_ce, namespace `geofact`) is counted by
  its inputs read once and its outputs written once (`WRITE_ONLY`: the arguments it writes in place are not read),
  as a matmul is: its tiles' rereads are the cache's, as a matmul's are; so is an op that a GPU runs as one kernel
  but `meta` tensors run as its composite definition (`ONE_KERNEL`: torch's fused RMSNorm); and an expanded
  tensor moves its distinct elements (its stride-0 repeats are the same memory);
- **flops**: torch's own count (`torch.utils.flop_counter.FlopCounterMode`: matmuls and convolutions,
  forward and backward), the arithmetic the tensor cores do.

Counts are differences between two and one blocks of steps, so set-up and final bookkeeping cancel.
`roofline_ms` turns them into the shortest time a device could take: the bytes at its memory bandwidth
or the FLOPs at its matmul peak, whichever is longer (the step can do no better; geofact.ops.costs
prices what it does do).
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from typing import Iterator

from geofact.host import host_reads
from geofact.training import hop_trainer
from geofact.training.dispatch_count import count_step, fake_read
from geofact.training.config import MultiHopConfig, TrainConfig
from geofact.training.hop_queries import query_sets
from geofact.training.hop_trainer import train_multihop
from geofact.training.graphs import eager_steps
from geofact.training.grid import PAPER_GRID, CapacityGrid
from geofact.training.trainer import train_group

# H100 SXM data sheet: HBM3 bandwidth and dense peaks by precision policy (fp32: TF32 off, geofact.precision)
H100_BANDWIDTH = 3.35e12  # bytes/s
H100_PEAK = {"fp32": 67e12, "tf32": 495e12, "bf16": 990e12}  # FLOP/s


@dataclass(frozen=True)
class StepTraffic:
    """One stacked step of `runs` runs shaped like `config` (the stack's largest R)."""

    runs: int
    N: int
    d: int
    batch_size: int
    precision: str
    ops: float
    bytes: float
    flops: float
    bytes_by_op: dict[str, float] = field(default_factory=dict)  # op name -> bytes a step, largest first
    kernel_flops: float = 0.0  # of `flops`, those in geofact's own kernels (dispatch_count.kernel_flops)
    kernel_ops: float = 0.0  # of `ops`, launches of geofact's own kernels

    def roofline_ms(self, bandwidth: float = H100_BANDWIDTH, peak: dict[str, float] | None = None) -> float:
        """The shortest a step can take: its bytes at `bandwidth` or its FLOPs at the peak, the longer."""
        peak = H100_PEAK if peak is None else peak
        return 1e3 * max(self.bytes / bandwidth, self.flops / peak.get(self.precision, peak["fp32"]))

    def as_dict(self) -> dict:
        return {**asdict(self), "roofline_h100_ms": self.roofline_ms()}


def step_traffic(configs: list[TrainConfig], block_steps: int = 2) -> StepTraffic:
    """Ops, bytes and FLOPs of one step of `configs` trained as one stack (no stop rule in reach), counted
    on `meta` tensors: no memory is allocated and nothing is computed, so the paper's shapes count on a laptop."""
    if not configs:
        raise ValueError("step_traffic needs at least one run config")

    def train(max_steps: int) -> None:
        runs = [TrainConfig(**{**c.as_dict(), "max_steps": max_steps, "loss_threshold": 0.0}) for c in configs]
        with host_reads(fake_read), eager_steps():
            train_group(runs, device="meta", evaluate=False, log_every=10**9, block_steps=block_steps)

    counted = count_step(train, block_steps)
    shape = max(configs, key=lambda c: c.R)
    return StepTraffic(len(configs), shape.N, shape.d, shape.batch_size, shape.precision, counted["ops"], counted["bytes"],
                       counted["flops"], counted["bytes_by_op"], counted["kernel_flops"], counted["kernel_ops"])


def hop_step_traffic(configs: list[MultiHopConfig]) -> StepTraffic:
    """`step_traffic` of a multi-hop stack (geofact.training.hop_trainer): a step and its share of a check, which
    evaluates the eval queries every `check_every` steps. Counted at checks every 2 and every 4 steps, so a
    block of c steps and its check is c x step + check: step = (block4 - block2) / 2, check = block2 - 2 step."""
    if not configs:
        raise ValueError("hop_step_traffic needs at least one run config")
    sets = {c: query_sets(c) for c in configs}  # host data (numpy draws), made outside the fake mode

    def block(every: int) -> dict:
        def train(max_steps: int) -> None:
            runs = [replace(c, max_steps=max_steps, check_every=every) for c in configs]
            with host_reads(fake_read), eager_steps(), _query_sets({r: sets[c] for r, c in zip(runs, configs)}):
                train_multihop(runs, device="meta")
        return count_step(train, every)  # per step of (two blocks - one block) / every: (every steps + a check) / every

    two, four = block(2), block(4)
    per_block = {k: (2 * two[k], 4 * four[k]) for k in ("ops", "bytes", "flops", "kernel_flops", "kernel_ops")}
    step = {k: (b4 - b2) / 2 for k, (b2, b4) in per_block.items()}
    check = {k: b2 - 2 * step[k] for k, (b2, _) in per_block.items()}
    every = configs[0].check_every
    shape = max(configs, key=lambda c: c.R)
    ops, moved, flops, kernel, launches = (step[k] + check[k] / every for k in ("ops", "bytes", "flops", "kernel_flops", "kernel_ops"))
    return StepTraffic(len(configs), shape.N, shape.d, shape.batch_size, shape.precision, ops, moved, flops,
                       kernel_flops=kernel, kernel_ops=launches)


@contextmanager
def _query_sets(sets: dict) -> Iterator[None]:
    """The multi-hop trainer's query sets read from `sets` (drawn beforehand) while inside."""
    before = hop_trainer.query_sets
    hop_trainer.query_sets = sets.__getitem__
    try:
        yield
    finally:
        hop_trainer.query_sets = before


PAPER_SHAPES = ((4096, 32, 42), (4096, 128, 42), (4096, 768, 42), (32768, 640, 4))  # (N, d, runs) issue 47 counts


def paper_shape(N: int, d: int, runs: int, precision: str = "fp32") -> list[TrainConfig]:
    """`runs` runs at the paper's batch (1024): the capacity grid's column at N = 4096 (42 runs: every R,
    seed and regime), else exp-scaling's R = 8 trials (learned and frozen, seeds in turn)."""
    if N == 4096 and runs == 42:
        return grid_column(d, precision=precision)
    return [TrainConfig(N=N, R=8, d=d, batch_size=min(1024, 8 * N), frozen_embeddings=bool(i % 2), seed=i // 2, lr=1e-3,
                        max_steps=15000, precision=precision) for i in range(runs)]


def grid_column(d: int, precision: str = "fp32") -> list[TrainConfig]:
    """The paper's capacity grid (geofact.training.grid.PAPER_GRID) at one d: every R, seed and regime, 42
    runs, as one stack."""
    grid = CapacityGrid(**{**PAPER_GRID.as_dict(), "d_values": (d,), "checkpoints": (), "precision": precision})
    return list(grid.configs().values())