"""A device's cost model for the trainer's step, and its calibrations per card (issue 47, item 5).

    step seconds = runs x (FLOPs / matmul rate + bytes / bandwidth) + ops x seconds per op

FLOPs are the matmuls of a step (`step_flops`), bytes its passes over the logits and the optimiser's
over the weights (`step_bytes`), ops its dispatched operations (counted by bench/bench_trainer.py
--ops, `geofact.ops.benchmark.step_ops`). A `Calibration` holds a device's rates: fitted to
bench/bench_trainer.py's stacked rates on it (`fit`, `bench_trainer.py --calibrate`), then, once the
device has trained real groups, refitted to their timings (`group_timings`,
bench/calibrate_from_records.py), and stored per card under bench/calibration/ (an H100's and an
H200's apart, never mixed); without one, `cuda` has `H100_SPEC`, constants from the H100's data sheet.
`geofact.ops.costs` prices the pages' runs with it; exp-capacity's page shows the stored one.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from geofact.training.config import MultiHopConfig, TrainConfig
from geofact.training.model import n_params

MULTIHOP_OPS_FACTOR = 2.5  # a multi-hop step (autograd, learned attention, L positions) against a single-hop one


@dataclass(frozen=True)
class Calibration:
    """What a device does per second with the trainer's step (see the module docstring)."""

    device: str  # as geofact.device.describe_device writes it
    matmul_flops: dict[str, float]  # achieved FLOP/s of the step's matmuls, per precision policy
    bandwidth: float  # achieved bytes/s of its elementwise passes
    op_seconds: float  # fixed cost of one dispatched op (launch and framework)
    ops_per_step: float  # ops of a single-hop step (views excluded)
    source: str  # where the numbers come from
    counted: CountedRates | None = None  # rates of a step's counted work, where the timed steps have been counted
    # {analysis: measured / priced} over the states the card analysed (their records' seconds; "load": their loading),
    # by which the plan scales its price of each analysis (geofact.ops.costs.fit_analysis_factors); None: none timed
    analysis_factors: dict[str, float] | None = None

    def step_seconds(self, config: TrainConfig | MultiHopConfig, runs: int) -> float:
        rate = self.matmul_flops.get(config.precision) or self.matmul_flops["fp32"]
        ops = self.ops_per_step * (MULTIHOP_OPS_FACTOR if isinstance(config, MultiHopConfig) else 1.0)
        return runs * (step_flops(config) / rate + step_bytes(config) / self.bandwidth) + ops * self.op_seconds

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, stored: dict) -> Calibration:
        counted = stored.get("counted")
        return cls(**{**stored, "counted": CountedRates(**counted) if counted else None})


@dataclass(frozen=True)
class CountedRates:
    """A card's rates for the work of a step as `geofact.training.traffic` counts it (bytes, FLOPs and ops on
    fake `meta` tensors), fitted to the steps the card timed, each counted as the code that trained it ran
    (bench/count_lease_steps.py). A step changed since is then priced by its own count: fewer bytes, fewer
    ops, less time, before any GPU has timed it. What the fit assumes is that the card moves the new
    step's bytes at the rate it moved the old step's (the same kinds of kernel: matmuls, elementwise
    passes, reductions); a lease's timing of the new step tests that."""

    matmul_flops: dict[str, float]  # achieved FLOP/s of the counted FLOPs, per precision policy
    bandwidth: float  # achieved bytes/s of the counted bytes
    op_seconds: float  # seconds per counted op
    source: str
    # achieved FLOP/s of the FLOPs in geofact's kernels (dispatch_count.kernel_flops: the fused output layer's Triton
    # matmuls, whose small tiles run below cuBLAS's rate) and seconds per launch of one of them (their loops over a
    # run's rows or entities have a latency a small stack does not hide); None: not timed on this card, priced as
    # cuBLAS's FLOPs and as any op
    kernel_flops: float | None = None
    kernel_op_seconds: float | None = None
    # a hypothetical the plan prints beside the fitted rates (geofact.ops.costs.kernels_as_ops, floor_calibration):
    # geofact's kernels as fast as the card's other matmuls and ops, the analyses' fused decisions (fused_decide) too
    kernels_as_ops: bool = False

    def seconds(self, counted: Mapping[str, float], precision: str) -> float:
        """A step's seconds from its count {"flops", "bytes", "ops", "kernel_flops", "kernel_ops"} (of the FLOPs and
        ops, those in geofact's kernels; geofact.training.dispatch_count.count_step): a key it lacks counts nothing
        (a count kept before geofact's kernels were counted apart, or a step's launches alone)."""
        flops, moved, ops = counted.get("flops", 0.0), counted.get("bytes", 0.0), counted["ops"]
        kernel, kernel_ops = counted.get("kernel_flops", 0.0), counted.get("kernel_ops", 0.0)
        rate = self.matmul_flops.get(precision) or self.matmul_flops["fp32"]
        launch = self.op_seconds if self.kernel_op_seconds is None else self.kernel_op_seconds
        return ((flops - kernel) / rate + kernel / (self.kernel_flops or rate) + moved / self.bandwidth
                + (ops - kernel_ops) * self.op_seconds + kernel_ops * launch)


