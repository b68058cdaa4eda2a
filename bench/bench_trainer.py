"""Model-steps per second: the stacked trainer against the plain one-run-at-a-time loop, in one run.

Run: python bench/bench_trainer.py [--device cpu] [--runs 4] [--steps 20] [--d 32 128 512] [--ops] [--json] [--out FILE]
At the paper's shapes (N = 4096, batch 1024, R = 8); see geofact.training.benchmark for what is timed.
`--ops` also counts a single-hop step's dispatcher ops (views apart) and host reads (N = 512, R = 4,
d = 32, 4 runs: `step_ops`); `--json` prints the whole result as JSON, with `ratio` (stacked / plain at
the first d), `ops_per_step` and `syncs_per_step` at its top level.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from geofact.training.benchmark import benchmark, format_rows, step_ops


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--d", type=int, nargs="+", default=[32, 128, 512])
    parser.add_argument("--ops", action="store_true", help="count a step's dispatcher ops and host reads")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--out", type=Path, help="also write the result as JSON")
    args = parser.parse_args()
    result = benchmark(args.device, runs=args.runs, steps=args.steps, ds=tuple(args.d))
    first = result["rows"][0]
    result["ratio"] = first["stacked"] / first["plain"]
    if args.ops:
        result["ops"] = step_ops(args.device)
        result["ops_per_step"], result["syncs_per_step"] = result["ops"]["ops_per_step"], result["ops"]["syncs_per_step"]
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print("\n".join(format_rows(result)))
        if args.ops:
            o = result["ops"]
            print(f"single-hop step (N={o['N']}, R={o['R']}, d={o['d']}, {o['runs']} runs): {o['ops_per_step']:.1f} ops "
                  f"(+{o['views_per_step']:.1f} views), {o['syncs_per_step']:.3f} host reads per step")
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
