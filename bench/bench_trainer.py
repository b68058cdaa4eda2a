"""Model-steps per second: the stacked trainer against the plain one-run-at-a-time loop, in one run.

Run: python bench/bench_trainer.py [--device cpu] [--runs 4] [--steps 20] [--d 32 128 512] [--ops] [--json] [--out FILE]
                                  [--calibrate]
At the paper's shapes (N = 4096, batch 1024, R = 8); see geofact.ops.benchmark for what is timed.
`--ops` also counts a single-hop step's dispatcher ops (views apart) and host reads (N = 512, R = 4,
d = 32, 4 runs: `step_ops`), and at the paper's shapes (geofact.training.traffic.PAPER_SHAPES) the bytes
each step's ops read and write and its FLOPs, counted on fake `meta` tensors (no GPU needed), with the
H100's roofline time for them and what `geofact plan` assumes (its bytes and calibrated milliseconds);
`--json` prints the whole result as JSON, with `ratio` (stacked / plain at the first d), `ops_per_step`,
`syncs_per_step` and, per shape ("N=4096 d=32 runs=42"), `bytes_per_step`, `flops_per_step` and
`predicted_ms` at its top level. `--calibrate` (implies --ops) fits
the plan's cost model to the result (geofact.ops.calibration.fit) and stores it, with the result, as
bench/calibration/<device kind>.json, which `geofact plan` reads.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from geofact.provenance import git_commit
from geofact.store import write_json
from geofact.ops.benchmark import benchmark, format_rows, step_ops, step_timings
from geofact.ops.calibration import calibration_path, card_of, fit, load_calibration, stored_cards
from geofact.ops.costs import traffic_rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--d", type=int, nargs="+", default=[32, 128, 512])
    parser.add_argument("--ops", action="store_true", help="count a step's dispatcher ops and host reads")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--out", type=Path, help="also write the result as JSON")
    parser.add_argument("--calibrate", action="store_true",
                        help="fit geofact plan's cost model to the result and store it under bench/calibration/")
    args = parser.parse_args()
    args.ops = args.ops or args.calibrate
    result = benchmark(args.device, runs=args.runs, steps=args.steps, ds=tuple(args.d))
    first = result["rows"][0]
    result["ratio"] = first["stacked"] / first["plain"]
    if args.ops:
        result["ops"] = step_ops(args.device)
        result["ops_per_step"], result["syncs_per_step"] = result["ops"]["ops_per_step"], result["ops"]["syncs_per_step"]
        root, here = Path(__file__).resolve().parents[1], card_of(result["device"])
        cards = stored_cards(root, "cuda")  # this card's calibration where it has one, else the H100's
        result["traffic"] = traffic_rows(calibration=load_calibration(root, "cuda", here if here in cards else
                                                                      ("h100" if "h100" in cards else None)))
        for key in ("bytes_per_step", "flops_per_step", "predicted_ms"):
            result[key] = {f"N={r['N']} d={r['d']} runs={r['runs']}": r[key] for r in result["traffic"]}
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print("\n".join(format_rows(result)))
        if args.ops:
            o = result["ops"]
            print(f"single-hop step (N={o['N']}, R={o['R']}, d={o['d']}, {o['runs']} runs): {o['ops_per_step']:.1f} ops "
                  f"(+{o['views_per_step']:.1f} views), {o['syncs_per_step']:.3f} host reads, "
                  f"{o['launches_per_step']:.1f} host launches per step ({'CUDA graphs' if o['cuda_graphs'] else 'eager'})")
            for r in result["traffic"]:
                print(f"step N={r['N']} d={r['d']} runs={r['runs']} (counted on meta): {r['ops_per_step']:.0f} ops, "
                      f"{r['bytes_per_step'] / 1e9:.2f} GB (plan assumes {r['plan_bytes'] / 1e9:.2f}), "
                      f"{r['flops_per_step'] / 1e9:.1f} GFLOP; H100 roofline {r['roofline_h100_ms']:.2f} ms, "
                      f"plan {r['predicted_ms']:.2f} ms")
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    if args.calibrate:
        root = Path(__file__).resolve().parents[1]
        timings = step_timings(args.device)
        result["small_steps"] = [{"config": c.as_dict(), "runs": runs, "seconds": t} for c, runs, t in timings]
        # On an accelerator the benchmark's rows (20 steps, a CUDA graph captured in each) are mostly first-call
        # costs: the fit takes the warmed-up timings alone there (geofact.ops.calibration.fit, bench_rows)
        accelerator = not args.device.startswith("cpu")
        calibration = fit(result, result["ops_per_step"], timings, precision=timings[0][0].precision, bench_rows=not accelerator)
        path = calibration_path(root, args.device, card_of(result["device"]))  # one file per card: an H100's and an H200's apart
        write_json(path, {"schema": "geofact.training.calibration/1", "calibration": calibration.as_dict(), "bench": result,
                          "git_commit": git_commit(root)})
        print(f"calibration: {max(calibration.matmul_flops.values()) / 1e9:.0f} GFLOP/s, {calibration.bandwidth / 1e9:.1f} GB/s, "
              f"{calibration.op_seconds * 1e6:.1f} us/op ({calibration.source}) -> {path}")


if __name__ == "__main__":
    main()
