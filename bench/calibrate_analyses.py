"""Refit a card's price of the mechanism pages' analyses to the states it analysed (issue 47, item 5).

Run: python bench/calibrate_analyses.py --card h100 [--bench analyses.jsonl ...] [--dry-run]

`geofact plan` prices an analysed state by its counted work at the rates fitted to the card's timed training steps
(geofact.ops.costs.Analysis), and its loading at an assumed host rate (LOAD_BYTES_PER_SECOND). Every state a lease
analyses records its wall seconds (geofact.analysis.trajectory), and bench/bench_analyses.py times one state of each
analysis at the paper's shapes on a lease's first minute. This script sets those seconds against the plan's price of
the same states, on that card alone (an H200's states never refit an H100's plan), and stores, per analysis, the
ratio of the measured seconds to the priced ones (`Calibration.analysis_factors`; "load" for the states' loading) in
the card's calibration (bench/calibration/cuda-<card>.json), with the states it was fitted to counted beside it.
An analysis timed on fewer than MIN_TIMED_STATES states keeps its price. The plan then scales each analysis by its
factor, and `geofact plan --check` shows the refitted price against every timed state.

The states are the analysis records of the run cache and of every lease archive (geofact.ops.costs.analysis_records,
a process's first state of a shape left out as its warm-up), and the rows of each --bench file (bench_analyses.py
--json; each row's median after a warm-up; its "load" row times one load of the state).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

from geofact.ops.calibration import Calibration, calibration_path, card_of, stored_cards
from geofact.ops.costs import (MIN_TIMED_STATES, STATE_WORK, analysis_records, analysis_totals, fit_analysis_factors,
                                timed_states)
from geofact.provenance import git_commit
from geofact.store import write_json
from geofact.training.config import TrainConfig

ROOT = Path(__file__).resolve().parents[1]


def bench_records(rows: list[dict]) -> list[dict]:
    """bench_analyses.py's rows as analysis records: each analysis of a state (its trained step, `steps`), the
    state's "load" row's seconds on the first analysis of its shape, the others' loading untimed."""
    loads = {(r["device"], r["N"], r["R"], r["d"]): r["seconds"] for r in rows if r["analysis"] == "load"}
    records, seen = [], set()
    for r in rows:
        if r["analysis"] not in STATE_WORK:
            continue
        shape = (r["device"], r["N"], r["R"], r["d"])
        config = TrainConfig(N=r["N"], R=r["R"], d=r["d"], batch_size=min(1024, r["N"] * r["R"]), max_steps=r["steps"],
                             lr=1e-3, loss_threshold=0.0)  # bench_analyses.trained's recipe
        load = None
        if shape not in seen and r["analysis"] != "accuracy":
            load = loads.get(shape)
            seen.add(shape)
        records.append({"analysis": r["analysis"], "config": config.as_dict(), "params": r.get("params", {}),
                        "step": r["steps"], "seconds": {"analysis": r["seconds"], "load": load, "warm": True},
                        "provenance": {"device": r["device"]}})
    return records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--card", required=True, help="the card whose analyses to refit (e.g. h100)")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--bench", type=Path, nargs="*", default=[], help="bench_analyses.py --json outputs")
    parser.add_argument("--dry-run", action="store_true", help="print the factors without storing them")
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout whose records and calibration to use")
    args = parser.parse_args()
    cards = stored_cards(args.root, args.device)
    if args.card not in cards:
        raise SystemExit(f"--card must be one of the calibrated {args.device} cards {cards}, got {args.card!r}")
    path = calibration_path(args.root, args.device, args.card)
    stored = json.loads(path.read_text())
    plain = replace(Calibration.from_dict(stored["calibration"]), analysis_factors=None)
    rows = [json.loads(line) for file in args.bench for line in file.read_text().splitlines() if line.strip()]
    states, skipped = timed_states(analysis_records(args.root) + bench_records(rows), plain, args.device)
    states = [st for st in states if card_of(st.device) == args.card]
    factors = fit_analysis_factors(states)
    for name, (measured, priced, n) in sorted(analysis_totals(states).items()):
        fitted = f"factor {factors[name][0]:.2f}" if name in factors else "not refitted (too few states)"
        print(f"{name}: {n} states, {measured:.2f} s measured, {priced:.2f} s priced: {fitted}")
    for why, n in sorted(skipped.items()):
        print(f"left out: {n} states, {why}")
    if not factors:
        raise SystemExit(f"no analysis timed on {args.card} on {MIN_TIMED_STATES} states or more: nothing to refit")
    if args.dry_run:
        return
    calibration = replace(plain, analysis_factors={name: factor for name, (factor, _) in factors.items()})
    write_json(path, {**stored, "calibration": calibration.as_dict(),
                      "analysis_states": {name: n for name, (_, n) in factors.items()},
                      "analyses_refitted_at": git_commit(args.root)})
    print(f"-> {path}")


if __name__ == "__main__":
    main()
