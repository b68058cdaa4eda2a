"""The mechanism along training, per cell: a metric's peak over a run's kept states, its value at the
stop rule, and the drop between them (issue 34, item 3).

Section 5.1 measures readout, selectivity and transfer once, after training. Whether the structure it
describes is a property of the converged model or of a moment in training shows in each run's
course: the three mechanism pages take it at every checkpoint (geofact.analysis.trajectory) of two
grids, the capacity grid and a second one at a larger N (`geofact.training.grid.ladder_grids`).

    cells = cell_courses(grid, points, "s", state, min_headroom)   # one CellCourse per (regime, R, d)
    test = erosion_test(cells, "learned", tolerance)                # pooled over the judged cells' runs
    drop_panels(axes, {128: cells_128, 512: cells_512}, "readout from s_x")

The peak is the largest of a run's measured states (checkpoints and stop): a maximum of noisy
measurements, it sits above the run's true best by about the measurement's noise, so the drop from it
is never negative and a small one is not erosion. `erosion_test` therefore calls a drop erosion only
beyond a tolerance, and `tolerance_table` shows how that call moves with it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from matplotlib import pyplot as plt

from geofact.evidence import Contrast, Estimate, Range, t_interval
from geofact.pages.legends import legend
from geofact.pages.plotting import subplots
from geofact.training.grid import REGIMES, CapacityGrid

MARKERS = ("o", "s", "^", "D")  # one per N, in increasing N


@dataclass(frozen=True)
class CellCourse:
    """One (regime, R, d) cell's metric along training, over its seeds."""

    N: int
    regime: str
    R: int
    d: int
    headroom: float  # d / d_min(R), the learned threshold (NaN where none on the grid)
    judged: bool  # in the population the page judges (sufficient capacity)
    peaks: tuple[float, ...]  # per seed: the largest value over its states
    peak_steps: tuple[int, ...]  # per seed: the step of that state
    stops: tuple[float, ...]  # per seed: the value at the stop rule (or the step budget)
    # per seed: the metric's range (max - min) over the run's tail states and its stop; empty where the grid
    # keeps no tail (its `keep_tail`: (every, count), TrainConfig.keep_tail)
    tails: tuple[float, ...] = ()
    keep_tail: tuple[int, int] | None = None

    @property
    def drops(self) -> np.ndarray:
        return np.asarray(self.peaks) - np.asarray(self.stops)

    def estimate(self, what: str, confidence: float = 0.95) -> Estimate:
        """"peak", "stop" or "drop" over the cell's seeds, with its Student-t interval."""
        values = {"peak": self.peaks, "stop": self.stops, "drop": self.drops}[what]
        return t_interval(values, f"{what} at N={self.N}, {self.regime}, R={self.R}, d={self.d}", confidence, unit="seeds")


def grid_cells(grids: list[CapacityGrid], cache_dir, analyse, name: str, params: dict, metric: str, min_headroom: float,
               device: str = "cpu", desc: str = "analyses") -> dict[int, list[CellCourse]]:
    """{N: cells} of `metric` over the second grid's capacity grids (geofact.training.grid.ladder_grids):
    each trained (what is missing), `analyse` cached at every state as the page's own analysis is
    (geofact.analysis.trajectory), and its cells judged at `min_headroom`; one line per grid says its
    threshold and how many runs met the stop rule."""
    from geofact.analysis.judging import grid_state
    from geofact.analysis.trajectory import analyse_grid, train_grids

    cells: dict[int, list[CellCourse]] = {}
    for grid, records in zip(grids, train_grids(grids, cache_dir, device)):
        state = grid_state(grid, records, [min_headroom])
        points = analyse_grid(grid, records, cache_dir, analyse, name, params, device=device,
                              desc=f"{desc} at N={grid.N}, R={grid.R_values[0]}")
        cells.setdefault(grid.N, []).extend(cell_courses(grid, points, metric, state.headroom, state.population[min_headroom]))
        print(f"N={grid.N}, R={grid.R_values[0]}: learned d_min {state.d_min[0]} on d = {list(grid.d_values)}; "
              f"{sum(r['stopped_early'] for r in records.values())} of {len(records)} runs met the stop rule")
    return cells