# H100 SXM data sheet: 67 TFLOP/s float32, 495 dense TF32, 990 dense bf16; 3.35 TB/s HBM3. The step's matmuls
# are skinny (K = d), so half the float32 rate and a third of the tensor cores' are what it can expect. Eager
# PyTorch launches cost ~8 us an op; a step replayed as a CUDA graph (geofact.training.graphs) leaves the
# gap between its kernels, ~2.5 us. A guess until bench_trainer.py --device cuda --calibrate replaces it.
H100_SPEC = Calibration(device="cuda (NVIDIA H100, data sheet)", matmul_flops={"fp32": 33e12, "tf32": 165e12, "bf16": 330e12},
                        bandwidth=2.3e12, op_seconds=2.5e-6, ops_per_step=112.0,
                        source="H100 SXM data sheet with assumed efficiencies, steps as CUDA graphs (not measured)")


PEAK_OVER_FP32 = {"fp32": 1.0, "tf32": 495 / 67, "bf16": 990 / 67}  # H100 SXM dense tensor-core peaks over float32's


def step_flops(c: TrainConfig | MultiHopConfig) -> float:
    """Matmul FLOPs of one run's training step (forward + backward ~ 3 x forward): keys at every position
    (learned attention), queries, values, the output projection, MLP and unembedding at the T positions
    with a target (single-hop: the last of two; geofact.training.model.hidden, causal_hidden, head)."""
    B, d, w, N = c.batch_size, c.d, c.width, c.N
    T = c.n_targets if isinstance(c, MultiHopConfig) else 1
    attention = 2 * d * d * T + (d * d * (T + c.seq_len) if c.attention == "learned" else 0)
    return 3.0 * 2 * B * (attention + T * (2 * d * w + d * N))


def step_bytes(c: TrainConfig | MultiHopConfig) -> float:
    """Bytes one run's step moves through memory: ~10 passes over its float32 logits (the matmul's write,
    log-sum-exp, softmax, the two gradient matmuls' reads) and the optimiser's ~12 over its weights."""
    targets = c.n_targets if isinstance(c, MultiHopConfig) else 1
    return 4.0 * (10 * c.batch_size * targets * c.N + 12 * n_params(c))


@dataclass(frozen=True)
class TimedGroup:
    """A stacked group a device trained, as its run records say: its runs, and how long a step took."""

    configs: tuple[TrainConfig, ...]  # its runs
    runs: float  # its mean stack: run-steps / the longest run's steps (runs leave the stack as they stop)
    seconds: float  # a step, over the longest run's steps
    commit: str  # the code that trained it (its records' provenance)

    @property
    def config(self) -> TrainConfig:
        """The run whose shape the stack takes (the largest R)."""
        return max(self.configs, key=lambda c: c.R)


