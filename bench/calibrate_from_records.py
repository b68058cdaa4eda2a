"""Refit a device's plan calibration to the groups it actually trained.

Run: python bench/calibrate_from_records.py --device cuda [--runs-dir .geofact/runs]

`bench_trainer.py --calibrate` fits `geofact plan`'s cost model to short benchmark timings. On a GPU those
are poor evidence: twenty steps do not amortise a stack's CUDA graph capture, and four runs a stack are
not the forty-two the paper's grid stacks (the H100 lease of 2026-11-26 measured 7 ms a step for four
runs at d = 32 in the benchmark, 8.8 ms for forty-two in the grid, and the fit then predicted the grid
at 4.8x its measured time). The run cache's records say how long each group really took
(`group_seconds`, `group_size`, the runs' steps): this script refits the calibration to those groups and
to the benchmark's steady small-shape timings (`small_steps`), leaving its short stacked rates out, and
stores it in place of the old one (`bench/calibration/<device>-<card>.json`, the groups it was fitted to beside
it). It prints each group's measured and refitted minutes.
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
from geofact.ops.calibration import calibration_path, fit, group_timings, stored_cards


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda", help="the device kind whose calibration to refit (default: cuda)")
    parser.add_argument("--runs-dir", type=Path, default=None, help="the run cache (default: .geofact/runs of this checkout)")
    parser.add_argument("--card", default=None, help="the card whose calibration to refit (e.g. h100; default: the only one stored)")
    args = parser.parse_args()
    root = Path(__file__).resolve().parents[1]
    cards = stored_cards(root, args.device)
    if args.card is None and len(cards) > 1:
        raise SystemExit(f"calibrations of several cards are stored ({', '.join(cards)}): name one with --card")
    path = calibration_path(root, args.device, args.card if args.card is not None else (cards[0] if cards else ""))
    if not path.exists():
        raise SystemExit(f"no calibration at {path}: run bench/bench_trainer.py --device {args.device} --calibrate on it first")
    stored = json.loads(path.read_text())
    bench = stored["bench"]
    runs_dir = args.runs_dir or root / ".geofact" / "runs"
    records = [json.loads(p.read_text()) for p in sorted(Path(runs_dir).glob("*.json"))]
    groups = group_timings(records, bench["device"])  # the benchmarked card's groups alone (an H100's, not an H200's)
    if not groups:
        raise SystemExit(f"no trained groups made on {bench['device']!r} among the {len(records)} records in {runs_dir}")
    small = [(TrainConfig(**s["config"]), s["runs"], s["seconds"]) for s in bench.get("small_steps", [])]
    precision = Counter(c.precision for c, *_ in groups).most_common(1)[0][0]
    calibration = fit(bench, bench["ops_per_step"], small + groups, precision=precision, bench_rows=False)
    calibration = replace(calibration, source=(
        f"refitted to {len(groups)} groups trained on {bench['device']} (run records) and {len(small)} small-shape "
        f"timings of bench_trainer.py; {calibration.source.split(': ', 1)[1]}"))
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