def courses_by_n(grid: CapacityGrid, points: dict, metric: str, headroom: np.ndarray, judged: np.ndarray,
                 second_grids: list[CapacityGrid], cache_dir, analyse, name: str, params: dict, min_headroom: float,
                 device: str = "cpu", desc: str = "analyses") -> dict[int, list[CellCourse]]:
    """{N: cells} of `metric`: the page's own grid's (`cell_courses` of its points, headroom and judged cells)
    and the second grid's at their N (`grid_cells`, the same analysis cached as `name` with `params`)."""
    cells_by_n = {grid.N: cell_courses(grid, points, metric, headroom, judged)}
    for N, cells in grid_cells(second_grids, cache_dir, analyse, name, params, metric, min_headroom, device, desc).items():
        cells_by_n.setdefault(N, []).extend(cells)
    return cells_by_n


def run_course(points: list, metric: str) -> tuple[float, int, float]:
    """(peak, step of the peak, value at the stop) of one run's states (geofact.analysis.trajectory.Point,
    sorted by step, the stop last)."""
    values = [p.get(metric) for p in points]
    best = int(np.argmax(values))
    return float(values[best]), int(points[best].step), float(values[-1])


def tail_range(points: list, metric: str, tail: tuple[int, ...]) -> float:
    """The range (max - min) of a metric over a run's tail states (the steps `tail`) and its stop (the last point)."""
    values = [p.get(metric) for p in points if not p.final and p.step in tail] + [points[-1].get(metric)]
    return float(max(values) - min(values))


def cell_courses(grid: CapacityGrid, points: dict, metric: str, headroom: np.ndarray, judged: np.ndarray) -> list[CellCourse]:
    """Every cell of `grid` (points: {(regime, R, d, seed): [Point]}); `headroom` and `judged` are (R, d)
    arrays (geofact.analysis.judging.grid_state: .headroom, .population[h])."""
    cells, configs = [], grid.configs()
    for regime in REGIMES:
        for i, R in enumerate(grid.R_values):
            for j, d in enumerate(grid.d_values):
                runs = [(points[regime, R, d, s], configs[regime, R, d, s]) for s in grid.seeds]
                # the peak over the grid's checkpoints and the stop alone: a maximum over the tail's readings too
                # would sit higher by their noise, and drops at two N with and without a tail would not compare
                peaks, steps, stops = zip(*(run_course([p for p in pts if p.final or p.step in grid.checkpoints], metric)
                                            for pts, _ in runs))
                tails = tuple(tail_range(pts, metric, c.tail_steps(pts[-1].step)) for pts, c in runs) if grid.keep_tail else ()
                cells.append(CellCourse(grid.N, regime, R, d, float(headroom[i, j]), bool(judged[i, j]), peaks, steps, stops,
                                        tails, grid.keep_tail))
    return cells


def tail_summary(cells_by_n: dict[int, list[CellCourse]], label: str, tolerance: float) -> tuple[str, dict]:
    """Does the stop read the end of training? Per (N, regime) with a tail: the range of the metric over each
    judged run's tail states and its stop (median, largest) and how many runs' range reaches `tolerance`
    (Markdown, and the numbers it reports). A range over a few noisy readings bounds the metric's movement
    from above: it is the noise where the metric does not move."""
    lines, reported, kept = [], {}, set()
    for N, cells in cells_by_n.items():
        kept |= {c.keep_tail for c in cells if c.tails}
        for regime in REGIMES:
            ranges = [t for c in cells if c.judged and c.regime == regime for t in c.tails]
            if not ranges:
                continue
            over = sum(t >= tolerance for t in ranges)
            reported[f"N={N} {regime}"] = {"median": float(np.median(ranges)), "max": float(max(ranges)), "n": len(ranges),
                                           "at_least_tolerance": int(over)}
            lines.append(f"- N = {N}, {regime}: median range {np.median(ranges):.3f}, largest {max(ranges):.3f}, over "
                         f"{len(ranges)} judged runs; {over} of them {tolerance:g} or more.")
    if not lines:
        return "", reported
    (every, count), = kept  # one tail for the grids of a page (trajectory_grid)
    text = (f"**Does the stop read the end of training?** Each run keeps its states at the last {count} multiples of "
            f"{every} steps before its stop (`TrainConfig.keep_tail`); the range of the {label} over those states and the "
            f"stop says how much it moves while the run ends (a range over up to {count + 1} noisy readings is an upper bound "
            f"on that movement), against the erosion tolerance {tolerance:g}:\n\n" + "\n".join(lines))
    return text, reported


