"""`geofact spikes`: the loss-spike rule (geofact.spikes) over run records wherever they lie:
a run cache (`.geofact/runs`, `.geofact/rounding/<p>/runs`) or a `geofact pack` archive of a GPU lease."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from geofact.ops.pack import read_run_records
from geofact.spikes import SpikeRule, sensitivity, spike_rows

CELL_FIELDS = ("N", "R", "d", "frozen_embeddings", "attention", "lr", "batch_size", "precision")  # a run's cell; multi-hop adds k, cot


def cell_of(record: dict) -> tuple:
    config = record["config"]
    extra = tuple(f"{k}={config[k]}" for k in ("k", "cot") if k in config)  # multi-hop runs
    return tuple(config.get(k) for k in CELL_FIELDS) + extra


def _loss(x: float) -> str:
    return f"{x:.2g}" if math.isfinite(x) else "inf/nan"


def report(sources: Sequence[Path], rule: SpikeRule) -> str:
    records = [r for s in sources for r in read_run_records(s)]
    if not records:
        raise ValueError(f"no run records with a loss curve in {', '.join(str(s) for s in sources)}")
    lines = [f"{len(records)} runs with a loss curve; spike: running minimum below a floor, then the loss above a factor "
             "x that minimum", "", "floor    factor  memorised  spiked  not back by the end"]
    for c in sensitivity(records, floors=sorted({2e-4, 3e-4, 1e-3, rule.floor}),
                         factors=sorted({3.0, 10.0, 100.0, 1000.0, rule.factor})):
        mark = "  <- the rule" if (c.floor, c.factor) == (rule.floor, rule.factor) else ""
        lines.append(f"{c.floor:<8.0e} {c.factor:<7g} {c.memorised:>9}  {c.spiked:>6}  {c.unrecovered:>6}{mark}")
    rows = spike_rows({(cell_of(r), r["config"].get("seed"), i): r for i, r in enumerate(records)}, rule)
    lines += ["", f"spiking runs at floor {rule.floor:g}, factor {rule.factor:g} ({len(rows)}):",
              "  " + "  ".join(CELL_FIELDS) + "  seed | spikes  first at  highest: min before -> peak (x) at step"
              "  back  met stop rule  steps  last loss"]
    for row in sorted(rows, key=lambda r: (str(r["run"][0]), r["run"][1])):
        cell, seed, _ = row["run"]
        lines.append(f"  {' '.join(str(c) for c in cell)}  {seed} | {row['spikes']}  {row['first_start']}  "
                     f"{_loss(row['base'])} -> {_loss(row['peak'])} ({row['height']:.3g}x) at {row['peak_step']}  "
                     f"{'yes' if row['recovered'] else 'no'}  {'yes' if row['stopped_early'] else 'no'}  "
                     f"{row['steps']}  {_loss(row['last_loss'])}")
    return "\n".join(lines) + "\n"
