"""Model-steps per second: the stacked trainer against the plain one-run-at-a-time loop, in one run.

Run: python bench/bench_trainer.py [--device cpu] [--runs 4] [--steps 20] [--d 32 128 512] [--out FILE]
At the paper's shapes (N = 4096, batch 1024, R = 8); see geofact.training.benchmark for what is timed.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from geofact.training.benchmark import benchmark, format_rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--d", type=int, nargs="+", default=[32, 128, 512])
    parser.add_argument("--out", type=Path, help="also write the result as JSON")
    args = parser.parse_args()
    result = benchmark(args.device, runs=args.runs, steps=args.steps, ds=tuple(args.d))
    print("\n".join(format_rows(result)))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