def pooled(cells: list[CellCourse], regime: str, what: str = "drop", confidence: float = 0.95) -> Estimate:
    """`what` ("peak", "stop", "drop") over every run of the judged cells of one regime (a run is the unit)."""
    N = sorted({c.N for c in cells})
    values = [v for c in cells if c.judged and c.regime == regime
              for v in {"peak": c.peaks, "stop": c.stops, "drop": c.drops}[what]]
    quantity = f"mean {what} over the judged {regime} runs at N={'/'.join(map(str, N))}"
    if not values:
        return Estimate.missing(quantity, "no judged cell", confidence)
    return t_interval(values, quantity, confidence, unit="runs")


def erosion_test(cells: list[CellCourse], regime: str, tolerance: float, confidence: float = 0.95) -> Contrast:
    """Does the structure persist to the stop rule? The claim "persists" predicts a mean drop from the peak
    below `tolerance`, its alternative "erodes" a drop of at least that."""
    if tolerance <= 0:
        raise ValueError(f"tolerance must be > 0, got {tolerance}")
    return Contrast(pooled(cells, regime, "drop", confidence), Range(-math.inf, tolerance, "persists to the stop"),
                    Range(tolerance, math.inf, "erodes"))


def tolerance_table(cells_by_n: dict[int, list[CellCourse]], tolerances: list[float], confidence: float = 0.95) -> str:
    """The erosion verdict per (N, regime) at each tolerance, as a Markdown table."""
    lines = ["| N | regime | mean drop [interval] | " + " | ".join(f"tolerance {t:g}" for t in tolerances) + " |",
             "|---|---|---|" + "---|" * len(tolerances)]
    for N, cells in cells_by_n.items():
        for regime in REGIMES:
            e = pooled(cells, regime, "drop", confidence)
            value = f"{e.value:.3f} [{e.lo:.3f}, {e.hi:.3f}] (n = {e.n})" if e.defined else e.method
            lines.append(f"| {N} | {regime} | {value} | " + " | ".join(erosion_test(cells, regime, t, confidence).verdict
                                                                        for t in tolerances) + " |")
    return "\n".join(lines)


def course_table(cells: list[CellCourse], digits: int = 3) -> str:
    """Per cell: headroom, peak, its median step, stop and drop with their 95% Student-t intervals over seeds, as Markdown."""
    def cell(e: Estimate) -> str:
        return f"{e.value:.{digits}f} [{e.lo:.2f}, {e.hi:.2f}]" if e.defined else f"{e.value:.{digits}f}"

    lines = ["| N | regime | R | d | d/d_min | judged | peak | at step | stop | drop |", "|---|---|---|---|---|---|---|---|---|---|"]
    for c in cells:
        headroom = f"{c.headroom:.2g}" if math.isfinite(c.headroom) else "-"
        lines.append(f"| {c.N} | {c.regime} | {c.R} | {c.d} | {headroom} | {'yes' if c.judged else 'no'} | "
                     f"{cell(c.estimate('peak'))} | {int(np.median(c.peak_steps))} | {cell(c.estimate('stop'))} | "
                     f"{cell(c.estimate('drop'))} |")
    return "\n".join(lines)


def cells_meeting(cells: list[CellCourse], regime: str, cutoff: float) -> dict[str, int]:
    """How many judged cells of a regime have a mean over seeds >= cutoff at the peak and at the stop, of how many."""
    judged = [c for c in cells if c.judged and c.regime == regime]
    return {"peak": sum(np.mean(c.peaks) >= cutoff for c in judged), "stop": sum(np.mean(c.stops) >= cutoff for c in judged),
            "of": len(judged)}


