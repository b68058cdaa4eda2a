"""Loss spikes after memorisation: a run whose loss fell to a floor, then rose far above it.

The paper's recipe (Appendix `app:exp-singlehop`: AdamW, weight decay 0.1, clipping at norm 1, no
schedule, up to 15,000 steps, early stop when the training loss falls below 1e-4) keeps stepping at
the full rate once a run has memorised. A run that has not met the stop rule then sits at a small
loss where Adam's second-moment estimate is tiny, and a step can throw it far back up (the
"slingshot" of Thilak et al. 2022, the small-loss instabilities of Wortsman et al. 2023). Whether the
mechanism pages read a run before, during or after such a rebound may decide their verdicts, so every
run's loss curve is scanned by one rule:

    once the running minimum of the logged loss m_t = min_{s <= t} loss_s has fallen below `floor`
    (the run has memorised), a spike starts at the first logged step with loss_t > `factor` x m_t;
    it ends at the first later logged step with loss back at or below `factor` x (the minimum at its
    start); a rise within `merge_within` steps of that end is the same spike. A run may spike several times.

The loss is the logged batch loss (geofact.training.trainer.RunResult.loss_curve: every `log_every`
steps), so a spike shorter than the logging interval can be missed and onsets are known to within it.
`sensitivity` counts spiking runs over a grid of floors and factors, so that a reader sees how the
counts move with the rule.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

DEFAULT_FLOOR = 3e-4  # memorised: three times the stop rule's 1e-4 (the batch loss of a memorised run hovers there)
DEFAULT_FACTOR = 10.0  # a spike: ten times the running minimum, beyond the batch-to-batch noise of a memorised run
# A loss logged at every step crosses back and forth over factor x minimum on a spike's way down (measured:
# N = 128, R = 2, d = 96, a spike to 6.5 back at step 5175, over the line again for one step at 5179);
# the pages log every 100 steps, so at their resolution a rise one point after an end is merged.
DEFAULT_MERGE = 100


@dataclass(frozen=True)
class SpikeRule:
    """The rule above: `floor`, the running minimum that counts as memorised; `factor`, how far above
    that minimum the loss must rise to count as a spike."""

    floor: float = DEFAULT_FLOOR
    factor: float = DEFAULT_FACTOR
    merge_within: int = DEFAULT_MERGE  # a rise starting this few steps after a spike ended is part of it

    def __post_init__(self) -> None:
        if not (isinstance(self.merge_within, int) and self.merge_within >= 0):
            raise ValueError(f"merge_within must be an integer number of steps >= 0, got {self.merge_within!r}")
        if not (math.isfinite(self.floor) and self.floor > 0):
            raise ValueError(f"floor must be a finite loss > 0, got {self.floor}")
        if not (math.isfinite(self.factor) and self.factor > 1):
            raise ValueError(f"factor must be finite and > 1 (a rise above the running minimum), got {self.factor}")


@dataclass(frozen=True)
class Spike:
    """One rebound: `start` and `end` are logged steps (`end` None: not back by the curve's last step)."""

    start: int
    base: float  # the running minimum when it started
    peak_step: int
    peak: float
    end: int | None

    @property
    def height(self) -> float:
        """How many times the minimum before it the loss rose to."""
        return self.peak / self.base

    @property
    def recovered(self) -> bool:
        return self.end is not None


def _points(curve: Iterable[Sequence[float]]) -> list[tuple[int, float]]:
    points = [(int(step), float(loss)) for step, loss in curve]
    if any(b[0] <= a[0] for a, b in zip(points, points[1:])):
        raise ValueError("loss curve: steps must increase")
    return points


def find_spikes(curve: Iterable[Sequence[float]], rule: SpikeRule = SpikeRule()) -> list[Spike]:
    """Every spike of a loss curve, (step, loss) pairs in step order, under `rule`.

    A non-finite loss counts as above any factor (a run that diverged to NaN has spiked)."""
    spikes: list[Spike] = []
    running_min = math.inf
    open_spike: dict | None = None  # start, base, peak_step, peak of the spike in progress
    for step, loss in _points(curve):
        high = not math.isfinite(loss)
        if open_spike is None:
            if running_min < rule.floor and (high or loss > rule.factor * running_min):
                peak = math.inf if high else loss
                if spikes and step - spikes[-1].end <= rule.merge_within:  # the last spike's tail: reopen it
                    last = spikes.pop()
                    open_spike = {"start": last.start, "base": last.base, "peak_step": last.peak_step, "peak": last.peak}
                    if peak > last.peak:
                        open_spike["peak_step"], open_spike["peak"] = step, peak
                else:
                    open_spike = {"start": step, "base": running_min, "peak_step": step, "peak": peak}
            else:
                running_min = min(running_min, loss) if not high else running_min
            continue
        if high or loss > open_spike["peak"]:
            open_spike["peak_step"], open_spike["peak"] = step, (math.inf if high else loss)
        if not high and loss <= rule.factor * open_spike["base"]:
            spikes.append(Spike(end=step, **open_spike))
            open_spike = None
            running_min = min(running_min, loss)
    if open_spike is not None:
        spikes.append(Spike(end=None, **open_spike))
    return spikes


def met_loss_rule(record: Mapping) -> bool:
    """Whether a run record stopped at the loss rule: a run with an accuracy stop (`TrainConfig.stop_accuracy`)
    also stops early once decided, with its loss at or above the threshold."""
    if not record.get("stopped_early", False):
        return False
    config = record.get("config") or {}
    if not config.get("stop_accuracy"):
        return True
    return record.get("final_loss", math.inf) < config["loss_threshold"]


@dataclass(frozen=True)
class RunSpikes:
    """A run's loss curve read by a rule: whether it memorised (its minimum fell below the floor), its
    spikes, and what the stop rule made of it."""

    min_loss: float
    min_step: int
    memorised: bool
    spikes: tuple[Spike, ...]
    stopped_early: bool  # met the loss rule (not an accuracy stop: `met_loss_rule`)
    steps: int  # steps it took
    last_loss: float  # the curve's last logged loss

    @classmethod
    def of(cls, record: Mapping, rule: SpikeRule = SpikeRule()) -> RunSpikes:
        """From a run record (geofact.training.sweep's JSON: `loss_curve`, `stopped_early`, `steps`)."""
        if "loss_curve" not in record:
            raise ValueError("record has no loss_curve: not a training run's record")
        points = _points(record["loss_curve"])
        if not points:
            raise ValueError("record's loss_curve is empty")
        finite = [(loss, step) for step, loss in points if math.isfinite(loss)]
        min_loss, min_step = min(finite) if finite else (math.inf, points[0][0])
        return cls(min_loss=min_loss, min_step=min_step, memorised=min_loss < rule.floor,
                   spikes=tuple(find_spikes(points, rule)), stopped_early=met_loss_rule(record),
                   steps=int(record.get("steps", points[-1][0])), last_loss=points[-1][1])

    @property
    def spiked(self) -> bool:
        return bool(self.spikes)

    @property
    def highest(self) -> Spike | None:
        return max(self.spikes, key=lambda s: s.height, default=None)

    @property
    def recovered(self) -> bool:
        """Every spike came back below its factor x base within the curve."""
        return all(s.recovered for s in self.spikes)


@dataclass(frozen=True)
class SpikeCount:
    """Over a set of runs, under one rule: how many memorised, and how many of those spiked."""

    floor: float
    factor: float
    runs: int
    memorised: int
    spiked: int
    unrecovered: int  # spiked and not back by the curve's end

    @property
    def fraction(self) -> float:
        """Spiking runs among the memorised ones (NaN when none memorised)."""
        return self.spiked / self.memorised if self.memorised else math.nan


def count(records: Iterable[Mapping], rule: SpikeRule = SpikeRule()) -> SpikeCount:
    read = [RunSpikes.of(r, rule) for r in records]
    return SpikeCount(rule.floor, rule.factor, len(read), sum(r.memorised for r in read), sum(r.spiked for r in read),
                      sum(r.spiked and not r.recovered for r in read))


@dataclass(frozen=True)
class AfterStop:
    """Over runs trained on past their stop (TrainConfig.read_past_stop): how many met the stop rule, and how
    many of those spiked after it (a spike starting after the stop step, read on the whole curve)."""

    stopped: int
    spiked: int
    over_1000: int  # ... more than 1000-fold
    not_back: int  # ... and not back under the line by the end of the budget

    def text(self) -> str:
        if not self.stopped:
            return "no run read past its stop met the stop rule"
        return (f"{self.spiked} of the {self.stopped} runs that met the stop rule spiked after it "
                f"({self.over_1000} more than 1000-fold, {self.not_back} not back under the line by the end of the budget)")


def after_stop(records: Iterable[Mapping], rule: SpikeRule = SpikeRule()) -> AfterStop:
    """`AfterStop` of the records that carry a curve past their stop (others are left out)."""
    stopped = spiked = over = not_back = 0
    for record in records:
        past = record.get("past_stop")
        if past is None or not record.get("stopped_early"):
            continue
        stopped += 1
        later = [s for s in find_spikes(list(record["loss_curve"]) + list(past["loss_curve"]), rule) if s.start > record["steps"]]
        spiked += bool(later)
        over += any(s.height > 1000 for s in later)
        not_back += any(not s.recovered for s in later)
    return AfterStop(stopped, spiked, over, not_back)


def sensitivity(records: Iterable[Mapping], floors: Sequence[float] = (2e-4, 3e-4, 1e-3),
                factors: Sequence[float] = (3.0, 10.0, 100.0, 1000.0)) -> list[SpikeCount]:
    """`count` at every (floor, factor): how the counts move with the rule. A floor at or below the stop
    rule's 1e-4 counts nothing: a run stops at the first step below it, which is rarely a logged one."""
    records = list(records)
    return [count(records, SpikeRule(floor, factor)) for floor in floors for factor in factors]


def spike_rows(records: Mapping[object, Mapping], rule: SpikeRule = SpikeRule()) -> list[dict]:
    """One row per spiking run (keyed as in `records`, e.g. (regime, R, d, seed)): when its first and its
    highest spike started, how high (x the minimum before it, and the peak loss), whether every spike
    came back, and whether the run met the stop rule."""
    rows = []
    for key, record in records.items():
        run = RunSpikes.of(record, rule)
        if not run.spiked:
            continue
        top = run.highest
        rows.append({"run": key, "spikes": len(run.spikes), "first_start": run.spikes[0].start, "base": top.base,
                     "peak_step": top.peak_step, "peak": top.peak, "height": top.height, "recovered": run.recovered,
                     "stopped_early": run.stopped_early, "steps": run.steps, "last_loss": run.last_loss})
    return rows


READING_POINTS = ("best", "before_spike", "spike_peak", "recovered", "stop", "last")
"""The states of a run the mechanism is read at around its first spike (issue 46, items 3 and 4):

- `best`: the lowest batch loss before the first spike (the best state before any spike);
- `before_spike`: the step before the first spike starts (the rule's start: the first step whose loss
  exceeds `factor` x the running minimum, once that minimum is below `floor`);
- `spike_peak`: the highest loss from that start until the loss is back below `floor`;
- `recovered`: the first step after the start whose loss is back below `floor` (memorised again);
- `stop`: the first step whose batch loss is below the stop rule's threshold (what the pages read);
- `last`: the end of the step budget (step 15,000 in the paper's recipe).
A point a run never reaches (no spike, no recovery, no stop) is None."""


class FirstSpikeWatch:
    """`READING_POINTS` of one run, found step by step as its losses come (every step, no logging gap), so
    that a trainer keeps only the states they name. `see(step, loss)` takes the loss of the state after
    `step` updates and returns the points that state now is; "before_spike" names the *previous* step's
    state, which the caller must therefore hold while `wants_previous` is true. The first spike's start
    is `find_spikes`' on the same every-step curve (tests/test_spikes.py)."""

    def __init__(self, rule: SpikeRule, threshold: float) -> None:
        self.rule, self.threshold = rule, threshold
        self.running_min = math.inf
        self.best_loss = math.inf
        self.peak_loss = -math.inf
        self.phase = "descent"  # "descent" (no spike yet), "spike" (first spike, not back under the floor), "after"
        self.points: dict[str, int | None] = {name: None for name in READING_POINTS}

    @property
    def wants_previous(self) -> bool:
        """Whether the next step could start the first spike (then the current state becomes `before_spike`)."""
        return self.phase == "descent" and self.running_min < self.rule.floor

    def see(self, step: int, loss: float) -> list[str]:
        now: list[str] = []
        high = not math.isfinite(loss)
        if self.points["stop"] is None and not high and loss < self.threshold:
            now.append("stop")
        if self.phase == "descent":
            if self.running_min < self.rule.floor and (high or loss > self.rule.factor * self.running_min):
                self.phase, self.peak_loss = "spike", math.inf if high else loss
                now += ["before_spike", "spike_peak"]
            else:
                self.running_min = min(self.running_min, loss)
                if loss < self.best_loss:
                    self.best_loss = loss
                    now.append("best")
        elif self.phase == "spike":
            if not high and loss < self.rule.floor:
                self.phase = "after"
                now.append("recovered")
            elif high or loss > self.peak_loss:
                self.peak_loss = math.inf if high else loss
                now.append("spike_peak")
        for name in now:
            self.points[name] = step - 1 if name == "before_spike" else step
        return now
