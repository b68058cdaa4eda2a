"""The stacked step with each way of its output layer (geofact's fused Triton kernels, torch's softmax and
log-softmax kernels, the written-out softmax) and each way of stepping its runs' optimiser (torch's fused AdamW
together or per run, geofact's kernel for the whole stack), in one process, after a probe of geofact's Triton
kernels (a kernel that fails is reported in `kernel_errors` and the rows are timed without them).

Run: python bench/bench_output_layer.py [--device cuda] [--d 32 768 128] [--runs 42] [--steps 50]
                                        [--precision tf32 bf16] [--no-optimisers] [--json]
     python bench/bench_output_layer.py --decide ab.jsonl   # what a lease's rows say of each default (step_ab.decide)
The next GPU lease runs it first (book/leases.md): see geofact.ops.step_ab. Each way is timed over a block of
--steps steps of one stack, after 5 that capture its graph (no call's fixed cost in it); --json prints one JSON
object a line.
"""

from __future__ import annotations

import argparse
import json

from pathlib import Path

from geofact.ops.step_ab import decide, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--d", type=int, nargs="+", default=[32, 768, 128])
    parser.add_argument("--runs", type=int, default=42)
    parser.add_argument("--N", type=int, default=4096)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--precision", nargs="+", default=["tf32", "bf16"])
    parser.add_argument("--no-optimisers", action="store_true", help="time the output layer's ways alone")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--decide", type=Path, help="read rows printed by --json (one a line) and say what they decide")
    args = parser.parse_args()
    if args.decide is not None:
        lines = [line for line in args.decide.read_text().splitlines() if line.startswith("{")]
        for switch, verdict in decide([json.loads(line) for line in lines]).items():
            state = {True: "on", False: "off", None: "not timed: left as it is"}[verdict["on"]]
            print(f"{switch} ({verdict['setting']}): {state}")
            for row in verdict["rows"]:
                print(f"    {row}")
        return
    # one line a row as it is timed, flushed: a command cut by its time limit keeps the rows it finished
    for r in rows(args.device, tuple(args.d), args.runs, args.N, args.steps, tuple(args.precision), not args.no_optimisers):
        if args.json:
            print(json.dumps(r), flush=True)
            continue
        ways = ", ".join(f"{way} {ms:.2f} ms ({r['relative'][way]:.2f}x)" for way, ms in r["ms"].items())
        stepped = "".join(f"; runs stepped {how}: {ms:.2f} ms" for how, ms in r.get("optimiser_ms", {}).items())
        failed = "".join(f"; {kernel} failed: {error}" for kernel, error in {**r["kernel_errors"], **r["errors"]}.items())
        print(f"N={r['N']} d={r['d']} {r['runs']} runs {r['precision']}, a step: {ways}; fastest: {r['fastest']}; "
              f"last losses differ by {r['loss_difference']:.2g}{stepped}{failed}", flush=True)

if __name__ == "__main__":
    main()
