"""What a lease will cost before it starts: predicted minutes per page and per stacked group.

A GPU comes as one H100 or H200 for about 12 usable minutes (book/paper-scale.md, "A GPU lease"); what decides how
much of the paper's scale a lease yields is which pages run first and whether each fits. This module
enumerates the training each experiment page will ask for at a profile (the runs of its sweeps,
stacked as `run_sweep` stacks them) and the per-model analyses of the mechanism pages, and predicts
their time with a device's `geofact.ops.calibration.Calibration` (its step cost model and rates).
A run is priced at its step budget (`max_steps`): a run that meets the stop rule earlier costs less,
so the plan is an upper bound on training; except the d_min trials that stop at their crossing,
priced at what they are expected to train (`expected_steps`). Where a page's runs depend on what
earlier runs measured (the bisection of exp-scaling, the threshold cells that exp-capacity retrains
under another precision), the plan prices a stated guess and says so.

No page imports this module, so the plan can change without any page going stale.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import astuple, asdict, dataclass, replace
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

from geofact.ops.calibration import (H100_SPEC, Calibration, CountedRates, calibration_path, group_timings, load_calibration,
                                     step_bytes, stored_cards, timed_step)
from geofact.precision import check_precision
from geofact.training import fused_ce
from geofact.training.config import MultiHopConfig, TrainConfig
from geofact import fast_paths
from geofact.analysis.interventions import call_rows, others_scored, rank_grid, ranks_per_call
from geofact.analysis.rechecked import CANDIDATES
from geofact.ops.pack import PART, read_analysis_records, read_run_records
from geofact.ops.step_counts import StepCounts
from geofact.training.model import n_params
from geofact.training.grid import REGIMES, CapacityGrid, capacity_threshold, ladder_grids
from geofact.training.traffic import PAPER_SHAPES, StepTraffic, paper_shape, step_traffic
from geofact.training.variants import MECHANISM_RECIPES, kept_jobs, second_study, study_recipes

LEASE_ORDER = ("exp-capacity", "exp-readout", "exp-interventions", "exp-freeze-transfer", "exp-multihop", "exp-scaling")
# Pages whose verdicts read run records alone: on a lease a run whose record an earlier lease brought back is not
# trained again (geofact.training.sweep.SweepPool.cached). The mechanism pages read weights, which records do not
# carry: they train their grids again whatever is on record.
RECORDS_SUFFICE = ("exp-capacity", "exp-multihop", "exp-scaling")
# exp-capacity's groups whose runs' states the mechanism pages analyse: on record or not, trained again for them
WEIGHTS_READ = ("capacity grid",)
AGAIN = "capacity grid again (the mechanism pages' weights)"
LEASE_MINUTES = 12.0  # usable minutes of one lease: 15 of device time, less the machine's start (~1.5) and packing
# A d_min trial with an accuracy stop (`TrainConfig.stop_accuracy`) is decided at its crossing: a bisection passes
# about half its trials, and in the GPU leases' records runs above their threshold reached 99% batch accuracy at a
# median step of 2,600 (d = 256) to 6,100 (d = 64) of 15,000 (issue 47), so a passing trial is priced at the larger
# share of its budget and a failing one at all of it; each check is a forward pass over its N R facts (a third of a
# step's work per batch of them)
DECIDED_PASS_FRACTION = 0.5
DECIDED_STEP_FRACTION = 6100 / 15000
FORWARD_SHARE = 1 / 3
# A failing trial that may give up (`TrainConfig.give_up`) is priced at the share of its budget the laptop profile's
# failing trials trained under the rule (exp-scaling at af594c0: 72 failing trials, 22 gave up at a median 0.66 of
# their budget, a mean of 0.91 over all 72). That budget binds (passing trials crossed at a median 0.84 of it), the
# paper's less (0.17 to 0.41), so a paper-scale plateau likely comes earlier; no lease has measured it
GIVE_UP_STEP_FRACTION = 0.91


def expected_steps(config: TrainConfig | MultiHopConfig) -> float:
    """Steps a run is priced at: its budget, or for a run with an accuracy stop what it is expected to
    train (DECIDED_PASS_FRACTION of them stop at DECIDED_STEP_FRACTION of it, the others train it all, or with
    `give_up` GIVE_UP_STEP_FRACTION of it) plus its checks, in steps."""
    if not isinstance(config, TrainConfig) or config.stop_accuracy is None:
        return float(config.max_steps)
    failing = 1.0 if config.give_up is None else GIVE_UP_STEP_FRACTION
    trained = config.max_steps * ((1 - DECIDED_PASS_FRACTION) * failing + DECIDED_PASS_FRACTION * DECIDED_STEP_FRACTION)
    checks = trained // config.stop_accuracy[1]
    return trained + checks * FORWARD_SHARE * config.N * config.R / config.batch_size


@dataclass(frozen=True)
class Group:
    """Runs that train as one stack, each for up to its step budget (relation tables padded to the largest R)."""

    page: str
    what: str
    configs: tuple  # the runs (one shape_key)
    guess: bool = False  # the runs themselves are a guess (they depend on measurements)
    recorded_steps: tuple = ()  # per run, the steps its record says it trained (None where it has none; `with_records`)
    stops: bool = True  # the runs stop at the loss rule (a spike study's recipes train their whole budget)

    @property
    def runs(self) -> int:
        return len(self.configs)

    @property
    def config(self) -> TrainConfig | MultiHopConfig:
        """The run whose shape the stack takes (the largest R)."""
        return max(self.configs, key=lambda c: c.R)

    def run_steps(self) -> list[float]:
        """The steps each run is priced at: its recorded steps where its record has them, else `expected_steps`."""
        recorded = self.recorded_steps or (None,) * self.runs
        return [expected_steps(c) if steps is None else float(steps) for c, steps in zip(self.configs, recorded)]

    def seconds(self, calibration: Calibration, counts: Callable[[list], dict] | None = None) -> float:
        """Its predicted seconds: each step by its counted work (`counts`, geofact.ops.step_counts.StepCounts) at the
        card's counted rates where there are both, else by the calibration's formula. A step's FLOPs and bytes go with
        the runs in the stack, its ops do not: as runs stop and leave it (geofact.training.trainer), the stack pays
        its runs' steps (`run_steps`) for the first and its longest run's for the second."""
        if counts is not None and calibration.counted is not None:
            counted = counts(list(self.configs))
            # its launches, geofact's kernels' at their own cost
            launches = {"ops": counted["ops"], "kernel_ops": counted.get("kernel_ops", 0.0)}
            fixed = calibration.counted.seconds(launches, self.config.precision)
            step = calibration.counted.seconds(counted, self.config.precision)
        else:
            fixed = calibration.step_seconds(self.config, 0)
            step = calibration.step_seconds(self.config, self.runs)
        steps = self.run_steps()
        return sum(steps) / self.runs * (step - fixed) + max(steps) * fixed

    def with_records(self, recorded: Mapping[str, dict]) -> Group:
        """The group with its runs' recorded steps (`recorded`: {config key: run record}, `recorded_runs`), for the
        runs whose record says where the stop rule stopped them: single-hop runs that stop at it (not read past it,
        and with a loss threshold to meet). A run trained again is expected to stop where it stopped (its seed fixes
        its batches and initialisation); how far another card's rounding moves a stop no record measures yet (no
        paper-scale config has been trained twice), and a run near the budget may then run to it. A run that keeps
        a tail (`TrainConfig.keep_tail`: states kept, the training the same) stops where its record without one did."""
        if not self.stops:
            return self

        def stop(c) -> int | None:
            if not isinstance(c, TrainConfig) or c.read_past_stop or c.loss_threshold <= 0:
                return None
            record = recorded.get(c.key()) or recorded.get(replace(c, keep_tail=None).key()) or {}
            return record.get("steps")

        steps = tuple(stop(c) for c in self.configs)
        return replace(self, recorded_steps=steps) if any(s is not None for s in steps) else self

    def unrecorded(self, recorded: Mapping[str, dict]) -> Group | None:
        """The group's runs that `recorded` ({config key: run record}) lacks, as one group (None: every run is on
        record). A spike study's recipes (`stops` False) share their configs with the grid's runs but not their
        records (those are keyed by recipe too), and a guessed group's configs stand for runs the page will choose
        (exp-scaling's trials): none of them counts as on record."""
        whole = not self.stops or self.guess
        left = self.configs if whole else tuple(c for c in self.configs if c.key() not in recorded)
        return replace(self, configs=left, recorded_steps=()) if left else None

    @property
    def n_recorded(self) -> int:
        return sum(s is not None for s in self.recorded_steps)

    def shape(self) -> str:
        c, Rs = self.config, sorted({c.R for c in self.configs})
        text = f"N={c.N} R={Rs[0]}" + (f"..{Rs[-1]}" if len(Rs) > 1 else "") + f" d={c.d} B={c.batch_size}"
        if isinstance(c, MultiHopConfig):
            text += f" k={c.k} {'CoT' if c.cot else 'no CoT'}"
        return text


@dataclass(frozen=True)
class Work:
    """An analysis's work: FLOPs in float32, FLOPs through TF32 where the device has it (geofact.analysis.rechecked:
    predictions asked only whether they are a target; float32 elsewhere), the float32 FLOPs of the rows those then
    predict again, kernels, and the bytes its kernels read and write (`ANALYSIS_VALUES`). Of a decision's unembedding
    where geofact.analysis.fused_decide may compute it (d <= fast_paths.DECIDE_MAX_D): its FLOPs (`kernel`) and the logits'
    bytes it spares (`logit_bytes`), each priced by whether the kernel runs where the plan prices (`Analysis.seconds`)."""

    flops: float = 0.0
    fast: float = 0.0
    rechecked: float = 0.0
    ops: float = 0.0
    bytes: float = 0.0
    kernel: float = 0.0
    logit_bytes: float = 0.0
    remade: float = 0.0  # where the kernel decides: the rechecked rows' TF32 logits made again, FLOPs
    remade_bytes: float = 0.0  # and bytes
    loads: float = 0.0  # states whose weights it loads from the run cache (TrainedModel.load), on the host
    loaded: float = 0.0  # and their bytes

    def __add__(self, other: Work) -> Work:
        return Work(*(a + b for a, b in zip(astuple(self), astuple(other))))

    def __mul__(self, times: float) -> Work:
        return Work(*(a * times for a in astuple(self)))


# The float32 values an analysis's kernels read and write, as counted on fake meta tensors (the training step's count,
# geofact.training.dispatch_count, with torch's RMSNorm as the one kernel CUDA runs) at N = 512 and 4096, R = 2 to 16,
# d = 32 to 768 (2026-11-30), fitted within 15% (a test recounts): a prediction asked whether it is its target
# (TrainedModel.answered) 3 N + 33 d a row (the logits written and read twice, or none where
# geofact.analysis.fused_decide decides; the MLP block's passes over its 4 d hidden values), an accuracy's hidden
# states 19 d a row more, a ridge readout of every relation 0.4 N^2 + 19 N d a relation (scored against all N
# attribute vectors; the gram and cross terms). Until 2026-11-30 the plan priced analyses by FLOPs and kernels alone:
# a rank sweep at N = 4096, R = 16 moved 694 GB a state (1.9 TFLOP at d = 32), 0.7 s at the H100's fitted 997 GB/s,
# priced at 5 ms
ANALYSIS_VALUES = {"answered": (3, 33), "hidden": 19, "ridge": (0.4, 19)}


def _answered_bytes(c: TrainConfig, rows: float, hidden: bool = False, logits: bool = True) -> float:
    """The bytes of `rows` decisions (TrainedModel.answered), with the whole logits' or without (fused_decide)."""
    n, d = ANALYSIS_VALUES["answered"]
    return 4.0 * rows * (n * c.N * logits + d * c.d + (ANALYSIS_VALUES["hidden"] * c.d if hidden else 0))


def _ridge_bytes(c: TrainConfig) -> float:
    n2, nd = ANALYSIS_VALUES["ridge"]
    return 4.0 * c.R * (n2 * c.N**2 + nd * c.N * c.d)


# The share of rows TrainedModel.answered predicts again in float32 (geofact.analysis.rechecked), priced at or above
# the largest share seen, TF32 emulated on 400 laptop-profile states of the mechanism pages' grids (N = 128 and 512,
# steps 0 to the stop; bench/bench_recheck_share.py --states 400 --seed 1, 2026-11-30): a rank sweep's edited rows
# 0.65% of 14.0 million, 3.7% at most in a state at d >= 8 (R = 2, d = 12, step 300), 4.4% in a call; an accuracy's
# rows (the model's facts, a smart init's) 1.1% of 1.5 million, 7.9% at most in a state, 16% in a call (the largest
# states, N R d >= 512 x 8 x 48: 2.2% and 3.2%). Until that day every row near a tie of its two largest logits was
# rechecked, whatever its target, priced at 0.16 of a sweep's rows
UNSURE_SHARE_SEEN = {"edits": 0.04, "facts": 0.16}


def _answered(c: TrainConfig, rows: float, kind: str) -> Work:
    """Whether each of `rows` hidden states' predictions is its target (TrainedModel.answered): the MLP block and
    unembedding through TF32, and UNSURE_SHARE_SEEN[kind] of the rows' MLP blocks and CANDIDATES columns again in
    float32 (its kernels are priced with the analysis that asks)."""
    share = UNSURE_SHARE_SEEN[kind]
    work = Work(fast=_predict_flops(c, rows), rechecked=2.0 * share * rows * (2 * c.d * c.width + c.d * CANDIDATES),
                bytes=_answered_bytes(c, rows, hidden=kind == "facts"))
    if c.d > fast_paths.DECIDE_MAX_D:
        return work
    # the kernel's decisions: the unembedding in it, and the rechecked rows' TF32 logits made again whole
    unembedding = 2.0 * rows * c.d * c.N
    logit_bytes = work.bytes - _answered_bytes(c, rows, hidden=kind == "facts", logits=False)
    return replace(work, fast=work.fast - unembedding, kernel=unembedding, bytes=work.bytes - logit_bytes,
                   logit_bytes=logit_bytes, remade=share * _predict_flops(c, rows), remade_bytes=share * logit_bytes)


# Loading a state's weights (TrainedModel.load: geofact.training.weights_file, then the copy to the device), which each
# mechanism page does for every state it analyses, priced at LOAD_SECONDS a state + its bytes at LOAD_BYTES_PER_SECOND:
# bench/bench_load.py on a 2-core Xeon (2026-11-30) loaded a state of N = 4096, R = 16 in 0.8 ms at d = 32 (1.1 MB) and
# 8.5 ms at d = 768 (49 MB), 5.8 GB/s; a CUDA host copies it on to the device from pageable memory, assumed 10 GB/s
# (bench_load.py --device cuda and the lease's analysis records time it: `analysis_errors`). Until 2026-11-30 not
# priced, and read through np.load at 2.7-4.7x those times: 28.6 GB a mechanism page at the paper profile. Priced whole,
# the read and the copy, though a page now reads the next state while one is analysed (trajectory.Prefetch): the
# records time the read and the copy apart, and `analysis_errors` says how much of it the reads ahead hid
LOAD_SECONDS = 0.5e-3
LOAD_BYTES_PER_SECOND = 3.7e9


def _loaded(c: TrainConfig) -> Work:
    """Loading one state of run `c` (`LOAD_SECONDS`)."""
    return Work(loads=1.0, loaded=4.0 * n_params(c))


# kernels of a state's accuracy (TrainedModel.correct_fraction) as counted on fake meta tensors at N = 512, d = 64,
# R = 2 and 16, its recheck and a whole row taken (43 in float32 alone)
ACCURACY_KERNELS = 124.0


def _accuracy(c: TrainConfig) -> Work:
    """A state's accuracy, which the first analysis of a checkpoint computes and every other reads
    (geofact.analysis.trajectory, its "accuracy" record; at a run's stop the run record gives it)."""
    return _answered(c, c.N * c.R, "facts") + Work(ops=ACCURACY_KERNELS)


def readouts_work(c: TrainConfig, held_out: float) -> Work:
    """A state of exp-readout's readouts: the four readouts (geofact.analysis.readout.READOUTS) of each target,
    unembedding and embedding (priced as one target until 2026-11-30); kernels as counted on fake meta tensors
    (N = 512, d = 64), the relations' ridge fits batched: 183 a target whatever R (until 2026-11-29 a fit per
    relation, 326 at R = 2 and 2,118 at R = 16, priced at 48 R)."""
    return Work(flops=4 * _ridge(c, 1 - held_out, held_out), ops=200.0, bytes=4 * _ridge_bytes(c)) * 2


def cv_readouts_work(c: TrainConfig, held_out: float, alphas: int, folds: int) -> Work:
    """A state of exp-readout's cross-validated readouts: `alphas` penalties x `folds` folds of both readouts
    (2,789 kernels at 30 fits)."""
    fits = alphas * folds
    fold_scored = (1 - held_out) / folds  # a fold's share of the training subjects is scored
    fold_fit = 1 - held_out - fold_scored
    return Work(flops=2 * fits * _ridge(c, fold_fit, fold_scored), ops=2 * fits * 46.0, bytes=2 * fits * _ridge_bytes(c))


def sweep_work(c: TrainConfig, rank_points: int, held_out: float, others_per_edit: int | None) -> Work:
    """A rank sweep of one state (geofact.analysis.interventions.selectivity_sweep): ranks x relations edits of each
    held-out subject, each predicting the scored relations' queries (the edited one and `others_scored`), in calls as
    `intervene` makes them on a GPU. Kernels (non-view ops, metadata queries apart) as counted on fake meta tensors
    at N = 512, d = 64, 33 ranks: 227 a state, one call, at R = 2 and at R = 16 (its candidates' recheck and a whole
    one taken): the readout fit and decompositions, two a rank, 104 a call (98 until 2026-11-30, when each row's
    target joined the recheck's rule). Until 2026-11-29 a call per rank and relation, and a pseudoinverse and readout
    fit per relation: 4,147 at R = 2 to 31,909 at R = 16, priced at 14 R a rank."""
    ranks, edited = len(rank_grid(c.d, rank_points)), c.R * max(1, round(held_out * c.N))
    scored = 1 + others_scored(c.R, others_per_edit)  # the edited relation's query and the others'
    rows = call_rows(c.N, "cuda")
    per_call = ranks_per_call(rows, scored * edited)
    calls = math.ceil(ranks / per_call) * math.ceil(per_call * scored * edited / rows)
    return (Work(flops=_ridge(c, 1 - held_out, held_out), ops=55.0 + 2.0 * ranks + 104.0 * calls, bytes=_ridge_bytes(c))
            + _answered(c, ranks * scored * edited, "edits"))


def transfer_work(c: TrainConfig) -> Work:
    """A state of exp-freeze-transfer's zero-shot transfer: for each target, the maps fitted on all subjects, none
    scored, and two accuracies; kernels as counted (the accuracies' recheck and a whole row taken): 304 at R = 2, 332
    at R = 16 (142 and 170 in float32 alone, as until 2026-11-30; 652 with a fit per relation, priced at 40)."""
    return (Work(flops=_ridge(c, 1.0, 0.0), ops=2.0 * c.R + 300.0, bytes=_ridge_bytes(c))
            + _answered(c, 2 * c.N * c.R, "facts")) * 2


# The plan's price of one state of each analysis the mechanism pages record (geofact.analysis.trajectory, by the
# name they record it under), from the record's own parameters: (its work, the times over at a run's final state,
# where exp-interventions sweeps the embedding target too)
STATE_WORK: dict[str, tuple[Callable[[TrainConfig, dict], Work], float]] = {
    "interventions": (lambda c, p: sweep_work(c, p["rank_points"], p["held_out"], p.get("others_per_edit")), 2.0),
    "readouts": (lambda c, p: readouts_work(c, p["held_out"]), 1.0),
    "readouts-cv": (lambda c, p: cv_readouts_work(c, p["held_out"], len(p["alphas"]), p["folds"]), 1.0),
    "zero-shot-transfer": (lambda c, p: transfer_work(c), 1.0),
    "accuracy": (lambda c, p: _accuracy(c), 1.0),
}


@dataclass(frozen=True)
class Analysis:
    """Per-model analyses of a page over `states` model states, `work` in all (`columns`: of it, (d, work) per column
    of the capacity grid, as `geofact compute --grid-d` runs them a column at a time)."""

    page: str
    what: str
    states: int
    work: Work
    columns: tuple = ()
    name: str = ""  # what its states' records call it ("interventions", ..., "accuracy"): its refitted factor's key

    def parts(self, calibration: Calibration) -> dict[str, float]:
        """Its predicted seconds on the calibration's device, by what takes them: "arithmetic" (TF32 and the recheck
        where it has TF32, float32 elsewhere), "memory" (the bytes its kernels move) and "launches"; the fused
        decisions (fused_decide) where that is CUDA with geofact's kernels switched on and a rate measured for them
        on the card (`CountedRates.kernel_flops`), elsewhere their logits written and read.

        Its bytes and FLOPs are counted as a step's are (ANALYSIS_VALUES, geofact.training.dispatch_count), so they
        are priced at the rates fitted to the timed steps' counts (`Calibration.counted`) where the card has them,
        else at the formula's (until 2026-11-30 at the formula's always: on the H100 997 GB/s against 1,456 for counted
        work). Its states' loading ("loading", on the host) is priced at LOAD_BYTES_PER_SECOND. Where the card's states
        were timed, each part is scaled by the factor refitted to them (`Calibration.analysis_factors`, by `name`;
        the loading by "load"; `fit_analysis_factors`). Its launches are priced at
        the larger of the two fitted rates a launch, the formula's (4.8 us on the
        H100; the counted fit's is 3.3): both were fitted to steps replayed as CUDA graphs, and an analysis runs
        eagerly, whose launches H100_SPEC's note puts near 8 us. No lease has timed a batched analysis: that its kernels
        (the MLP's matmuls, its elementwise passes, topk and amin over the logits) move bytes at the step's rate, and
        launch at that rate, is what this assumes."""
        rates = calibration.counted or calibration
        rate = {k: rates.matmul_flops.get(k, v) for k, v in calibration.matmul_flops.items()}  # the policies it has
        w = self.work
        tf32 = rate.get("tf32", rate["fp32"])
        arithmetic = w.flops / rate["fp32"] + (w.fast / rate["tf32"] + w.rechecked / rate["fp32"] if "tf32" in rate
                                               else w.fast / rate["fp32"])
        memory = w.bytes
        kernel = calibration.counted.kernel_flops if calibration.counted else None
        if kernel is None and calibration.counted and calibration.counted.kernels_as_ops:
            kernel = tf32
        # GEOFACT_FUSED_CE switches geofact's kernels off ('0'); Triton is the node's whether or not the planner has it
        if calibration.device.startswith("cuda") and os.environ.get(fused_ce.ENV, "1") != "0" and kernel:
            arithmetic += w.kernel / kernel + w.remade / tf32
            memory += w.remade_bytes
        else:  # no CUDA, the kernels off, or no rate measured for them on this card: priced as whole logits
            arithmetic += w.kernel / tf32
            memory += w.logit_bytes
        factors = calibration.analysis_factors or {}
        factor = factors.get(self.name, 1.0)
        return {"arithmetic": factor * arithmetic, "memory": factor * memory / rates.bandwidth,
                "launches": factor * w.ops * max(calibration.op_seconds, rates.op_seconds),
                "loading": factors.get("load", 1.0) * (w.loads * LOAD_SECONDS + w.loaded / LOAD_BYTES_PER_SECOND)}

    def seconds(self, calibration: Calibration) -> float:
        """Its predicted seconds (`parts`, added)."""
        return sum(self.parts(calibration).values())


def groups_of(page: str, what: str, configs: list, group_size: Callable[[Any], int], guess: bool = False,
              stops: bool = True) -> list[Group]:
    """`configs` stacked as run_sweep stacks them (equal shape_key, at most group_size(config) a stack); `stops`: whether
    they stop at the loss rule (`Group.stops`)."""
    by_shape: dict[tuple, list] = {}
    for c in configs:
        by_shape.setdefault((type(c), c.shape_key()), []).append(c)
    out = []
    for same in by_shape.values():
        size = max(1, group_size(same[0]))
        out += [Group(page, what, tuple(same[i : i + size]), guess, stops=stops) for i in range(0, len(same), size)]
    return out


def _grid(params: dict) -> CapacityGrid:
    return CapacityGrid.from_parameter(params.get("capacity_grid"), params.get("precision"))


def _with_second(params: dict) -> list[CapacityGrid]:
    """The capacity grid and the mechanism pages' second grid (`trajectory_grid`, one grid per R)."""
    return [_grid(params), *ladder_grids(params.get("trajectory_grid"), params.get("precision"))]


def _state_cost(name: str, record_params: dict) -> Callable[[TrainConfig], Work]:
    """A state's work of analysis `name` (STATE_WORK's, as `geofact plan --check` prices its records), its parameters
    those the page records it under, taken from the page's."""
    work, _ = STATE_WORK[name]
    return lambda c: work(c, record_params)


def _per_state(grids: list[CapacityGrid], what: str, page: str, cost: Callable[[TrainConfig], Work], name: str,
               final_only: bool = False, final_extra: float = 0.0) -> Analysis:
    """An analysis (records named `name`) of every run's kept states (or its final state alone) over `grids`,
    `cost(config)` its work a state, each state loaded; the final state costs `final_extra` times more besides. A run
    keeping a tail (TrainConfig.keep_tail) is priced with all of it, as if it stopped at its step budget."""
    states, work, columns = 0, Work(), {}
    for grid in grids:
        for config in grid.configs().values():
            kept = 1 if final_only else _kept(grid, config)
            states += kept
            state = cost(config) * (kept + final_extra) + _loaded(config) * kept
            work += state
            if grid is grids[0]:  # the capacity grid's columns (`column_seconds`); a second grid's ladders apart
                columns[config.d] = columns.get(config.d, Work()) + state
    return Analysis(page, what, states, work, tuple(sorted(columns.items())), name)


def _kept(grid: CapacityGrid, config: TrainConfig) -> int:
    """The states of a run a mechanism page analyses: its checkpoints, its tail's, its final one."""
    return len(grid.checkpoints) + len(config.tail_steps(config.max_steps)) + 1


def _accuracies(grids: list[CapacityGrid], page: str) -> Analysis:
    """The accuracy of every kept checkpoint over `grids` (a run record gives its final one), which the first mechanism
    page to analyse a state computes and the others read (geofact.analysis.trajectory's "accuracy" records; until
    2026-11-30 each page computed it again): each mechanism page's planner prices them, `plan_pages` keeps them on the
    first of those it plans."""
    states, work, columns = 0, Work(), {}
    for grid in grids:
        for config in grid.configs().values():
            states += _kept(grid, config) - 1
            state = _accuracy(config) * (_kept(grid, config) - 1)
            work += state
            if grid is grids[0]:
                columns[config.d] = columns.get(config.d, Work()) + state
    return Analysis(page, "checkpoints' accuracies (the pages after read them)", states, work,
                    tuple(sorted(columns.items())), "accuracy")


def _studies(params: dict) -> list[tuple[CapacityGrid, int, int, list[int]]]:
    """The spike studies whose kept states the mechanism pages read: exp-capacity's, at a cell of the grid,
    and the one at a cell of the second grid (`spike_second`, geofact.training.variants.second_study)."""
    if params.get("spike_keep_every") is None or "spike_R" not in params:
        return []
    second = second_study(_with_second(params)[1:], params.get("spike_second"))
    return [(_grid(params), params["spike_R"], params["spike_d"], list(params["spike_seeds"])), *([second] if second else [])]


def _spike_states(params: dict, page: str, what: str, cost: Callable[[TrainConfig], Work], name: str) -> list[Analysis]:
    """The spike studies' kept states a mechanism page reads (issue 46; geofact.pages.spike_mechanism): the
    MECHANISM_RECIPES x seeds, a state every `spike_keep_every` steps and up to five reading points more, each loaded,
    and their accuracies apart (which `plan_pages` keeps on the first mechanism page, as `_accuracies`)."""
    analyses = []
    for grid, R, d, seeds in _studies(params):
        config = grid.config(R, d, False, 0, max_steps=params["spike_steps"])
        states = len(MECHANISM_RECIPES) * len(seeds) * (params["spike_steps"] // params["spike_keep_every"] + 6)
        analyses.append(Analysis(page, f"{what} (N = {grid.N})", states, (cost(config) + _loaded(config)) * states,
                                 name=name))
        analyses.append(Analysis(page, f"accuracies of the spike study's states (N = {grid.N})", states,
                                 _accuracy(config) * states, name="accuracy"))
    return analyses


def _ridge(c: TrainConfig, fitted: float, scored: float) -> float:
    """FLOPs of one ridge readout of every relation (geofact.analysis.readout.linear_readout) fitted on a `fitted`
    share of the N subjects and scored on a `scored` share: the gram and cross term on the fitted rows, the solve,
    and on the scored rows the prediction and its cosine against all N attribute vectors (of width d, the
    unembedding's). Until 2026-11-29 priced as fitted on all N and scored on all N against all N, which
    overpriced a readout 2-5x (the held-out fifth is what is scored) and a zero-shot transfer, which scores none."""
    fit, score = fitted * c.N, scored * c.N
    return c.R * (2.0 * c.d * (2 * fit * c.d + score * (c.d + c.N)) + 8 / 3 * c.d**3)


def _predict_flops(c: TrainConfig, rows: int) -> float:
    """FLOPs of the MLP block and unembedding on `rows` hidden states (TrainedModel.predict)."""
    return 2.0 * rows * (2 * c.d * c.width + c.d * c.N)




def threshold_cells(grid: CapacityGrid, precision_R: list[int] | None, recorded: Mapping[str, dict]
                    ) -> tuple[list[TrainConfig], list[TrainConfig]]:
    """The grid runs exp-capacity retrains under the other precision, as the page picks them: at each regime
    and R (of `precision_R`, all when None) the threshold (`CapacityGrid.thresholds`, the mean over seeds) and
    the grid d below it. (measured, guessed): measured where `recorded` ({config key: run record}) holds every
    seed of every d of that R; else guessed, from the recorded d with the missing ones taken as memorised
    (more capacity), or, with none recorded, as the two largest d (an upper bound on the cells' cost)."""
    measured, guessed = [], []
    for name, frozen in REGIMES.items():
        for R in grid.R_values if precision_R is None else precision_R:
            runs = [[recorded.get(grid.config(R, d, frozen, s).key()) for s in grid.seeds] for d in grid.d_values]
            complete = [all(r is not None for r in rs) for rs in runs]
            if not any(complete):
                rungs = list(grid.d_values[-2:])
            else:
                mean = [float(np.mean([r["accuracy"] for r in rs])) if ok else 1.0 for rs, ok in zip(runs, complete)]
                threshold = capacity_threshold(np.array(mean), grid.d_values, grid.perfect)
                j = grid.d_values.index(threshold) if threshold is not None else None
                rungs = [] if j is None else list(grid.d_values[max(0, j - 1) : j + 1])
            cells = [grid.config(R, d, frozen, s) for d in rungs for s in grid.seeds]
            (measured if all(complete) else guessed).extend(cells)
    return measured, guessed


def plan_capacity(params: dict, size: Callable, recorded: Mapping[str, dict]) -> tuple[list[Group], list[Analysis]]:
    grid = _grid(params)
    configs = list(grid.configs().values())
    groups = groups_of("exp-capacity", "capacity grid", configs, size)
    lr = [grid.config(params["lr_R"], params["lr_d"], frozen, s, lr=rate)
          for frozen in REGIMES.values() for rate in params["lr_values"] for s in params["lr_seeds"]]
    grid_keys = {c.key() for c in configs}  # a rate's run that is the grid's own is priced with the grid
    groups += groups_of("exp-capacity", "learning-rate sweep", [c for c in lr if c.key() not in grid_keys], size)
    attention = [grid.config(R, d, frozen, s, attention="learned") for frozen in REGIMES.values()
                 for R in params["attention_R"] for d in params["attention_d"] for s in grid.seeds]
    groups += groups_of("exp-capacity", "learned-attention check", attention, size)
    # the threshold cells retrained under the other precision: which cells depends on the thresholds
    other = "bf16" if grid.precision != "bf16" else "fp32"
    measured, guessed = threshold_cells(grid, params.get("precision_R"), recorded)
    for cells, guess in ((measured, False), (guessed, True)):
        cells = [replace(c, precision=other, read_past_stop=False) for c in cells]
        groups += groups_of("exp-capacity", f"threshold cells under {other}" + ("" if guess else " (measured)"), cells, size,
                            guess=guess)
    if "spike_R" in params:  # the spike study: its recipes (7) x seeds at one cell, every run to spike_steps
        study = [grid.config(params["spike_R"], params["spike_d"], False, s, max_steps=params["spike_steps"])
                 for _ in study_recipes() for s in params["spike_seeds"]]
        # one stack of plain TrainConfig shapes; its records are keyed by config and recipe (cache/variants)
        groups += groups_of("exp-capacity", "spike study (recipe variants)", study, lambda c: len(study), guess=True,
                            stops=False)  # its records, keyed by config and recipe, are not the grid run's
    demo = grid.config(4, 16, False, 0, N=128, max_steps=300)  # the page's interactive demo, at its defaults
    return groups + groups_of("exp-capacity", "interactive demo", [demo], size), []


def plan_readout(params: dict, size: Callable, recorded: Mapping[str, dict]) -> tuple[list[Group], list[Analysis]]:
    grid = _grid(params)
    groups = []
    check = params.get("readout_check")
    second = [c for g in _with_second(params)[1:] for c in g.configs().values()]  # trained by the first mechanism page
    if check is not None:  # as the page builds it: the check's runs that are the second grid's are priced with that grid
        tail = second[0].keep_tail if second else None
        configs = [grid.config(check["R"], d, False, s, N=check["N"], batch_size=grid.batch_size * check["N"] // grid.N,
                               keep_tail=tail) for d in check["d_values"] for s in check.get("seeds", grid.seeds)]
        second_keys = {c.key() for c in second}
        groups = groups_of("exp-readout", "readout check at a larger N", [c for c in configs if c.key() not in second_keys], size)
    groups += groups_of("exp-readout", "second grid (trajectory_grid)", second, size) if second else []
    for grid, R, d, seeds in _studies(params)[1:]:  # the spike study at the second N, trained with the second grid
        study = [job[0] for job in kept_jobs(grid, R, d, seeds, params["spike_steps"], params["spike_keep_every"])]
        groups += groups_of("exp-readout", f"spike study at N = {grid.N} (its kept recipes)", study, lambda c: len(study),
                            guess=True, stops=False)
    readouts = _state_cost("readouts", {"held_out": params["held_out"]})
    cv = _state_cost("readouts-cv", {"held_out": params["held_out"], "alphas": params["cv_alphas"],
                                     "folds": params["cv_folds"]})
    return groups, [_per_state(_with_second(params), "readouts (4 per target and state)", "exp-readout", readouts,
                               "readouts"),
                    _accuracies(_with_second(params), "exp-readout"),
                    _per_state([grid], "cross-validated readouts", "exp-readout", cv, "readouts-cv", final_only=True),
                    *_spike_states(params, "exp-readout", "readouts of the spike study's states", readouts, "readouts")]


def plan_interventions(params: dict, size: Callable, recorded: Mapping[str, dict]) -> tuple[list[Group], list[Analysis]]:
    grid = _grid(params)
    sweep = _state_cost("interventions", {k: params.get(k) for k in ("rank_points", "held_out", "others_per_edit")})

    control = params.get("erosion_control")
    groups = []
    if control is not None:  # the control, and the control trained on to the grid run's steps (unknown here: the budget)
        retrained = [grid.config(control["R"], control["d"], frozen, s, weight_decay=control["weight_decay"])
                     for frozen in REGIMES.values() for s in grid.seeds]
        groups = groups_of("exp-interventions", "erosion control (another weight decay)", retrained, size) \
            + groups_of("exp-interventions", "erosion control trained on", [replace(c, loss_threshold=0.0) for c in retrained],
                        size, guess=True)
    # the final state sweeps twice (the embedding target too); the control's few states are left out
    return groups, [_per_state(_with_second(params), "rank sweeps", "exp-interventions", sweep, "interventions",
                               final_extra=STATE_WORK["interventions"][1] - 1),
                    _accuracies(_with_second(params), "exp-interventions"),
                    *_spike_states(params, "exp-interventions", "rank sweeps of the spike study's states", sweep,
                                   "interventions")]


def plan_transfer(params: dict, size: Callable, recorded: Mapping[str, dict]) -> tuple[list[Group], list[Analysis]]:
    grid = _grid(params)
    retrain = [replace(c, max_steps=params["retrain_steps"], loss_threshold=0.0) for c in grid.configs().values()
               for _ in range(3)]  # control, random, smart
    transfer = _state_cost("zero-shot-transfer", {})
    zero_shot = _per_state(_with_second(params), "zero-shot transfer", "exp-freeze-transfer", transfer,
                           "zero-shot-transfer")
    return (groups_of("exp-freeze-transfer", "retraining the subject embeddings", retrain, size),
            [zero_shot, _accuracies(_with_second(params), "exp-freeze-transfer"),
             *_spike_states(params, "exp-freeze-transfer", "zero-shot transfer of the spike study's states",
                                       transfer, "zero-shot-transfer")])


def plan_multihop(params: dict, size: Callable, recorded: Mapping[str, dict]) -> tuple[list[Group], list[Analysis]]:
    p = params

    def config(k: int, R: int, cot: bool, frozen: bool, seed: int, rate: float, steps: int | None = None) -> MultiHopConfig:
        return MultiHopConfig(N=p["N"], R=R, k=k, d=p["d"], cot=cot or k == 1, frozen_embeddings=frozen, lr=rate,
                              batch_size=p["batch_size"], max_steps=steps or p["max_steps"], check_every=p["check_every"],
                              train_queries=p["train_queries"], eval_queries=p["eval_queries"], eval_seen=p["eval_seen"],
                              seed=seed, precision=p.get("precision", "fp32"))

    conditions = [(True, True), (True, False), (False, False), (False, True)]
    grid = [config(k, R, cot, frozen, s, p["lr"]) for k in p["k_values"] for R in p["R_values"]
            for cot, frozen in conditions for s in p["seeds"]]
    lr = [config(p["lr_k"], p["lr_R"], cot, False, s, rate) for cot in (True, False)
          for rate in p["lr_values"] if rate != p["lr"] for s in p["seeds"]]
    demo = MultiHopConfig(N=64, R=2, k=2, d=32, cot=True, lr=p["lr"], batch_size=256, max_steps=200, check_every=50,
                          eval_queries=512, seed=0, precision=p.get("precision", "fp32"))  # the interactive demo's defaults
    # The verdicts' runs that end short of the stop rule are trained again to judge_steps (none where it is max_steps,
    # as at the paper profile): which, the page learns from its grid, so every run a verdict reads is the guess
    judge_steps = p.get("judge_steps")
    corners = {(p["k_values"][0], p["R_values"][0]), (p["k_values"][-1], p["R_values"][-1])}  # no CoT, learned: the cells judged
    again = [] if judge_steps is None or judge_steps <= p["max_steps"] else list(dict.fromkeys(
        [config(k, R, cot, frozen, s, p["lr"], judge_steps) for k in p["k_values"] for R in p["R_values"]
         for cot, frozen in conditions if cot or frozen or (k, R) in corners for s in p["seeds"]]
        + [config(p["lr_k"], p["lr_R"], cot, False, s, rate, judge_steps) for cot in (True, False) for rate in p["lr_values"]
           for s in p["seeds"]]))
    return (groups_of("exp-multihop", "(k, R) grid", list(dict.fromkeys(grid)), size)
            + groups_of("exp-multihop", "learning-rate check", lr, size)
            + groups_of("exp-multihop", f"the verdicts' runs that end short, again to {judge_steps} steps", again, size, guess=True)
            + groups_of("exp-multihop", "interactive demo", [demo], size), [])


# Trials of a chained d_min search (`geofact.d_min_search.chain_guess`: each N after the first starts at the d_min
# its curve extrapolates and gallops from there): at the laptop profile (66d0687, 48 chained searches over N = 16
# to 512) they took 2 to 4, 2.65 on average; priced at 3 (the first N of each chain brackets by doubling)
CHAINED_TRIALS = 3
# Seeds searched together (exp-scaling's `seeds_together`) start each N from one guess and ask for the same d while
# they answer alike: replayed on the laptop profile's accuracies (bench/bench_dmin_stacking.py, dc3c036), the chained
# searches of 2 seeds trained 120 runs in 59 stacks (2.03 a stack; apart, 105 runs in 95), so a trial is priced as
# one stack of every seed


def search_trials(d_guess: int, d_start: int, rel_tol: float, chained: bool) -> int:
    """Trials a d_min search is priced at: a chained one CHAINED_TRIALS; the first of its chain doubles d from
    d_start until it passes at about d_guess, then bisects the bracket (d / 2, d] down to rel_tol."""
    if chained:
        return CHAINED_TRIALS
    doubling = max(0, math.ceil(math.log2(d_guess / d_start))) + 1
    return doubling + max(0, math.ceil(math.log2(0.5 / rel_tol)))


def plan_scaling(params: dict, size: Callable, recorded: Mapping[str, dict]) -> tuple[list[Group], list[Analysis]]:
    """The searches' trials depend on what each measures: a search per (curve, N, seed), its trials
    (`search_trials`: N after the first start from the chain's guess) at the d the paper's thresholds
    suggest (128 learned, 512 frozen, at N = 4096, scaled by log N), each a stack of its own; except the first N's
    doubling, d_start, 2 d_start, ..., which every search of a width asks for at once while it fails, so the
    sweep's pool stacks them (geofact.training.sweep.SweepPool: runs queued together stack, seeds and frozen or
    not being stackable). With `seeds_together` the seeds of a curve start each N after the first at one guess
    (geofact.d_min_search, `together`) and ask for the same d while they answer alike: each trial is priced as one
    stack of every seed (measured: CHAINED_TRIALS' note). With `give_up` a failing trial is priced at
    GIVE_UP_STEP_FRACTION of its budget; the audit of the trials that gave up (`audit_give_up`, the laptop and smoke
    profiles', which trains each again without the rule) is not priced."""
    p = params
    decided = (p["level"], p["decide_every"]) if p.get("decide_every") else None  # priced by `expected_steps`
    single, shared, joint = [], [], []
    for frozen in (False, True):
        for width in p["widths"]:
            for budget in p["budgets"]:
                if budget == "fixed epochs" and width not in p["epoch_widths"]:
                    continue
                for N in p["N_values"]:
                    d = max(p["d_start"], round((512 if frozen else 128) * math.log2(N) / 12))
                    first = N == p["N_values"][0]
                    trials = search_trials(d, p["d_start"], p["rel_tol"], chained=not first)
                    doubling = search_trials(d, p["d_start"], 0.5, chained=False) if first else 0  # no bisection
                    batch = (p["batch_size"] if budget == "fixed steps"
                             else max(1, min(p["batch_size"] * N // max(p["N_values"]), N * p["R"])))
                    for s in p["seeds"]:
                        def trial(d: int, t: int) -> TrainConfig:
                            return TrainConfig(N=N, R=p["R"], d=d, mlp_width=None if width == "4d" else width,
                                               frozen_embeddings=frozen, seed=s, lr=p["lr"], max_steps=p["max_steps"],
                                               batch_size=min(batch, N * p["R"]), task_seed=t,
                                               precision=p.get("precision", "fp32"), stop_accuracy=decided,
                                               give_up=p.get("give_up") if decided else None)
                        shared += [trial(min(p["d_start"] * 2**i, p.get("d_max", 4096)), i) for i in range(doubling)]
                        stacked = p.get("seeds_together") and not first
                        (joint if stacked else single).extend(trial(d, t) for t in range(doubling, trials))
    # one trial at a time otherwise: a search's next d waits for its last, and the chains' trials are at other d (shapes)
    return (groups_of("exp-scaling", "d_min searches (first N's doubling, stacked)", shared, size, guess=True)
            + groups_of("exp-scaling", "d_min searches (trials, d guessed, seeds stacked)", joint,
                        lambda c: min(len(p["seeds"]), size(c)), guess=True)
            + groups_of("exp-scaling", "d_min searches (trials, d guessed)", single, lambda c: 1, guess=True)), []


# a page's planner: (its parameters, the stacking policy, the recorded runs by config key) -> its groups, analyses
PLANNERS: dict[str, Callable[[dict, Callable, Mapping[str, dict]], tuple[list[Group], list[Analysis]]]] = {
    "exp-capacity": plan_capacity, "exp-readout": plan_readout, "exp-interventions": plan_interventions,
    "exp-freeze-transfer": plan_transfer, "exp-multihop": plan_multihop, "exp-scaling": plan_scaling,
}


@dataclass(frozen=True)
class PagePlan:
    page: str
    groups: list[Group]
    analyses: list[Analysis]
    calibration: Calibration
    counts: Callable[[list], dict] | None = None  # the stacks' counted steps (Group.seconds)
    # on RECORDS_SUFFICE pages, the runs of `groups` that the lease records lack (`Group.unrecorded`); else None
    left: list[Group] | None = None

    @property
    def training_seconds(self) -> float:
        return sum(g.seconds(self.calibration, self.counts) for g in self.groups)

    @property
    def left_seconds(self) -> float:
        """What a lease still spends on the page: the runs the records lack and the analyses, or, where the page
        reads weights, all of it."""
        if self.left is None:
            return self.seconds
        return sum(g.seconds(self.calibration, self.counts) for g in self.left) + self.analysis_seconds

    @property
    def analysis_seconds(self) -> float:
        return sum(a.seconds(self.calibration) for a in self.analyses)

    @property
    def seconds(self) -> float:
        return self.training_seconds + self.analysis_seconds


ACCURACIES_READ = ("exp-readout", "exp-interventions", "exp-freeze-transfer")  # geofact.ops.compute.MECHANISM_PAGES


def plan_pages(parameters: dict[str, dict], calibration: Calibration, group_size: Callable[[Any], int],
               recorded: Mapping[str, dict] | None = None, counts: Callable[[list], dict] | None = None) -> list[PagePlan]:
    """Plans of the pages in `parameters` ({page: its parameters at the profile, defaults included}), in
    the lease's order (LEASE_ORDER); pages without a planner are left out. `recorded` ({config key: run
    record}, `recorded_runs`) decides the runs that depend on measurements where it can (the threshold
    cells); every run is priced whether or not it is recorded (a lease retrains the grid runs whose weights
    its analyses read), a recorded one at the steps it trained (`Group.with_records`). `counts`: the stacks' counted steps, which single-hop groups are priced by where the
    calibration has counted rates (Group.seconds)."""
    recorded = {} if recorded is None else recorded
    out = []
    order = [p for p in LEASE_ORDER if p in parameters] + [p for p in parameters if p not in LEASE_ORDER]
    # the checkpoints' accuracies: computed by the first mechanism page a lease runs, read by those after it
    first = next((p for p in order if p in ACCURACIES_READ), None)
    for page in order:
        if page in PLANNERS:
            params = parameters[page]
            if params.get("precision") is not None:
                check_precision(params["precision"])
            groups, analyses = PLANNERS[page](params, group_size, recorded)
            analyses = [a for a in analyses if a.name != "accuracy" or page == first]
            left = [g for g in (g.unrecorded(recorded) for g in groups) if g is not None] if page in RECORDS_SUFFICE else None
            if left is not None and any(m in parameters for m in LEASE_ORDER if m not in RECORDS_SUFFICE):
                for g in (g for g in groups if g.what in WEIGHTS_READ):  # its recorded runs, for their weights
                    on_record = tuple(c for c in g.configs if c.key() in recorded)
                    if on_record:
                        left.append(replace(g, what=AGAIN, configs=on_record).with_records(recorded))
            groups = [g.with_records(recorded) for g in groups]
            out.append(PagePlan(page, groups, analyses, calibration, counts, left))
    return out


def record_sources(root: Path) -> list[Path]:
    """Where the records under `root` are: every GPU lease's archive (results/*/records, in name order; one in
    parts, ARCHIVE.partIofN, by its name, which geofact.ops.pack.read_archive finds its parts from), then the run
    cache (.geofact/runs), when there."""
    archives = {}
    for path in sorted(Path(root).glob("results/*/records/*.tar.gz*")):
        whole = PART.fullmatch(path.name)
        archives.setdefault(path.with_name(whole["archive"]) if whole else path, path)
    return [*(archives[name] for name in sorted(archives)), *[p for p in [Path(root) / ".geofact" / "runs"] if p.exists()]]


def run_records(root: Path) -> list[dict]:
    """The single-hop run records under `root` (`record_sources`), each once; an archive holds the records of the
    leases before it too, and the run cache comes last. A run trained twice (on two leases) is two records."""
    out: dict[tuple, dict] = {}
    for source in record_sources(root):
        for record in read_run_records(source):
            if record.get("schema") == "geofact.training.run/1":
                made = (record.get("provenance") or {}).get("executed_at") or record.get("group_seconds")
                out[TrainConfig(**record["config"]).key(), json.dumps(made)] = record
    return list(out.values())


def analysis_records(root: Path) -> list[dict]:
    """The analysis records of a state (geofact.analysis.trajectory) under `root` (`record_sources`), each once."""
    out: dict[str, dict] = {}
    for source in record_sources(root):
        for record in read_analysis_records(source):
            out[json.dumps([record.get(k) for k in ("analysis", "config", "step", "params", "code", "seconds")])] = record
    return list(out.values())


def recorded_runs(records: list[dict]) -> dict[str, dict]:
    """`run_records` by config key: the last of a run trained more than once (the run cache's where it holds one)."""
    return {TrainConfig(**record["config"]).key(): record for record in records}


def lease_schedule(plans: list[PagePlan], minutes: float = LEASE_MINUTES) -> list[tuple[str, float, float, int]]:
    """(page, predicted minutes, minutes when it ends, lease it ends in) for the plans in order, pages
    packed into leases of `minutes` (a page that does not fit resumes in the next: --budget)."""
    rows, clock = [], 0.0
    for plan in plans:
        clock += plan.seconds / 60
        rows.append((plan.page, plan.seconds / 60, clock, max(1, math.ceil(clock / minutes - 1e-9))))
    return rows


# The cards a lease lends, by their data sheets (SXM), keyed by the name torch gives each (nothing else matches: an
# H100 PCIe or NVL, a GH200 or an H200 NVL has other rates): memory bandwidth and the dense matmul peaks (one GH100
# die, so one set of rates). With a launch at FLOOR_OP_SECONDS (assumed: the gap between a replayed CUDA graph's
# kernels) they price a plan's counted work as the data sheet's rates would (`floor_calibration`): FLOPs, bytes and
# launches added, as the plan adds them. Not a bound (the counted bytes are an upper bound for fused kernels, and a
# step's FLOPs and bytes overlap on a card), but the plan at rates its kernels could reach: what separates the two is
# the share of them the kernels achieve, not the work counted
DATA_SHEET_BANDWIDTH = {"NVIDIA H100 80GB HBM3": 3.35e12, "NVIDIA H200": 4.8e12}
DATA_SHEET_FLOPS = {"fp32": 67e12, "tf32": 495e12, "bf16": 990e12}
FLOOR_OP_SECONDS = 2.5e-6


def floor_calibration(calibration: Calibration) -> Calibration | None:
    """`calibration` at its card's data-sheet rates (DATA_SHEET_BANDWIDTH, DATA_SHEET_FLOPS, FLOOR_OP_SECONDS),
    geofact's kernels priced as any op, the analyses' rates likewise; None where the card is not one of those (its
    device reads "cuda (<name>)") or the steps are not priced by their count."""
    card = next((c for c in DATA_SHEET_BANDWIDTH if calibration.device.endswith(f"({c})")), None)
    if card is None or calibration.counted is None:
        return None
    bandwidth, source = DATA_SHEET_BANDWIDTH[card], f"the {card}'s data-sheet rates"
    counted = CountedRates(matmul_flops=dict(DATA_SHEET_FLOPS), bandwidth=bandwidth, op_seconds=FLOOR_OP_SECONDS, source=source,
                           kernels_as_ops=True)
    return replace(calibration, matmul_flops=dict(DATA_SHEET_FLOPS), bandwidth=bandwidth, op_seconds=FLOOR_OP_SECONDS,
                   counted=counted, source=source)


def kernels_as_ops(calibration: Calibration) -> Calibration | None:
    """`calibration` with geofact's kernels priced as the card's other ops and matmuls (their own fitted rates
    dropped); None where it has none."""
    if calibration.counted is None or (calibration.counted.kernel_flops is None and calibration.counted.kernel_op_seconds is None):
        return None
    return replace(calibration, counted=replace(calibration.counted, kernel_flops=None, kernel_op_seconds=None,
                                                kernels_as_ops=True))


def other_rates(plans: list[PagePlan], calibration: Calibration, minutes: float = LEASE_MINUTES) -> list[str]:
    """What the same plans cost at other rates than the card's fitted ones (`kernels_as_ops`, `floor_calibration`):
    lines of text, none where neither applies."""
    def total(other: Calibration) -> str:
        repriced_plans = [replace(p, calibration=other) for p in plans]
        repriced = sum(p.seconds for p in repriced_plans) / 60
        left = sum(p.left_seconds for p in repriced_plans) / 60
        return (f"{repriced:.1f} min, {math.ceil(repriced / minutes - 1e-9)} lease(s) "
                f"(left as the records stand: {left:.1f}, {math.ceil(left / minutes - 1e-9)})")

    if not plans or plans[0].counts is None:  # steps not priced by their count: no other rates to price them at
        return []
    lines = []
    as_ops = kernels_as_ops(calibration)
    if as_ops is not None:
        lines.append(f"  geofact's kernels launched and multiplying as the card's other ops and matmuls: {total(as_ops)}")
    floor = floor_calibration(calibration)
    if floor is not None:
        peaks = "/".join(f"{v / 1e12:g}" for v in DATA_SHEET_FLOPS.values())
        lines.append(f"  at {floor.source} ({floor.bandwidth / 1e12:g} TB/s; {peaks} TFLOP/s "
                     f"{'/'.join(DATA_SHEET_FLOPS)}; a launch {FLOOR_OP_SECONDS * 1e6:g} us, assumed; geofact's kernels as "
                     f"any op): {total(floor)}: the counted work at rates its kernels could reach")
    return (["", "the same counted work at other rates (the analyses too):", *lines] if lines else [])


def format_plan(plans: list[PagePlan], calibration: Calibration, minutes: float = LEASE_MINUTES) -> str:
    """The plan as text: per page its groups and analyses, then the lease order with the running total."""
    counted = calibration.counted is not None and bool(plans) and plans[0].counts is not None  # steps priced by count
    lines = [f"calibration: {calibration.device}; {calibration.source}",
             "  matmul " + ", ".join(f"{k} {v / 1e12:.2f} TFLOP/s" for k, v in calibration.matmul_flops.items())
             + f"; {calibration.bandwidth / 1e9:.0f} GB/s; {calibration.op_seconds * 1e6:.1f} us/op x "
               f"{calibration.ops_per_step:.0f} ops/step",
             *([f"  steps and analyses by their counted work (this checkout's step on fake meta tensors): "
                f"{calibration.counted.bandwidth / 1e9:.0f} GB/s, {calibration.counted.op_seconds * 1e6:.2f} us/op, "
                + kernel_rates(calibration.counted) + f"; {calibration.counted.source}"] if counted else []),
             ("  analyses scaled by the factors refitted to this card's timed states (bench/calibrate_analyses.py): "
              + ", ".join(f"{name} x{factor:.2f}" for name, factor in sorted(calibration.analysis_factors.items()))
              if calibration.analysis_factors else
              "  analyses at the rates fitted to the timed steps, their loading at an assumed host rate: no state "
              "analysed on this card has been timed (bench/calibrate_analyses.py refits them)"),
             "training is priced at each run's recorded stop where the lease records hold the run, else at its step "
             "budget (an upper bound; d_min trials with an accuracy stop at what they are expected to train); '~' marks "
             "runs that are a guess", ""]
    every = []  # each analysis's parts, as its line prints them
    for plan in plans:
        lines.append(f"{plan.page}: {plan.seconds / 60:.1f} min (training {plan.training_seconds / 60:.1f}, "
                     f"analyses {plan.analysis_seconds / 60:.1f})")
        rows: dict[tuple, list[float]] = {}  # stacks alike (a search's trials, one run each) on one line
        for g in plan.groups:
            key = (g.guess, g.what, g.runs, g.shape(), g.config.max_steps, g.n_recorded)
            rows.setdefault(key, []).append(g.seconds(calibration, plan.counts))
        for (guess, what, runs, shape, steps, n_recorded), seconds in rows.items():
            stacks = f"{len(seconds)} x {runs}" if len(seconds) > 1 else f"{runs}"
            stops = f"  ({n_recorded} at their recorded stops)" if n_recorded else ""
            lines.append(f"  {'~' if guess else ' '} {what:<38} {stacks:>7} runs  {shape:<34} {steps:>6} steps  "
                         f"{sum(seconds) / 60:7.2f} min{stops}")
        for a in plan.analyses:
            parts = a.parts(calibration)
            every.append(parts)
            lines.append(f"    {a.what:<36} {a.states:>4} states{'':<40}{sum(parts.values()) / 60:7.2f} min  ("
                         + ", ".join(f"{name} {seconds / 60:.2f}" for name, seconds in parts.items()) + ")")
    if every:  # issue 47 bounds them as a whole
        lines += ["", f"the analyses of every page: {sum(sum(p.values()) for p in every) / 60:.2f} min ("
                  + ", ".join(f"{name} {sum(p[name] for p in every) / 60:.2f}" for name in every[0]) + ")"]
    lines += ["", f"order in leases of {minutes:g} min (a page cut by --budget resumes in the next lease):"]
    for page, page_minutes, ends, lease in lease_schedule(plans, minutes):
        lines.append(f"  {page:<22} {page_minutes:7.1f} min  ends at {ends:7.1f} min  (lease {lease})")
    total = sum(p.seconds for p in plans) / 60
    lines.append(f"total: {total:.1f} min predicted, {math.ceil(total / minutes - 1e-9)} lease(s)")
    left = sum(p.left_seconds for p in plans) / 60
    lines += ["", "left, as the lease records stand (" + ", ".join(RECORDS_SUFFICE) + " train only the runs the records "
              "lack, a guessed group priced whole; the mechanism pages read weights, which records do not carry, so they "
              "train all of theirs again):"]
    for p in plans:
        again = sum(g.seconds(calibration, p.counts) for g in p.left or [] if g.what == AGAIN) / 60
        lines.append(f"  {p.page:<22} {p.left_seconds / 60:7.1f} min" + (f"  (of {p.seconds / 60:.1f})" if p.left is not None else "")
                     + (f": its verdicts {p.left_seconds / 60 - again:.1f}, the capacity grid's recorded runs again for the "
                        f"mechanism pages' weights {again:.1f}" if again else ""))
    lines.append(f"left: {left:.1f} min predicted, {math.ceil(left / minutes - 1e-9)} lease(s)")
    return "\n".join(lines + column_lines(plans, calibration) + other_rates(plans, calibration, minutes))


def column_seconds(plans: list[PagePlan], calibration: Calibration) -> dict[int, tuple[float, float]]:
    """Per column d of the capacity grid, the seconds of its runs on record trained again for the mechanism pages'
    weights and of those pages' analyses of its states (`geofact compute --grid-d D` runs them a column at a time;
    such a lease also trains and analyses the second grid where its records lack them); none where no mechanism page
    is planned."""
    again: dict[int, float] = {}
    for p in plans:
        for g in p.left or []:
            if g.what == AGAIN:
                again[g.config.d] = again.get(g.config.d, 0.0) + g.seconds(calibration, p.counts)
    analysed: dict[int, float] = {}
    for p in plans:
        for a in p.analyses:
            for d, work in a.columns:
                analysed[d] = analysed.get(d, 0.0) + replace(a, work=work).seconds(calibration)  # its factor too
    return {d: (again.get(d, 0.0), analysed[d]) for d in sorted(analysed)}


def column_lines(plans: list[PagePlan], calibration: Calibration) -> list[str]:
    """`column_seconds` as the plan's lines."""
    columns = column_seconds(plans, calibration)
    if not columns:
        return []
    return ["", "the mechanism pages a capacity-grid column at a time (geofact compute --grid-d D): its runs on record "
                "trained again for their weights + its states' analyses (the second grid and the spike studies apart):",
            *(f"  d = {d:<5} {again / 60:5.1f} + {analysed / 60:4.1f} = {(again + analysed) / 60:5.1f} min"
              for d, (again, analysed) in columns.items())]


def plan_errors(records: list[dict], calibration: Calibration, device: str) -> list[str]:
    """The plan against every stacked group trained on `device` (a kind, "cuda") that the records hold, one
    line a group and one a card (cards apart: an H200's groups against a calibration of the H100 say how far
    the one card's constants carry to the other): measured and predicted ms a step, and the error."""
    cards: dict[str, list[dict]] = {}
    for r in records:
        made_on = (r.get("provenance") or {}).get("device", "")
        if made_on.startswith(device):
            cards.setdefault(made_on, []).append(r)
    if not cards:
        return [f"plan check: no group trained on {device} in the run cache"]
    lines = [f"plan check against {calibration.device} ({calibration.source.split(';')[0]}):"]
    for card, rs in sorted(cards.items()):
        errors = []
        for config, runs, seconds in group_timings(rs, card):
            predicted = calibration.step_seconds(config, runs)
            errors.append(predicted / seconds - 1)
            lines.append(f"  {card}: N={config.N} d={config.d} B={config.batch_size} {config.precision}, {runs:.1f} runs: "
                         f"{seconds * 1e3:.2f} ms a step measured, {predicted * 1e3:.2f} predicted ({errors[-1]:+.0%})")
        if errors:
            worst = max(errors, key=abs)
            lines.append(f"  {card}: {len(errors)} groups, worst error {worst:+.0%}")
    return lines


@dataclass(frozen=True)
class TimedState:
    """An analysed state whose record holds its wall seconds (geofact.analysis.trajectory, since 2026-11-30), beside
    the plan's price of it."""

    device: str  # where it was analysed, as describe_device writes it
    name: str  # the analysis (STATE_WORK's key)
    config: TrainConfig
    price: float  # the plan's seconds for its analysis
    analysed: float  # the seconds its record holds
    load_price: float  # the plan's seconds for loading its weights (0 for an accuracy: its analysis loaded them)
    # its whole loading, the read and the copy to the device (a state read ahead hid some of it from the analysis:
    # `hidden`); None: not timed (a benchmark's row times one load a state, `bench_analyses.py`)
    loaded: float | None
    accuracy: float | None  # a checkpoint's accuracy timed within its analysis's record (until 2026-11-30)
    hidden: float = 0.0  # of its loading, the seconds the analysing thread did not wait for (read ahead)


def timed_states(records: list[dict], calibration: Calibration, device: str) -> tuple[list[TimedState], dict[str, int]]:
    """The states of `records` analysed on `device` (a kind, "cuda") priced at `calibration`, and the records left out
    by why: the first state a process analysed of a shape holds its warm-up (`seconds["warm"]` false), an analysis the
    plan does not price, a record it cannot read."""
    states, skipped = [], {}
    for r in records:
        made_on = (r.get("provenance") or {}).get("device", "")
        if not made_on.startswith(device) or not isinstance(r.get("seconds"), dict):
            continue
        why = "a warm-up" if r["seconds"].get("warm") is False else None
        if why is None and r.get("analysis") not in STATE_WORK:
            why = f"not priced ({r.get('analysis')})"
        if why is None:
            try:  # a record of another schema's config or parameters, or without a time, is counted, not read
                name, config = r["analysis"], TrainConfig(**r["config"])
                work, times = STATE_WORK[name]
                price = Analysis("", name, 1, work(config, r["params"]) * (times if r["step"] is None else 1.0), name=name)
                load_price = 0.0 if name == "accuracy" else Analysis("", "", 1, _loaded(config)).seconds(calibration)
                accuracy = r["seconds"].get("accuracy")
                loaded, hidden = _loading(r["seconds"])
                states.append(TimedState(made_on, name, config, price.seconds(calibration), float(r["seconds"]["analysis"]),
                                         load_price, loaded, None if accuracy is None else float(accuracy), hidden))
            except (KeyError, TypeError, ValueError) as exc:
                why = f"unreadable ({type(exc).__name__}: {exc})"
        if why is not None:
            skipped[why] = skipped.get(why, 0) + 1
    return states, skipped


def _loading(seconds: dict) -> tuple[float | None, float]:
    """A record's whole loading of its state and the part of it read ahead out of the analysis's way: since the
    reads ahead (geofact.analysis.trajectory.Prefetch) the read and the copy to the device, timed apart; before, the
    analysing thread's "load", which was all of it."""
    if seconds.get("read") is None or seconds.get("copy") is None:
        return (None if seconds["load"] is None else float(seconds["load"])), 0.0
    whole = float(seconds["read"]) + float(seconds["copy"])
    return whole, max(0.0, whole - float(seconds["load"])) if seconds.get("ahead") else 0.0


# The fewest timed states of an analysis (or loads) whose total a factor is refitted to: fewer keep the plan's price
MIN_TIMED_STATES = 3


def analysis_totals(states: list[TimedState]) -> dict[str, tuple[float, float, int]]:
    """{analysis: (measured seconds, priced seconds, states)} over `states`, and "load" for their loading (an
    accuracy's state was loaded by the analysis that asked for it; a load not timed is left out)."""
    totals: dict[str, tuple[float, float, int]] = {}
    for st in states:
        for key, measured, price in ((st.name, st.analysed, st.price), ("load", st.loaded, st.load_price)):
            if key == "load" and (st.name == "accuracy" or measured is None):
                continue
            m, p, n = totals.get(key, (0.0, 0.0, 0))
            totals[key] = (m + measured, p + price, n + 1)
    return totals


def fit_analysis_factors(states: list[TimedState]) -> dict[str, tuple[float, int]]:
    """{analysis: (measured / priced seconds, states)} over one card's `states` (`analysis_totals`), and "load" for
    their loading: what `Calibration.analysis_factors` stores (bench/calibrate_analyses.py). The states must be priced
    without factors (`timed_states` at the calibration with analysis_factors None), so that a refit does not compound
    them. An analysis (or the loads) with fewer than MIN_TIMED_STATES states, or no time measured, gets none. A ratio
    of sums: the large states, which take the plan's minutes, weigh most."""
    return {key: (measured / priced, n) for key, (measured, priced, n) in analysis_totals(states).items()
            if n >= MIN_TIMED_STATES and measured > 0 and priced > 0}


def analysis_errors(records: list[dict], calibration: Calibration, device: str) -> list[str]:
    """The plan's price of each analysed state (`STATE_WORK`, `_accuracy`) against the wall seconds its record holds
    (`timed_states`), for every record made on `device` (a kind, "cuda"): one line per card, analysis, N, R and d
    (the analysis, and the weights' loading beside `_loaded`'s price; since 2026-11-30 a checkpoint's accuracy is a
    record of its own, "accuracy", which loads nothing) and one a card; cards apart, as `plan_errors` keeps them.
    Warm-ups and unreadable records are left out, and counted."""
    states, skipped = timed_states(records, calibration, device)
    groups: dict[tuple, list[TimedState]] = {}
    for st in states:
        groups.setdefault((st.device, st.name, st.config.N, st.config.R, st.config.d), []).append(st)
    if not groups:
        return [f"analysis check: no analysis timed on {device} in the records (their seconds are recorded since "
                f"2026-11-30)" + "".join(f"; {n} {why}" for why, n in skipped.items())]
    lines = [f"analysis check against {calibration.device} (a state's seconds as recorded, the plan's price of it):"]
    errors: dict[str, list[float]] = {}
    for (card, name, N, R, d), group in sorted(groups.items()):
        measured, predicted = sum(st.analysed for st in group), sum(st.price for st in group)
        timed = [st for st in group if st.accuracy is not None]
        accuracy = sum(st.accuracy for st in timed)
        accuracy_predicted = sum(Analysis("", "accuracy", 1, _accuracy(st.config), name="accuracy").seconds(calibration)
                                 for st in timed)
        error = predicted / measured - 1 if measured > 0 else None
        if error is not None:
            errors.setdefault(card, []).append(error)
        accuracies = f"; {len(timed)} accuracies {accuracy:.2f} s, {accuracy_predicted:.2f} predicted" if timed else ""
        loads = [st for st in group if st.loaded is not None]
        hidden = sum(st.hidden for st in loads)
        loading = "" if name == "accuracy" or not loads else (
            f"; loading the weights {sum(st.loaded for st in loads):.2f} s"
            + (f" ({hidden:.2f} of it read ahead, out of the analysis's way)" if hidden else "")
            + f", {sum(st.load_price for st in loads):.2f} predicted")
        lines.append(f"  {card}: {name} N={N} R={R} d={d}, {len(group)} states: {measured:.2f} s measured, "
                     f"{predicted:.2f} predicted ({'no time measured' if error is None else f'{error:+.0%}'})"
                     f"{accuracies}{loading}")
    for card, errs in sorted(errors.items()):
        lines.append(f"  {card}: {len(errs)} groups of states, worst error {max(errs, key=abs):+.0%}")
    lines += [f"  left out: {n} states, {why}" for why, n in sorted(skipped.items())]
    return lines


def counted_errors(root: Path, calibration: Calibration, device: str = "cuda") -> list[str]:
    """The counted rates of `calibration` against every timed step a card's calibration file stores counted as the
    code that ran it ("counted_steps", bench/count_lease_steps.py), of every card: one line a step, one a card."""
    if calibration.counted is None:
        return [f"counted check: {calibration.device} has no counted rates (bench/count_lease_steps.py)"]
    lines = [f"counted check against {calibration.device}'s counted rates ({calibration.counted.source.split(':')[0]}):"]
    for card in stored_cards(root, device):
        rows = json.loads(calibration_path(root, device, card).read_text()).get("counted_steps", [])
        errors = []
        precision = "tf32" if device.startswith("cuda") else "fp32"  # what the leases' groups ran under
        for row in rows:
            step = timed_step(row)
            predicted = calibration.counted.seconds(step, precision)
            errors.append(predicted / row["seconds"] - 1)
            lines.append(f"  {card}: {row['what']}: {row['seconds'] * 1e3:.2f} ms a step measured, {predicted * 1e3:.2f} "
                         f"predicted from {step['bytes'] / 1e9:.2f} GB and {step['ops']:.0f} ops ({errors[-1]:+.0%})")
        if errors:
            lines.append(f"  {card}: {len(errors)} steps, worst error {max(errors, key=abs):+.0%}")
    return lines


def kernel_rates(rates: CountedRates) -> str:
    """What a card's counted rates say of geofact's own kernels (their matmuls' rate, a launch's seconds), or that
    they price them as cuBLAS's matmuls and torch's ops, field by field, as `CountedRates.seconds` does."""
    flops = (f"matmuls {rates.kernel_flops / 1e12:.0f} TFLOP/s" if rates.kernel_flops is not None
             else "matmuls untimed (at cuBLAS's rate)")
    launch = (f"{rates.kernel_op_seconds * 1e6:.1f} us a launch" if rates.kernel_op_seconds is not None
              else "launches untimed (as any op)")
    return f"geofact's kernels: {flops}, {launch}"


def traffic_rows(shapes=PAPER_SHAPES, calibration=None, precision: str = "tf32") -> list[dict]:
    """`step_traffic` at each (N, d, runs), with what geofact.ops.costs assumes for the same stack: the analytic
    formula's bytes (`plan_bytes`, `step_bytes`) and its milliseconds (`formula_ms`), and the milliseconds the plan
    prices the step at (`predicted_ms`: the count at the calibration's counted rates where it has them, else the
    formula's), at `precision` (the paper profile's on CUDA: tf32; the count itself is of the float32 step's tensors)."""
    calibration = H100_SPEC if calibration is None else calibration
    rows = []
    for N, d, runs in shapes:
        configs = paper_shape(N, d, runs, precision)
        traffic = step_traffic([TrainConfig(**{**c.as_dict(), "precision": "fp32"}) for c in configs])
        traffic = StepTraffic(**{**asdict(traffic), "precision": precision})
        shape = max(configs, key=lambda c: c.R)
        formula = calibration.step_seconds(shape, runs)
        counted = (calibration.counted.seconds(asdict(traffic), precision)
                   if calibration.counted is not None else None)
        rows.append({**traffic.as_dict(), "bytes_per_step": traffic.bytes, "flops_per_step": traffic.flops,
                     "ops_per_step": traffic.ops, "plan_bytes": runs * step_bytes(shape), "formula_ms": 1e3 * formula,
                     "predicted_ms": 1e3 * (formula if counted is None else counted)})
    return rows


def main(argv: list[str] | None = None) -> int:
    """`python -m geofact.ops.costs --root ROOT --device cuda < parameters.json`: the plan of the pages
    whose parameters arrive on standard input (`geofact plan` sends them: the publisher reads notebooks,
    this side knows the runs); with `--check`, the plan's error on every group the run cache says was trained, and
    on every analysed state whose record holds its seconds."""
    import argparse
    import sys

    import torch

    from geofact.training.sweep import default_group_size

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--root", type=Path, required=True)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--minutes", type=float, default=LEASE_MINUTES)
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--card", default=None)
    args = parser.parse_args(argv)
    parameters = json.loads(sys.stdin.read())
    try:
        calibration = load_calibration(args.root, args.device, args.card)
        device = torch.device(args.device)  # the stacking policy of that kind of device, whether or not it is here
        records = run_records(args.root)
        counts = StepCounts(args.root) if calibration.counted is not None else None
        plans = plan_pages(parameters, calibration, lambda c: default_group_size(c, device), recorded_runs(records), counts)
    except ValueError as exc:
        print(f"geofact plan: error: {exc}", file=sys.stderr)
        return 1
    print(format_plan(plans, calibration, args.minutes))
    if counts is not None and counts.counted:
        print(f"\n(counted {counts.counted} stacks' steps on fake tensors: bench/calibration/step-counts/ holds no counts "
              "of this code; `python -m geofact.ops.step_counts --commit` puts this checkout's there)")
    if args.check:
        print("\n".join(plan_errors(records, calibration, args.device.split(":")[0])))
        print("\n".join(counted_errors(args.root, calibration, args.device.split(":")[0])))
        print("\n".join(analysis_errors(analysis_records(args.root), calibration, args.device.split(":")[0])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
