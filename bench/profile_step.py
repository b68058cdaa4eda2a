"""Where a stacked step's device time goes, op by op, against the bytes each op was counted to move
(geofact.ops.step_profile): the paper's stack (N = 4096, batch 1024, 42 runs) at each --d, its ops' own device time a
step (torch's profiler over --steps eager steps), their counted bytes and the rate that makes, and the step as a CUDA
graph replays it.

Run: python bench/profile_step.py [--device cuda] [--d 32 768] [--runs 42] [--N 4096] [--precision tf32]
                                  [--steps 10] [--top 15] [--json]
     python bench/profile_step.py --read profile.jsonl   # a lease's rows, as text
--json prints one JSON object a shape, flushed as each is done. The counts are the GPU's step (fake `meta` tensors
take its switches), so on a CPU, whose step differs (its softmax, torch's kernels), some ops have no count.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from geofact.ops.step_profile import rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--d", type=int, nargs="+", default=[32, 768])
    parser.add_argument("--runs", type=int, default=42)
    parser.add_argument("--N", type=int, default=4096)
    parser.add_argument("--precision", default="tf32")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--top", type=int, default=15, help="ops shown a shape (without --json)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--read", type=Path, help="print the rows a lease wrote with --json (one a line) as text")
    args = parser.parse_args()
    if args.read is not None:
        for line in args.read.read_text().splitlines():
            if line.startswith("{"):
                show(json.loads(line), args.top)
        return
    for r in rows(args.device, tuple(args.d), args.runs, args.N, args.precision, args.steps):
        if args.json:
            print(json.dumps(r), flush=True)
        else:
            show(r, args.top)


def show(r: dict, top: int) -> None:
    """One shape's row as text: the step, then its `top` longest ops and kernels."""
    print(f"N={r['N']} d={r['d']} {r['runs']} runs {r['precision']} on {r['device']}: a step {r['step_ms']:.2f} ms as "
          f"training runs it, its ops' own time {r['ops_ms']:.2f} ms (its kernels' {r['kernels_ms']:.2f}), "
          f"{r['counted_bytes'] / 1e9:.2f} GB counted")
    for op in r["ops"][:top]:
        moved = "" if op["bytes"] is None else f"  {op['bytes'] / 1e9:8.3f} GB  {op['GBps']:8.1f} GB/s"
        print(f"    {op['op']:<36} {op['calls']:6.1f} calls  {op['us']:10.1f} us{moved}", flush=True)
    for kernel in r["kernels"][:top]:
        print(f"    kernel {kernel['kernel'][:60]:<60} {kernel['launches']:6.1f} launches  {kernel['us']:10.1f} us", flush=True)

if __name__ == "__main__":
    main()