def drop_panels(axes, cells_by_n: dict[int, list[CellCourse]], label: str, tolerance: float | None = None) -> None:
    """One panel per regime: each cell's drop (mean over seeds, bar: min to max) against headroom, one
    colour per R and one marker per N; hollow markers are cells outside the judged population."""
    if len(axes) != len(REGIMES):
        raise ValueError(f"drop_panels needs one axis per regime ({len(REGIMES)}), got {len(axes)}")
    Rs = sorted({c.R for cells in cells_by_n.values() for c in cells})
    colors = {R: plt.get_cmap("viridis")(i / max(1, len(Rs) - 1)) for i, R in enumerate(Rs)}  # as curves.r_colors
    for ax, regime in zip(axes, REGIMES):
        shown = 0
        for (N, cells), marker in zip(sorted(cells_by_n.items()), MARKERS):
            for c in cells:
                if c.regime != regime or not math.isfinite(c.headroom):
                    continue
                shown += 1
                drops = c.drops
                ax.errorbar([c.headroom], [drops.mean()], yerr=[[drops.mean() - drops.min()], [drops.max() - drops.mean()]],
                            fmt=marker, color=colors[c.R], mfc=colors[c.R] if c.judged else "none", capsize=2, markersize=5)
        for R in Rs:
            ax.plot([], [], "o", color=colors[R], label=f"R={R}")
        for N, marker in zip(sorted(cells_by_n), MARKERS):
            ax.plot([], [], marker, color="black", mfc="none", label=f"N={N}")
        if tolerance is not None:
            ax.axhline(tolerance, color="black", linestyle=":", linewidth=1, label=f"tolerance {tolerance:g}")
        ax.set(xscale="log" if shown else "linear", xlabel="headroom d / d_min(R) (learned threshold)",
               ylabel=f"drop of {label}: peak - stop", title=f"{regime} embeddings" + ("" if shown else ": no threshold on the grid"))
        legend(ax, ncol=2, title="filled: judged cells")


def drop_figure(cells_by_n: dict[int, list[CellCourse]], label: str, tolerance: float | None = None) -> None:
    """The drops of `drop_panels`, one row of panels (learned, frozen), shown."""
    fig, axes = subplots(2, 1, width=5.0, height=3.8, sharey=True)
    drop_panels(axes[0], cells_by_n, label, tolerance)
    plt.show()


def erosion_summary(cells_by_n: dict[int, list[CellCourse]], label: str, tolerance: float, tolerances: list[float],
                    cutoff: float, cutoff_label: str) -> tuple[str, dict]:
    """The page's account of a metric along training (Markdown) and what it reports: per (N, regime) the
    erosion test, its largest judged cell, and how many judged cells meet the verdict's `cutoff` at the
    peak and at the stop; then the tolerance table, every judged cell and, where the grid keeps a tail,
    how much the metric moves over it (`tail_summary`)."""
    lines, reported = [], {}
    for N, cells in cells_by_n.items():
        for regime in REGIMES:
            test, meeting = erosion_test(cells, regime, tolerance), cells_meeting(cells, regime, cutoff)
            reported[f"N={N} {regime}"] = {"erosion": test.as_dict(), f"{cutoff_label} at peak and stop": meeting}
            e = test.estimate
            if not e.defined:
                lines.append(f"- N = {N}, {regime}: {e.method}.")
                continue
            worst = max((c for c in cells if c.judged and c.regime == regime), key=lambda c: c.drops.mean())
            lines.append(f"- N = {N}, {regime}: mean drop {e.value:.3f} [{e.lo:.3f}, {e.hi:.3f}] over {e.n} runs: "
                         f"**{test.verdict}**; the largest in R = {worst.R}, d = {worst.d} (headroom {worst.headroom:.2g}): "
                         f"{np.mean(worst.peaks):.3f} at the peak, {np.mean(worst.stops):.3f} at the stop. Judged cells "
                         f"{cutoff_label} (mean over seeds >= {cutoff:g}): {meeting['peak']} of {meeting['of']} at the peak, "
                         f"{meeting['stop']} at the stop.")
    text = (f"**Does the {label} persist to the stop rule?** (persists: a mean drop below {tolerance:g}; 95% intervals over runs)\n\n"
            + "\n".join(lines) + "\n\nHow the call moves with the tolerance:\n\n" + tolerance_table(cells_by_n, tolerances)
            + "\n\nEvery judged cell: peak, stop and drop with their 95% Student-t intervals over seeds (the step is the "
            "median over seeds of the peak's step):\n\n" + course_table([c for cells in cells_by_n.values() for c in cells if c.judged]))
    tail_text, tails = tail_summary(cells_by_n, label, tolerance)
    if tails:
        text += "\n\n" + tail_text
        reported["tail"] = tails
    return text, reported
