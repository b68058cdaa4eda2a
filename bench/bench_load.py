"""Loading a run's weights, as each mechanism page loads every state of the capacity grid (TrainedModel.load):
geofact's reader of an uncompressed NPZ (geofact.training.weights_file: the arrays read in place, no CRC pass)
against np.load's, in one process, at the paper's shapes, and the copy to `--device`.

Run: python bench/bench_load.py [--device cpu] [--N 4096] [--R 16] [--d 32 128 256 512 768] [--repeats 15] [--json]

Writes each d's weights as the run cache does (geofact.training.sweep.save_result: uncompressed, float32), reads them
`--repeats` times each way after one read to warm the page cache, and prints per d: the file's megabytes, the median
milliseconds of np.load's read (as geofact read until 2026-12-01), of geofact's read, of TrainedModel.load (the read
and the copy to the device), the ratio np.load / geofact, and geofact's load in GB/s, the rate `geofact plan` prices a
state's loading at (geofact.ops.costs.LOAD_BYTES_PER_SECOND) until a lease's records time it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from geofact.analysis.trained import TrainedModel
from geofact.device import describe_device
from geofact.store import write_arrays
from geofact.training.weights_file import read_weights
from geofact.training.config import TrainConfig
from geofact.training.model import init_params


def np_load(path: Path) -> dict[str, np.ndarray]:
    """The reader geofact used until 2026-12-01."""
    with np.load(path, allow_pickle=False) as z:
        return {name: z[name] for name in z.files}


def median_ms(fn, repeats: int, device: torch.device) -> float:
    fn()  # the page cache warmed, as a page finds a state the lease's training has just written
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - began)
    return 1e3 * statistics.median(times)


def row(folder: Path, N: int, R: int, d: int, device: torch.device, repeats: int) -> dict:
    config = TrainConfig(N=N, R=R, d=d, batch_size=min(1024, N * R))
    path = folder / f"{config.key()}.npz"
    write_arrays(path, {k: v.numpy() for k, v in init_params(config).items()}, compress=False)
    old = median_ms(lambda: np_load(path), repeats, device)
    new = median_ms(lambda: read_weights(path), repeats, device)
    loaded = median_ms(lambda: TrainedModel.load(folder, config, None, device), repeats, device)
    size = path.stat().st_size
    return {"N": N, "R": R, "d": d, "MB": size / 1e6, "np_load_ms": old, "read_ms": new, "load_ms": loaded,
            "ratio": old / new, "load_GB_per_s": size / loaded / 1e6, "device": describe_device(device)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--N", type=int, default=4096)
    parser.add_argument("--R", type=int, default=16)
    parser.add_argument("--d", type=int, nargs="+", default=[32, 128, 256, 512, 768])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    for name in ("N", "R", "repeats"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1, got {getattr(args, name)}")
    if min(args.d) < 1:
        parser.error(f"--d must be at least 1, got {min(args.d)}")
    device = torch.device(args.device)
    with tempfile.TemporaryDirectory() as folder:
        for d in args.d:
            r = row(Path(folder), args.N, args.R, d, device, args.repeats)
            print(json.dumps(r) if args.json else
                  f"d={d:4d} {r['MB']:6.1f} MB  np.load {r['np_load_ms']:6.1f} ms  geofact {r['read_ms']:6.1f} ms "
                  f"({r['ratio']:.1f}x)  TrainedModel.load {r['load_ms']:6.1f} ms = {r['load_GB_per_s']:.2f} GB/s",
                  flush=True)


if __name__ == "__main__":
    main()
