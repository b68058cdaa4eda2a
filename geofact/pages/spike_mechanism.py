"""The mechanism read around a loss spike (issue 46, item 3): a mechanism page's metric (readout,
selectivity, zero-shot transfer) on the states that exp-capacity's spike study kept.

The study (geofact.training.variants.study_jobs) trains one cell of the capacity grid, learned
embeddings, every seed under the paper's recipe and its variants, the full step budget without the stop
rule; the `MECHANISM_RECIPES` keep a state every `Keep.every` steps and at the `READING_POINTS` of their
first spike (geofact.spikes). At the mechanism pages' second N, one cell of the second grid (`spike_second`)
is trained under the `MECHANISM_RECIPES` alone, so that the erosion's cause is read at two N. Read here, per run:

- **around the spike** (paired by seed, over the seeds that spiked): the metric at the spike's peak minus
  just before it (what a spike does to the structure), after recovery minus before (whether it comes
  back), at the stop rule minus at the best state before any spike (what the pages' reading point reads);
- **erosion by recipe**: the drop from the metric's highest kept value to its value at the stop rule and
  at the end of the budget. The paper's recipe both spikes and decays the weights; "wd 0" spikes without
  weight decay; "lr/10 after" cuts the rate tenfold once the loss is below the spike floor, which removes
  the spikes at this cell (exp-capacity) but also divides AdamW's decoupled decay per step (lr x wd) by
  ten. An erosion under the paper's recipe that stays without weight decay is not weight decay's; one
  that goes with the spikes and stays without weight decay points at the spikes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from geofact.analysis.trajectory import Stamp, analyse_state
from geofact.evidence import Estimate, t_interval
from geofact.pages.plotting import COLORS, subplots
from geofact.progress import progress
from geofact.spikes import DEFAULT_FLOOR, READING_POINTS
from geofact.training.variants import MECHANISM_RECIPES, states_dir

POINT_LABELS = {"best": "best before a spike", "before_spike": "just before", "spike_peak": "spike peak",
                "recovered": "back under the floor", "stop": "stop rule", "last": "end of budget"}
POINT_MARKERS = {"before_spike": "^", "spike_peak": "v", "recovered": "o", "stop": "s", "last": "D", "best": "*"}
RECIPE_COLORS = {"paper": COLORS["measured"], "wd 0": COLORS["alt"], "lr/10 after": COLORS["theory"]}
EFFECTS = {  # name -> (later point, earlier point, what the difference says)
    "spike": ("spike_peak", "before_spike", "at the spike's peak minus just before it"),
    "recovery": ("recovered", "before_spike", "back under the floor minus just before the spike"),
    "stop_reading": ("stop", "best", "at the stop rule minus at the best state before any spike"),
    "end_reading": ("last", "best", "at the end of the budget minus at the best state before any spike"),
}


@dataclass(frozen=True)
class StudyRun:
    """One kept run of the study: its metric along training and at its reading points."""

    recipe: str
    seed: int
    steps: list[int]  # the states kept along training (every Keep.every steps, and the last)
    values: list[float]  # the metric there
    at: dict[str, float | None]  # the metric at each reading point (None: the run has no such point)
    points: dict[str, int | None]  # the reading points' steps
    loss_curve: list[tuple[int, float]]

    @property
    def spiked(self) -> bool:
        return self.points.get("spike_peak") is not None

    def drop(self, until: str) -> float | None:
        """The highest value kept up to reading point `until` minus the value there (None: no such point)."""
        end = self.points.get(until)
        if end is None:
            return None
        seen = [v for t, v in zip(self.steps, self.values) if t <= end]
        seen += [v for name, v in self.at.items() if v is not None and self.points[name] <= end]
        return max(seen) - self.at[until]


def read_study(jobs: list, records: list[dict], cache_dir: Path, analyse, name: str, params: dict, metric: str,
               device: str = "cpu", desc: str = "spike states") -> list[StudyRun]:
    """`metric` of `analyse` on every kept state of the study's jobs (those with a `Keep`), each state's
    analysis cached beside its weights as the grid's are (geofact.analysis.trajectory.analyse_state)."""
    kept = [(job, record) for job, record in zip(jobs, records) if job[2] is not None]
    wanted = []
    for (config, recipe, keep), record in kept:
        points = {k: (None if v is None else int(v)) for k, v in record["points"].items()}
        steps = sorted({*range(0, config.max_steps + 1, keep.every), config.max_steps})
        wanted.append((config, recipe, keep, record, points, steps))
    states = [(i, t) for i, (*_, points, steps) in enumerate(wanted)
              for t in sorted(set(steps) | {t for t in points.values() if t is not None})]
    value: dict[tuple[int, int], float] = {}
    stamp = Stamp(analyse, device)
    for i, t in progress(states, desc=desc):
        config, recipe, keep = wanted[i][:3]
        value[i, t] = float(analyse_state(states_dir(cache_dir, config, recipe, keep), config, t, analyse, name, params,
                                          None, device, stamp)["values"][metric])
    return [StudyRun(recipe.name, config.seed, steps, [value[i, t] for t in steps],
                     {p: (None if points.get(p) is None else value[i, points[p]]) for p in READING_POINTS}, points,
                     [(int(s), float(x)) for s, x in record["loss_curve"]])
            for i, (config, recipe, keep, record, points, steps) in enumerate(wanted)]


