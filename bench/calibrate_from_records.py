"""Refit a device's plan calibration to the groups it actually trained.

Run: python bench/calibrate_from_records.py --device cuda [--card h100] [--runs-dir .geofact/runs]
     python bench/calibrate_from_records.py --device cuda --card h200 --peak 67e12 --ops-per-step 89.5

`bench_trainer.py --calibrate` fits `geofact plan`'s cost model to short benchmark timings. On a GPU those
are poor evidence: twenty steps do not amortise a stack's CUDA graph capture, and four runs a stack are
not the forty-two the paper's grid stacks (the H100 lease of 2026-11-26 measured 7 ms a step for four
runs at d = 32 in the benchmark, 8.8 ms for forty-two in the grid, and the fit then predicted the grid
at 4.8x its measured time). The run cache's records say how long each group really took
(`group_seconds`, `group_size`, the runs' steps): this script refits the calibration to those groups and
to the benchmark's steady small-shape timings (`small_steps`), leaving its short stacked rates out, and
stores it in place of the old one (`bench/calibration/<device>-<card>.json`, the groups it was fitted to beside
it). It prints each group's measured and refitted minutes. The records are the run cache's and every lease
archive's (`geofact.ops.costs.run_records`), or those of --runs-dir.

A card that trained groups on a lease but never ran the benchmark (the H200 of 2026-11-27 and 2026-11-28) is
calibrated from its groups alone: `--peak` is then its float32 matmul peak (the data sheet's: the fit caps the
matmul rate there, the groups not identifying it) and `--ops-per-step` the step's dispatched ops (counted by
bench_trainer.py --ops on the H100 lease: 89.5), and the file says so.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from dataclasses import replace
from pathlib import Path

from geofact.provenance import git_commit
from geofact.store import write_json
from geofact.training.config import TrainConfig
from geofact.ops.calibration import calibration_path, card_of, fit, group_timings, stored_cards, without_analysis_factors
from geofact.ops.costs import run_records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda", help="the device kind whose calibration to refit (default: cuda)")
    parser.add_argument("--runs-dir", type=Path, default=None, help="the run cache (default: .geofact/runs of this checkout)")
    parser.add_argument("--card", default=None, help="the card whose calibration to refit (e.g. h100; default: the only one stored)")
    parser.add_argument("--peak", type=float, default=None,
                        help="a card never benchmarked: its float32 matmul peak in FLOP/s (e.g. the data sheet's 67e12)")
    parser.add_argument("--ops-per-step", type=float, default=None, help="with --peak: the step's dispatched ops")
    args = parser.parse_args()
    root = Path(__file__).resolve().parents[1]
    cards = stored_cards(root, args.device)
    if args.card is None and len(cards) > 1:
        raise SystemExit(f"calibrations of several cards are stored ({', '.join(cards)}): name one with --card")
    path = calibration_path(root, args.device, args.card if args.card is not None else (cards[0] if cards else ""))
    records = ([json.loads(p.read_text()) for p in sorted(Path(args.runs_dir).glob("*.json"))] if args.runs_dir
               else run_records(root))
    if args.peak is not None:  # a card never benchmarked: its groups alone
        if args.card is None or args.ops_per_step is None:
            raise SystemExit("--peak calibrates a card from its groups alone: name it (--card) and give --ops-per-step")
        made_on = sorted({(r.get("provenance") or {}).get("device", "") for r in records
                          if card_of((r.get("provenance") or {}).get("device", "")) == args.card})
        if len(made_on) != 1:
            raise SystemExit(f"--card {args.card}: the records name {len(made_on)} devices of that card ({made_on}), need one")
        stored = {"bench": {"device": made_on[0], "matmul_peak_flops": args.peak, "ops_per_step": args.ops_per_step,
                            "threads": 0, "benchmarked": False}}
    elif not path.exists():
        raise SystemExit(f"no calibration at {path}: run bench/bench_trainer.py --device {args.device} --calibrate on it first"
                         " (or, for a card that trained groups, --peak and --ops-per-step)")
    else:
        stored = without_analysis_factors(json.loads(path.read_text()))  # fitted against the rates refitted here
    bench = stored["bench"]
    groups = group_timings(records, bench["device"])  # the calibrated card's groups alone (an H100's, not an H200's)
    if not groups:
        raise SystemExit(f"no trained groups made on {bench['device']!r} among the {len(records)} records")
    small = [(TrainConfig(**s["config"]), s["runs"], s["seconds"]) for s in bench.get("small_steps", [])]
    precision = Counter(c.precision for c, *_ in groups).most_common(1)[0][0]
    calibration = fit(bench, bench["ops_per_step"], small + groups, precision=precision, bench_rows=False)
    timings = (f"{len(small)} small-shape timings of bench_trainer.py" if bench.get("benchmarked", True)
               else f"no benchmark (the float32 peak given, {bench['matmul_peak_flops'] / 1e12:.0f} TFLOP/s, caps the matmul rate)")
    calibration = replace(calibration, source=(
        f"refitted to {len(groups)} groups trained on {bench['device']} (run records) and {timings}; "
        f"{calibration.source.split(': ', 1)[1]}"))
    for config, runs, seconds in groups:
        predicted = calibration.step_seconds(config, runs)
        print(f"N={config.N} d={config.d} B={config.batch_size} {config.precision}, {runs:.1f} runs: "
              f"{seconds * 1e3:.2f} ms a step measured, {predicted * 1e3:.2f} refitted")
    write_json(path, {**stored, "calibration": calibration.as_dict(),
                      "groups": [{"config": c.as_dict(), "runs": runs, "seconds": t} for c, runs, t in groups],
                      "refitted_at": git_commit(root)})
    print(f"calibration: {calibration.matmul_flops[precision] / 1e12:.2f} TFLOP/s ({precision}), "
          f"{calibration.bandwidth / 1e9:.0f} GB/s, {calibration.op_seconds * 1e6:.1f} us/op ({calibration.source}) -> {path}")


if __name__ == "__main__":
    main()