def timed_groups(records: list[dict], device: str, min_steps: int = 1000) -> list[TimedGroup]:
    """The stacked groups that trained `records` on `device` (a kind such as "cuda", or a whole description):
    the steadiest timing there is, whole groups at their real shapes. A group's records share its
    `group_seconds` and `group_size`. Groups shorter than `min_steps` are left out: their time is mostly
    warm-up and a CUDA graph's capture."""
    groups: dict[tuple, list[dict]] = {}
    for r in records:
        made_on = (r.get("provenance") or {}).get("device", "")
        if r.get("schema") != "geofact.training.run/1" or not made_on.startswith(device) or not r.get("group_seconds"):
            continue
        config = TrainConfig(**r["config"])
        groups.setdefault((config.shape_key(), r["group_seconds"], r.get("group_size")), []).append(r)
    out = []
    for (_, seconds, _), members in sorted(groups.items(), key=lambda kv: str(kv[0])):
        longest = max(m["steps"] for m in members)
        if longest < min_steps:
            continue
        out.append(TimedGroup(tuple(TrainConfig(**m["config"]) for m in members), sum(m["steps"] for m in members) / longest,
                              seconds / longest, (members[0].get("provenance") or {}).get("git_commit", "")))
    return sorted(out, key=lambda g: (g.config.N, g.config.d, g.runs))


def group_timings(records: list[dict], device: str, min_steps: int = 1000) -> list[tuple[TrainConfig, float, float]]:
    """(config, runs, seconds a step) of `timed_groups`: the stack's largest-R run, its mean stack, its step."""
    return [(g.config, g.runs, g.seconds) for g in timed_groups(records, device, min_steps)]


def _capped_fit(A: np.ndarray, t: np.ndarray, cap: float) -> tuple[float, float, float, np.ndarray]:
    """(matmul rate, 1 / bandwidth, the third column's seconds, relative errors) for step seconds t = A @ (1 / rate,
    1 / bandwidth, third): non-negative least squares in relative error (small and large steps count alike), the
    rate no higher than `cap`, the device's peak for the policy (where matmuls are a small share of the step, the
    fit alone cannot bound it); the errors as the capped rates price the steps."""
    rates, errors = _capped_nnls(A, t, [cap, None, None])
    return 1 / rates[0], rates[1], rates[2], errors


def _capped_nnls(A: np.ndarray, t: np.ndarray, caps: list[float | None]) -> tuple[np.ndarray, np.ndarray]:
    """(x, relative errors) for step seconds t = A @ x, x >= 0, by non-negative least squares in relative error,
    each x[j] at least 1 / caps[j] where a cap is given (a rate no higher than the card's peak), the errors as the
    capped x prices the steps; a column no timed step has (all zero) gets 0, which prices nothing the steps hold: its
    caller says the column was not timed (`fit_counted`: None)."""
    from scipy.optimize import nnls

    present = A.max(0) > 0
    scale = np.where(present, A.max(0), 1.0)  # columns of comparable size for the solver
    x = np.zeros(A.shape[1])
    x[present], _ = nnls((A / scale / t[:, None])[:, present], np.ones(len(t)))
    x = x / scale
    x = np.array([max(v, 1 / cap) if cap and ok else v for v, cap, ok in zip(x, caps, present)])
    return x, A @ x / t - 1


def timed_step(row: dict) -> dict:
    """A counted step of bench/count_lease_steps.py's "counted_steps", scaled to the stack it was timed at (runs leave
    the stack as they stop, so the timing is of its mean stack): bytes and FLOPs in proportion, ops not."""
    share = row["runs_timed"] / row["runs_counted"]
    return {"flops": row["flops"] * share, "kernel_flops": row.get("kernel_flops", 0.0) * share,
            "bytes": row["bytes"] * share, "ops": row["ops"], "kernel_ops": row.get("kernel_ops", 0.0)}