def effect(runs: list[StudyRun], later: str, earlier: str, quantity: str) -> Estimate:
    """The paired difference later - earlier over the runs that have both points, Student t over seeds."""
    diffs = [r.at[later] - r.at[earlier] for r in runs if r.at.get(later) is not None and r.at.get(earlier) is not None]
    if not diffs:
        return Estimate.missing(quantity, "no run has both points")
    return t_interval(diffs, quantity, unit="seeds")


def drops(runs: list[StudyRun], until: str, quantity: str) -> Estimate:
    values = [d for d in (r.drop(until) for r in runs) if d is not None]
    if not values:
        return Estimate.missing(quantity, "no run reached that point")
    return t_interval(values, quantity, unit="seeds")


def effect_words(estimate: Estimate, digits: int = 3) -> str:
    """A difference with its interval, and whether the interval excludes 0 (or why there is none)."""
    if not estimate.defined:
        return f"none ({estimate.method})"
    if not math.isfinite(estimate.lo):
        return f"{estimate.value:.{digits}f} ({estimate.method})"
    seen = "an effect" if estimate.lo > 0 or estimate.hi < 0 else "no effect this scale can see"
    return f"{estimate.value:.{digits}f} [{estimate.lo:.{digits}f}, {estimate.hi:.{digits}f}] ({seen})"


def by_recipe(runs: list[StudyRun]) -> dict[str, list[StudyRun]]:
    return {name: [r for r in runs if r.recipe == name] for name in MECHANISM_RECIPES if any(r.recipe == name for r in runs)}


@dataclass(frozen=True)
class SpikeReading:
    """What the study says about a metric: the effects around the first spike under each recipe, and the
    erosion (drop to the stop rule, to the end of the budget) under each recipe."""

    effects: dict[str, dict[str, Estimate]]  # recipe -> EFFECTS name -> estimate
    drop_stop: dict[str, Estimate]  # recipe -> drop from the highest kept value to the stop rule
    drop_last: dict[str, Estimate]  # recipe -> ... to the end of the budget
    spiked: dict[str, tuple[int, int]]  # recipe -> (runs that spiked, runs)

    def numbers(self) -> dict[str, dict]:
        """Report numbers: every estimate as a dict, keyed by what and recipe."""
        out = {f"drop_stop_{r}": e.as_dict() for r, e in self.drop_stop.items()}
        out |= {f"drop_last_{r}": e.as_dict() for r, e in self.drop_last.items()}
        out |= {f"{name}_{r}": e.as_dict() for r, effects in self.effects.items() for name, e in effects.items()}
        return out


