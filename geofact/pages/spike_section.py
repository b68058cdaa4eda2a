"""The mechanism pages' loss-spike tables, one call: the runs of every grid a page reads (the capacity
grid and the second grid), by geofact.spikes' rule, headroom against each grid's learned threshold."""

from __future__ import annotations

from geofact.analysis.judging import grid_state
from geofact.pages.display import Markdown, display
from geofact.pages.spikes import cells_markdown, grid_runs, numbers, sensitivity_markdown
from geofact.spikes import RunSpikes, SpikeRule
from geofact.training.grid import REGIMES


def spike_tables(report, grids: list, records_by_grid: list[dict], min_headroom: float,
                 rule: SpikeRule = SpikeRule()) -> tuple[dict, dict[tuple, RunSpikes]]:
    """Show the rule's sensitivity table and the spiking runs by cell; report `spike_<count>` numbers and
    the rule's floor and factor; returns the records and their readings keyed (N, regime, R, d, seed)."""
    thresholds = [{(name, R): t for name in REGIMES for R, t in zip(g.R_values, grid_state(g, r, [min_headroom]).d_min)}
                  for g, r in zip(grids, records_by_grid)]
    records, runs, headroom = grid_runs(grids, records_by_grid, thresholds, rule)
    report.number("spike_rule_floor", rule.floor)
    report.number("spike_rule_factor", rule.factor)
    display(Markdown(sensitivity_markdown(list(records.values()), rule)))
    display(Markdown(cells_markdown(runs, headroom)))
    for name, value in numbers(runs).items():
        report.number(f"spike_{name}", value)
    return records, runs