def fit(bench: dict, ops_per_step: float, timings: list[tuple[TrainConfig, float, float]], precision: str = "fp32",
        bench_rows: bool = True) -> Calibration:
    """A Calibration from a benchmark (geofact.ops.benchmark.benchmark's result, its stacked rates) and
    further `timings` (config, runs stacked, seconds a step: benchmark.step_timings, small shapes where the
    fixed cost of a step shows; `group_timings`, whole trained groups): the matmul rate, bandwidth and
    fixed seconds a step that best explain every timing (non-negative least squares in 1/rate,
    1/bandwidth and the fixed cost). `bench_rows=False` leaves the benchmark's stacked rates out of the
    fit: short timings whose first-call costs (a CUDA graph's capture) they do not amortise."""
    rows = [(TrainConfig(N=bench["N"], R=bench["R"], d=r["d"], batch_size=bench["batch_size"]), r["runs"], r["runs"] / r["stacked"])
            for r in bench["rows"]] if bench_rows else []
    rows += list(timings)
    if not rows:
        raise ValueError("nothing to fit: no timings given and bench_rows=False")
    A = np.array([[runs * step_flops(c), runs * step_bytes(c), 1.0] for c, runs, _ in rows])
    t = np.array([seconds for *_, seconds in rows])
    cap = PEAK_OVER_FP32[precision] * bench["matmul_peak_flops"]
    rate, inverse_bandwidth, fixed, errors = _capped_fit(A, t, cap)
    worst = float(np.max(np.abs(errors)))
    # the fit's rate is its policy's; float32 work (the analyses) gets no more than the measured float32 peak
    return Calibration(device=bench["device"], matmul_flops={"fp32": min(rate, bench["matmul_peak_flops"]), precision: rate},
                       bandwidth=1 / max(inverse_bandwidth, 1e-15), op_seconds=fixed / ops_per_step, ops_per_step=ops_per_step,
                       source=f"bench_trainer.py on {bench['device']} ({bench['threads']} threads): fitted to {len(rows)} "
                              f"step timings (N from {min(c.N for c, *_ in rows)} to {max(c.N for c, *_ in rows)}), "
                              f"worst error {worst:.0%}"
                              + (f"; the matmul rate is the cap, {cap / 1e12:.0f} TFLOP/s ({precision}): the timings do not "
                                 "identify it, matmuls being a small share of these steps" if rate >= cap * (1 - 1e-9) else ""))


def fit_counted(points: list[tuple[dict, float, str]], fp32_peak: float, precision: str) -> CountedRates:
    """CountedRates from timed steps: (the step's counts {"flops", "bytes", "ops"}, its measured seconds, what it
    is), fitted as `fit` fits its model (non-negative least squares in relative error), the matmul rate
    capped at the policy's peak (`fp32_peak` times the data sheet's tensor-core ratio)."""
    if not points:
        raise ValueError("fit_counted needs at least one counted, timed step")
    # cuBLAS's and torch's FLOPs, geofact's kernels' FLOPs (their own rate, the same cap), bytes, torch's ops, geofact's
    A = np.array([[c["flops"] - c.get("kernel_flops", 0.0), c.get("kernel_flops", 0.0), c["bytes"],
                   c["ops"] - c.get("kernel_ops", 0.0), c.get("kernel_ops", 0.0)] for c, _, _ in points])
    t = np.array([seconds for _, seconds, _ in points])
    cap = PEAK_OVER_FP32[precision] * fp32_peak
    x, errors = _capped_nnls(A, t, [cap, cap, None, None, None])
    timed_kernels = any(c.get("kernel_flops", 0.0) > 0 for c, _, _ in points)
    launched = any(c.get("kernel_ops", 0.0) > 0 for c, _, _ in points)
    rate, inverse_bandwidth, op_seconds, launch = 1 / x[0], x[2], x[3], x[4]
    kernel_rate = 1 / x[1] if timed_kernels else None
    worst = int(np.argmax(np.abs(errors)))
    # another policy's matmuls at this one's rate times the data sheet's ratio of their peaks (its own rate once timed)
    rates = {other: float(min(rate * PEAK_OVER_FP32[other] / PEAK_OVER_FP32[precision], PEAK_OVER_FP32[other] * fp32_peak))
             for other in PEAK_OVER_FP32}
    return CountedRates(matmul_flops={**rates, precision: float(rate)}, kernel_flops=None if kernel_rate is None else float(kernel_rate),
                        kernel_op_seconds=float(launch) if launched else None,
                        bandwidth=float(1 / max(inverse_bandwidth, 1e-15)), op_seconds=float(op_seconds),
                        source=f"fitted to {len(points)} timed steps counted as the code that ran them: worst error "
                               f"{errors[worst]:+.0%} ({points[worst][2]})"
                               + (f"; the matmul rate is the cap ({cap / 1e12:.0f} TFLOP/s, {precision})" if rate >= cap * (1 - 1e-9) else ""))


