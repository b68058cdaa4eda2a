"""`geofact spikes`: the loss-spike rule (geofact.spikes) over run records wherever they lie:
a run cache (`.geofact/runs`, `.geofact/rounding/<p>/runs`) or a `geofact pack` archive of a GPU lease."""

from __future__ import annotations

import io
import json
import math
import tarfile
from collections.abc import Sequence
from pathlib import Path

from geofact.spikes import SpikeRule, sensitivity, spike_rows

CELL_FIELDS = ("N", "R", "d", "frozen_embeddings", "attention", "lr", "batch_size", "precision")  # a run's cell; multi-hop adds k, cot


def read_run_records(source: Path) -> list[dict]:
    """The run records (JSON with a loss curve) of a run-cache folder or a pack archive (or its parts)."""
    source = Path(source)
    if source.is_dir():
        texts = [p.read_text() for p in sorted(source.glob("*.json"))]
    else:
        from geofact.ops.pack import read_archive

        _, data = read_archive([source])
        with tarfile.open(fileobj=io.BytesIO(data)) as archive:
            members = [m for m in archive.getmembers() if m.isfile() and m.name.endswith(".json")
                       and Path(m.name).parent.name == "runs"]
            texts = [archive.extractfile(m).read().decode() for m in members]
    records = [json.loads(t) for t in texts]
    return [r for r in records if isinstance(r, dict) and r.get("loss_curve") and "config" in r]


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