def spike_reading(runs: list[StudyRun], label: str) -> SpikeReading:
    groups = by_recipe(runs)
    effects = {r: {name: effect(rs, later, earlier, f"{label} {words}") for name, (later, earlier, words) in EFFECTS.items()}
               for r, rs in groups.items()}
    return SpikeReading(effects,
                        {r: drops(rs, "stop", f"{label}: highest kept value minus at the stop rule") for r, rs in groups.items()},
                        {r: drops(rs, "last", f"{label}: highest kept value minus at the end") for r, rs in groups.items()},
                        {r: (sum(x.spiked for x in rs), len(rs)) for r, rs in groups.items()})


def reading_table(runs: list[StudyRun], reading: SpikeReading, digits: int = 3) -> str:
    """Markdown: per recipe, the seeds that spiked, the metric's mean at each reading point (over the runs
    that have it: n), and the drops to the stop rule and to the end with their intervals."""
    head = ["recipe", "spiked", *(POINT_LABELS[p] for p in READING_POINTS), "drop to the stop rule", "drop to the end"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for recipe, rs in by_recipe(runs).items():
        cells = []
        for p in READING_POINTS:
            values = [r.at[p] for r in rs if r.at.get(p) is not None]
            cells.append(f"{np.mean(values):.{digits}f} (n = {len(values)})" if values else "-")
        spiked, n = reading.spiked[recipe]
        lines.append(f"| {recipe} | {spiked} of {n} | " + " | ".join(cells)
                          + f" | {interval_words(reading.drop_stop[recipe], digits)} | {interval_words(reading.drop_last[recipe], digits)} |")
    return "\n".join(lines)


def effects_markdown(reading: SpikeReading, digits: int = 3) -> str:
    """One line per recipe whose runs spiked: the paired effects around the spike."""
    lines = []
    for recipe, effects in reading.effects.items():
        if not reading.spiked[recipe][0]:
            lines.append(f"- {recipe}: no run spiked within the budget.")
            continue
        lines.append(f"- {recipe}: " + "; ".join(f"{EFFECTS[name][2]} {effect_words(e, digits)}" for name, e in effects.items()) + ".")
    return "\n".join(lines)


def interval_words(estimate: Estimate, digits: int = 3) -> str:
    if not estimate.defined:
        return f"none ({estimate.method})"
    if not math.isfinite(estimate.lo):
        return f"{estimate.value:.{digits}f} ({estimate.method})"
    return f"{estimate.value:.{digits}f} [{estimate.lo:.{digits}f}, {estimate.hi:.{digits}f}]"


def erosion_state(estimate: Estimate, tolerance: float) -> str:
    """"erodes" (the drop's interval wholly above `tolerance`), "does not" (wholly below) or "cannot tell".
    A drop is never negative, so an interval above 0 alone would call noise erosion: the pages' tolerance."""
    if not (estimate.defined and math.isfinite(estimate.lo)):
        return "cannot tell"
    return "erodes" if estimate.lo > tolerance else "does not" if estimate.hi < tolerance else "cannot tell"


def cause_words(reading: SpikeReading, tolerance: float, until: str = "last") -> tuple[str, str]:
    """(the call, the sentence): what drives the erosion to `until` ("stop" or "last"), by the rule of the
    module docstring on each recipe's `erosion_state`."""
    drop = reading.drop_stop if until == "stop" else reading.drop_last
    state = {r: erosion_state(e, tolerance) for r, e in drop.items()}
    paper, no_wd, no_spikes = state.get("paper"), state.get("wd 0"), state.get("lr/10 after")
    said = "; ".join(f"{r}: {s}" for r, s in state.items())
    if paper == "does not":
        return "no erosion", f"the paper's recipe does not erode ({said}): nothing to attribute"
    if paper != "erodes":
        return "inconclusive", (f"the paper's recipe's drop cannot be told from the tolerance ({said}): whether there is an "
                                "erosion to attribute is not decided at this scale")
    if "cannot tell" in (no_wd, no_spikes) or None in (no_wd, no_spikes):
        return "inconclusive", f"{said}: this scale cannot attribute it"
    wd_runs_spike = reading.spiked.get("wd 0", (0, 0))[0] > 0
    if no_wd == "erodes" and no_spikes == "erodes":
        return "neither alone", f"{said}: it stays without weight decay and without spikes alike, so neither alone drives it"
    if no_wd == "erodes":
        return ("spike-driven" if wd_runs_spike else "not weight decay's",
                f"{said}: it stays without weight decay{', whose runs still spike,' if wd_runs_spike else ''} and goes "
                "with the spikes")
    if no_spikes == "erodes":
        return "weight-decay-driven", f"{said}: it goes without weight decay and stays without the spikes"
    return ("both", f"{said}: it goes without weight decay and without the spikes (whose recipe also cuts the decay "
                    "per step tenfold): weight decay drives it, with or through the spikes")


LOSS_WINDOW = 100  # steps whose largest batch loss the figure draws as one point: a spike keeps its height


def pooled_loss(curve: list[tuple[int, float]], window: int = LOSS_WINDOW) -> tuple[list[int], list[float]]:
    """(steps, losses): the largest loss of each `window` consecutive steps, at the window's first step."""
    steps, losses = [], []
    for i in range(0, len(curve), window):
        chunk = curve[i : i + window]
        steps.append(chunk[0][0])
        losses.append(max(loss for _, loss in chunk))
    return steps, losses


def study_panels(runs: list[StudyRun], label: str, loss_threshold: float, floor: float = DEFAULT_FLOOR,
                 losses: bool = True):
    """A figure: per recipe (columns), the metric at the kept states, the reading points marked (bottom),
    and with `losses` the batch loss of every seed above it (log scale, the largest in each window of
    LOSS_WINDOW steps; one page shows the losses, the others their metric alone)."""
    groups = by_recipe(runs)
    fig, axes = subplots(len(groups), 2 if losses else 1, width=3.3, height=2.2, sharex=True, sharey="row")
    for j, (recipe, rs) in enumerate(groups.items()):
        bottom = axes[-1][j]
        color = RECIPE_COLORS.get(recipe, COLORS["measured"])
        for r in rs:
            bottom.plot(r.steps, r.values, color=color, alpha=0.55, linewidth=1.0)
            for p, marker in POINT_MARKERS.items():
                if r.at.get(p) is not None and p != "last":
                    bottom.plot([r.points[p]], [r.at[p]], marker, color="black", markersize=4, alpha=0.8, label=POINT_LABELS[p])
        bottom.set(xlabel="training step", title=None if losses else recipe)
        if losses:
            top = axes[0][j]
            for r in rs:
                top.plot(*pooled_loss(r.loss_curve), color=color, alpha=0.55, linewidth=0.8)
            top.axhline(loss_threshold, color=COLORS["baseline"], linestyle=":", linewidth=1)
            top.axhline(floor, color=COLORS["bound"], linestyle=":", linewidth=1)
            top.set(yscale="log", title=recipe)
    if losses:
        axes[0][0].set_ylabel("batch loss")
    axes[-1][0].set_ylabel(label)
    handles, names = [], []
    for ax in axes[-1]:
        for h, n in zip(*ax.get_legend_handles_labels()):
            if n not in names:
                handles.append(h)
                names.append(n)
    fig.legend(handles, names, loc="outside lower center", ncols=min(len(names), 5))
    return fig


def spike_section(report, grid, R: int, d: int, seeds: list[int], steps: int, keep_every: int | None, cache_dir: Path,
                  analyse, name: str, params: dict, metric: str, label: str, tolerance: float, device: str = "cpu",
                  prefix: str = "spike", intro: str | None = None):
    """A mechanism page's section on its metric around the spike study's spikes: the study's kept runs
    (trained where exp-capacity, or the second grid's unit, has not), their states analysed, the table,
    the effects and the cause of the erosion shown, and every estimate reported (`{prefix}_mech_*`, the
    call as `{prefix}_erosion_cause_*`), after `intro` (Markdown) where it measures something.
    Returns (runs, reading), or None where it measures nothing (`keep_every` None, or a lease computing other cells)."""
    from geofact.pages.display import Markdown, display
    from geofact.training.grid import restriction
    from geofact.training.variants import kept_jobs, variant_runs

    cells = restriction()
    why = ("the spike study keeps no states (spike_keep_every is None)" if keep_every is None
           else "a lease computing other cells of the grid" if cells is not None
           and not (R in cells.get("R", [R]) and d in cells.get("d", [d])) else None)
    if why is not None:
        return _not_measured(report, prefix, why)
    if intro is not None:
        display(Markdown(intro))
    jobs = kept_jobs(grid, R, d, seeds, steps, keep_every)
    runs = read_study(jobs, variant_runs(jobs, Path(cache_dir) / "variants", device), Path(cache_dir) / "variants",
                      analyse, name, params, metric, device, desc=f"{label} at the spike study's states (N = {grid.N})")
    reading = spike_reading(runs, label)
    for key, value in reading.numbers().items():
        report.number(f"{prefix}_mech_{key}", value, glue=False)
    for until in ("stop", "last"):
        call, sentence = cause_words(reading, tolerance, until)
        report.number(f"{prefix}_erosion_cause_{until}", call)
        report.number(f"{prefix}_erosion_why_{until}", sentence)
    report.number(f"{prefix}_mech_cell", f"N = {grid.N}, R = {R}, d = {d}, {len(seeds)} seeds, {steps:,} steps")
    display(Markdown(f"**{label.capitalize()} at the reading points** (N = {grid.N}; mean over the runs that have the "
                     "point; drops: highest kept value minus the value there, Student t over seeds):\n\n"
                     + reading_table(runs, reading)))
    display(Markdown(f"**Around the first spike** (N = {grid.N}; paired by seed, 95% Student-t intervals):\n\n"
                     + effects_markdown(reading)))
    return runs, reading


def _not_measured(report, prefix: str, why: str) -> None:
    """A spike section that measures nothing: its numbers say so, and why (so a page's prose still reads)."""
    from geofact.pages.display import Markdown, display

    for until in ("stop", "last"):
        report.number(f"{prefix}_erosion_cause_{until}", "not measured")
        report.number(f"{prefix}_erosion_why_{until}", why)
    report.number(f"{prefix}_mech_cell", "not measured")
    display(Markdown(f"Not measured here: {why}."))
    return None


def second_spike_section(report, second_grids: list, cell: dict | None, steps: int, keep_every: int | None, cache_dir: Path,
                         analyse, name: str, params: dict, metric: str, label: str, tolerance: float, device: str = "cpu",
                         what: str = "the metric", losses_on: str | None = None):
    """`spike_section` at the second grid's N, reported as `spike_second_*` and told in prose around its
    tables (the same on every mechanism page): `cell` is a page's `spike_second`
    (geofact.training.variants.second_study), whose runs the second grid's unit trains beside exp-capacity;
    `what` names the page's metric in the closing sentence ("the selectivity"), `losses_on` the page that
    shows the study's losses (None: this one)."""
    from geofact.pages.display import Markdown, display
    from geofact.training.variants import second_study

    study = second_study(second_grids, cell)
    if study is None:
        why = "no second grid" if not second_grids else "no cell of the second grid is given (spike_second is None)"
        return _not_measured(report, "spike_second", why)
    grid, R, d, seeds = study
    intro = (f"Spikes, and an erosion, may be a property of the small $N$ (the second grid's runs spike less often, the "
             f"table above). `spike_second` names one cell of the second grid (here N = {grid.N}, R = {R}, d = {d}, "
             f"{len(seeds)} seeds, learned embeddings, no stop rule), trained under the three recipes above alone by the "
             "second grid's unit, and read by the same rule.")
    out = spike_section(report, grid, R, d, seeds, steps, keep_every, cache_dir, analyse, name, params, metric, label,
                        tolerance, device, prefix="spike_second", intro=intro)
    if out is not None:
        calls = {until: cause_words(out[1], tolerance, until) for until in ("last", "stop")}
        display(Markdown(f"At the second grid's $N$, erosion of {what} to the end of the budget: **{calls['last'][0]}** "
                         f"({calls['last'][1]}). To the stop rule: **{calls['stop'][0]}** ({calls['stop'][1]})."
                         + (f" Their losses are on {{doc}}`{losses_on}`." if losses_on else "")))
    return out
