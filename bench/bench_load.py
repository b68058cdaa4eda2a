"""Loading a run's weights, as each mechanism page loads every state of the capacity grid (TrainedModel.load):
geofact's reader of an uncompressed NPZ (geofact.training.weights_file: the arrays read in place, no CRC pass)
against np.load's, in one process, at the paper's shapes, and the copy to `--device`.

Run: python bench/bench_load.py [--device cpu] [--N 4096] [--R 16] [--d 32 128 256 512 768] [--repeats 15] [--json]

Writes each d's weights as the run cache does (geofact.training.sweep.save_result: uncompressed, float32), reads them
`--repeats` times each way after one read to warm the page cache, and prints per d: the file's megabytes, the median
milliseconds of np.load's read (as geofact read until 2026-11-30), of geofact's read, of TrainedModel.load (the read
and the copy to the device), the ratio np.load / geofact, and geofact's load in GB/s, the rate `geofact plan` prices a
state's loading at (geofact.ops.costs.LOAD_BYTES_PER_SECOND) until a lease's records time it.

With --overlap K, it also analyses a batch of K states of each d as a page does (geofact.analysis.trajectory), by a
stand-in analysis that waits --wait-ms on the device the way a GPU's analysis returns its values (a sleep: the
interpreter is free meanwhile, as in a CUDA synchronisation), twice: each state's weights read when it is analysed
(`analyse_state` alone), and the next state's read while the one before is analysed (`analyse_states`); it prints
the median wall times of OVERLAP_ROUNDS rounds, the two ways alternated, and what the reads ahead saved. The stand-in
uses no processor: on a CPU, whose analysis competes with the read, the saving is smaller than it shows.
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
from geofact.analysis.trajectory import Stamp, analyse_state, analyse_states
from geofact.device import describe_device
from geofact.store import write_arrays
from geofact.training.weights_file import read_weights
from geofact.training.config import TrainConfig
from geofact.training.model import init_params


def np_load(path: Path) -> dict[str, np.ndarray]:
    """The reader geofact used until 2026-11-30."""
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


OVERLAP_ROUNDS = 3  # of --overlap's two ways, alternated; the medians are printed


def overlap(folder: Path, N: int, R: int, d: int, device: torch.device, states: int, wait_ms: float) -> dict:
    """A batch of `states` final states at (N, R, d) (seeds 0, 1, ...) analysed by a stand-in that waits `wait_ms`,
    with and without the reads ahead (module docstring)."""
    configs = [TrainConfig(N=N, R=R, d=d, batch_size=min(1024, N * R), seed=seed) for seed in range(states)]
    for config in configs:
        write_arrays(folder / f"{config.key()}.npz", {k: v.numpy() for k, v in init_params(config).items()}, compress=False)

    def waits(model: TrainedModel) -> dict:
        time.sleep(wait_ms / 1e3)
        return {}

    batch = [(config, None, 1.0) for config in configs]  # the run record's accuracy: no accuracy computed
    analyse_states(folder, batch, waits, "warm-up", {}, device, desc="warm-up")  # the page cache warmed
    asked, ahead = [], []
    for round_ in range(OVERLAP_ROUNDS):  # the two ways alternate, each under a name of its own (nothing cached)
        began = time.perf_counter()
        stamp = Stamp(waits, device)  # made once for the batch and timed with it, as analyse_states makes it
        for config in configs:
            analyse_state(folder, config, None, waits, f"each-when-asked-{round_}", {}, 1.0, device, stamp)
        asked.append(time.perf_counter() - began)
        began = time.perf_counter()
        analyse_states(folder, batch, waits, f"read-ahead-{round_}", {}, device, desc="read ahead")
        ahead.append(time.perf_counter() - began)
    asked, ahead = statistics.median(asked), statistics.median(ahead)
    return {"N": N, "R": R, "d": d, "states": states, "wait_ms": wait_ms, "when_asked_s": asked, "read_ahead_s": ahead,
            "saved_s": asked - ahead, "waits_s": states * wait_ms / 1e3, "device": describe_device(device)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--N", type=int, default=4096)
    parser.add_argument("--R", type=int, default=16)
    parser.add_argument("--d", type=int, nargs="+", default=[32, 128, 256, 512, 768])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--overlap", type=int, default=0, metavar="K", help="also a batch of K states analysed (module docstring)")
    parser.add_argument("--wait-ms", type=float, default=20.0, help="with --overlap: the stand-in analysis's wait")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.overlap < 0 or args.wait_ms < 0:
        parser.error(f"--overlap and --wait-ms must be at least 0, got {args.overlap} and {args.wait_ms}")
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
            if args.overlap:
                with tempfile.TemporaryDirectory() as batch_folder:
                    o = overlap(Path(batch_folder), args.N, args.R, d, device, args.overlap, args.wait_ms)
                print(json.dumps(o) if args.json else
                      f"d={d:4d} {o['states']} states, {o['wait_ms']:g} ms waits (a GPU-like analysis: it sleeps), "
                      f"medians of {OVERLAP_ROUNDS}: each read when asked "
                      f"{o['when_asked_s']:.3f} s, read ahead {o['read_ahead_s']:.3f} s (saved {o['saved_s']:.3f} s; "
                      f"the waits alone {o['waits_s']:.3f} s)", flush=True)


if __name__ == "__main__":
    main()