def without_analysis_factors(stored: dict) -> dict:
    """A card's stored calibration file (bench/calibration/) without the analyses' refitted factors and what
    bench/calibrate_analyses.py stored beside them: a factor is measured over priced seconds at the rates it was
    fitted against, so a script that refits the step's rates drops them (printing so) until that script runs again."""
    if (stored.get("calibration") or {}).get("analysis_factors"):
        print("the analyses' refitted factors are dropped with the rates they were fitted against: run "
              "bench/calibrate_analyses.py again")
    kept = {k: v for k, v in stored.items() if k not in ("analysis_states", "analyses_refitted_at")}
    return {**kept, "calibration": {**stored["calibration"], "analysis_factors": None}} if "calibration" in stored else kept


def card_of(description: str) -> str:
    """The card a calibration belongs to, from `geofact.device.describe_device`'s words: 'cuda (NVIDIA H100 80GB
    HBM3)' -> 'h100', 'cuda (NVIDIA H200)' -> 'h200'; '' where it names none (a CPU). Cards are calibrated apart."""
    match = re.search(r"\b([A-Z]\d{2,4}[A-Za-z]?)\b", description.partition("(")[2])
    return match.group(1).lower() if match else ""


def calibration_path(root: Path, device: str, card: str = "") -> Path:
    """Where the calibration of a kind of device (and, for a GPU, of one card) is stored."""
    kind = device.split(":")[0]
    return Path(root) / "bench" / "calibration" / (f"{kind}-{card}.json" if card else f"{kind}.json")


def stored_cards(root: Path, device: str) -> list[str]:
    """The cards of this kind of device with a stored calibration ('' for one stored without a card)."""
    kind = device.split(":")[0]
    return sorted(p.stem[len(kind) + 1:] if p.stem != kind else "" for p in (Path(root) / "bench" / "calibration").glob(f"{kind}*.json")
                  if p.stem == kind or p.stem.startswith(kind + "-"))


def load_calibration(root: Path, device: str, card: str | None = None) -> Calibration:
    """The stored calibration of this kind of device, of `card` where several cards are calibrated (one of
    `stored_cards`; None: the only one stored); H100_SPEC for cuda when none is stored."""
    cards = stored_cards(root, device)
    if card is None and len(cards) > 1:
        raise ValueError(f"calibrations of several {device} cards are stored ({', '.join(cards)}): name one (--card)")
    if card is not None and card not in cards:
        raise ValueError(f"card must be one of the calibrated {device} cards {cards}, got {card!r}")
    if cards:
        return Calibration.from_dict(json.loads(calibration_path(root, device, cards[0] if card is None else card).read_text())["calibration"])
    if device.startswith("cuda"):
        return H100_SPEC
    raise ValueError(f"no calibration for device {device!r} at {calibration_path(root, device)}: run `python "
                     f"bench/bench_trainer.py --device {device} --calibrate` first")
