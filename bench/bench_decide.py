"""The recheck's decisions (geofact.analysis.rechecked) through whole logits against the fused kernel
(geofact.analysis.fused_decide), on one prediction call's rows: what sets geofact.fast_paths.DECIDE_MAX_D.

Run: python bench/bench_decide.py --device cuda [--N 4096] [--d 32 128 256 768] [--rows 262144] [--json]

For each d, the unembedding of `rows` final states at N columns and its five numbers a row (TF32 on CUDA, float32
elsewhere, where only torch's path is timed), timed (CUDA events,
the median of --repeats after a warm-up) through torch (a TF32 matmul writing the logits, topk and amin reading
them: `rechecked.decided`) and, on CUDA with Triton, through the kernel (`fused_decide.summary`, never writing
them); with the FLOP/s and the bytes/s each achieved (the kernel's bytes: its inputs read once). The two must agree
on every row's largest column where its lead is clear, or the benchmark fails. The plan prices the kernel at the
card's measured rate for geofact's kernels and torch's path by its bytes (geofact.ops.costs.Analysis.seconds): set
DECIDE_MAX_D to the largest d at which the kernel is faster.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from geofact.analysis import fused_decide, rechecked
from geofact.analysis.interventions import call_rows
from geofact.device import resolve_device
from geofact.precision import computing_in


def timed(fn, device: torch.device, repeats: int) -> float:
    """The median seconds of `fn` (after one call to warm up)."""
    fn()
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            began = time.perf_counter()
            fn()
            times.append(time.perf_counter() - began)
    return statistics.median(times)


def row(N: int, d: int, rows: int, device: torch.device, repeats: int, kernel: bool) -> dict:
    g = torch.Generator().manual_seed(d)
    final = torch.randn(rows, d, generator=g).to(device)
    E = (torch.randn(d, N, generator=g) / d**0.5).to(device)
    targets = torch.randint(0, N, (rows,), generator=g).to(device)
    flops = 2.0 * rows * d * N
    out = {"N": N, "d": d, "rows": rows, "device": str(device)}
    with computing_in("tf32" if device.type == "cuda" else "fp32", device):
        whole = lambda: rechecked.decided(final @ E, targets)  # noqa: E731
        seconds = timed(whole, device, repeats)
        moved = 4.0 * (rows * d + d * N + 3 * rows * N)  # the matmul's inputs and logits, topk's and amin's reads
        out["torch_ms"] = 1e3 * seconds
        out["torch_tflops"], out["torch_gbps"] = flops / seconds / 1e12, moved / seconds / 1e9
        if kernel:
            fused = lambda: fused_decide.summary(final, E, targets)  # noqa: E731
            seconds = timed(fused, device, repeats)
            out["kernel_ms"] = 1e3 * seconds
            out["kernel_tflops"] = flops / seconds / 1e12
            top, index = (final @ E).topk(2, -1)
            clear = (top[:, 0] - top[:, 1]) > 1e-3 * top[:, 0].abs()
            agree = bool((fused()[2][clear] == index[clear, 0]).all())
            out["agree"] = agree
            if not agree:
                raise SystemExit(f"the kernel's largest column differs from torch's at d = {d}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--N", type=int, default=4096)
    parser.add_argument("--d", type=int, nargs="+", default=[32, 128, 256, 768])
    parser.add_argument("--rows", type=int, default=None, help="default: one prediction call's, PREDICT_LOGITS / N")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    device = resolve_device(args.device)
    if args.N < 2 or any(d < 1 for d in args.d) or args.repeats < 1:
        raise SystemExit("--N must be >= 2, every --d >= 1 and --repeats >= 1")
    rows = args.rows or call_rows(args.N, device.type)
    kernel = device.type == "cuda" and fused_decide.fused_ce.wanted()
    for d in args.d:
        out = row(args.N, d, rows, device, args.repeats, kernel)
        if args.json:
            print(json.dumps(out), flush=True)
            continue
        text = f"d = {d:4d}: torch {out['torch_ms']:8.2f} ms ({out['torch_gbps']:6.0f} GB/s)"
        if kernel:
            text += f", kernel {out['kernel_ms']:8.2f} ms ({out['kernel_tflops']:5.1f} TFLOP/s)"
        print(text, flush=True)


if __name__ == "__main__":
    main()
