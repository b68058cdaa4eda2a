"""Count the steps a card timed as the code that ran them, and fit its counted rates (issue 47, items 1 and 5).

Run: python bench/count_lease_steps.py --card h100
     python bench/count_lease_steps.py --card h200

A card's calibration (bench/calibration/cuda-<card>.json) holds the groups it trained on its leases, each
a stack of runs and its measured seconds a step. This script counts each of those steps on fake `meta`
tensors (geofact.training.dispatch_count: bytes, FLOPs and ops) with the code of the commit that trained
it, taken out of git into a temporary folder, and fits the card's counted rates to them
(geofact.ops.calibration.fit_counted). `geofact plan` then prices a step by its own count: a step changed
since the lease is priced by what it now moves, at the rates the card moved the old one. The counts and
the commit that counted them are stored beside the groups, so the fit can be read and redone.

A group's records name their commit; the benchmark's small-shape timings (the H100's) the calibration's.
A stack is counted at all its runs and scaled to its mean stack (runs leave as they stop): bytes and FLOPs
in proportion, ops not. Counted steps are the float32 step's tensors, as the groups ran under TF32.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COUNTER = ROOT / "geofact" / "training" / "dispatch_count.py"
BLOCK_STEPS = 2


def worker() -> None:
    """In a checkout of another commit: count each job's stacked step with that commit's trainer (stdin -> stdout)."""
    import contextlib
    import importlib.util

    spec = importlib.util.spec_from_file_location("dispatch_count", os.environ["GEOFACT_COUNTER"])
    counting = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(counting)
    import geofact
    from geofact.host import host_reads
    from geofact.training.config import TrainConfig
    from geofact.training.trainer import train_group
    try:
        from geofact.training.graphs import eager_steps
    except ImportError:  # before CUDA graphs could be turned off: a meta step never captured one
        eager_steps = contextlib.nullcontext
    if not geofact.__file__.startswith(os.environ["GEOFACT_TREE"]):
        raise SystemExit(f"the worker imported geofact from {geofact.__file__}, not from the commit's tree")
    fields = {f.name for f in dataclasses.fields(TrainConfig)}
    out = []
    for job in json.load(sys.stdin):
        configs = [TrainConfig(**{k: v for k, v in c.items() if k in fields}) for c in job]

        def train(max_steps: int) -> None:
            runs = [dataclasses.replace(c, max_steps=max_steps, loss_threshold=0.0) for c in configs]
            with host_reads(counting.fake_read), eager_steps():
                train_group(runs, device="meta", evaluate=False, log_every=10**9, block_steps=BLOCK_STEPS)

        out.append(counting.count_step(train, BLOCK_STEPS))
    print(json.dumps(out))


def count_at(commit: str, jobs: list[list[dict]]) -> list[dict]:
    """Each job's (a stack's run configs) counted step, with the trainer of `commit`."""
    with tempfile.TemporaryDirectory() as tree:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", commit, "geofact"],
                                 check=True, capture_output=True).stdout
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(tree, filter="data")
        env = {**os.environ, "PYTHONPATH": tree, "GEOFACT_COUNTER": str(COUNTER), "GEOFACT_TREE": tree}
        done = subprocess.run([sys.executable, __file__, "--worker"], input=json.dumps(jobs), env=env, cwd=tree,
                              check=True, capture_output=True, text=True)
        return json.loads(done.stdout)


def small_stack(config: dict, runs: int) -> list[dict]:
    """The benchmark's small-shape stack (geofact.ops.benchmark.step_timings): `runs` seeds, R cycling 2, 4, 8, 16."""
    return [{**config, "seed": s, "R": R} for s, R in zip(range(runs), [2, 4, 8, 16] * runs)]


def main() -> None:
    if "--worker" in sys.argv:
        return worker()
    from geofact.ops.calibration import (Calibration, calibration_path, fit_counted, load_calibration, stored_cards,
                                         timed_groups, timed_step, without_analysis_factors)
    from geofact.ops.costs import kernel_rates, run_records
    from geofact.provenance import git_commit
    from geofact.store import write_json

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--card", required=True, help="the calibrated card (h100, h200)")
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    path = calibration_path(ROOT, args.device, args.card)
    stored = without_analysis_factors(json.loads(path.read_text()))  # fitted against the rates refitted here
    bench = stored["bench"]
    # (what, commit, the stack's run configs, runs timed, seconds a step)
    timed = [(f"N={g.config.N} d={g.config.d} {g.runs:.1f} runs", g.commit, [c.as_dict() for c in g.configs], g.runs, g.seconds)
             for g in timed_groups(run_records(ROOT), bench["device"])]
    if bench.get("benchmarked", True):
        timed += [(f"bench N={s['config']['N']} d={s['config']['d']} {s['runs']} runs", stored["git_commit"],
                   small_stack(s["config"], s["runs"]), s["runs"], s["seconds"]) for s in bench.get("small_steps", [])]
    by_commit: dict[str, list[int]] = {}
    for i, (_, commit, *_) in enumerate(timed):
        by_commit.setdefault(commit, []).append(i)
    counts: list[dict] = [{}] * len(timed)
    for commit, which in sorted(by_commit.items()):
        print(f"counting {len(which)} steps at {commit[:10]}", file=sys.stderr)
        for i, counted in zip(which, count_at(commit, [timed[i][2] for i in which])):
            counts[i] = counted
    rows = [{"what": what, "commit": commit, "runs_counted": len(configs), "runs_timed": runs, "seconds": seconds,
             **{k: counted[k] for k in ("flops", "kernel_flops", "bytes", "ops", "kernel_ops")}}
            for (what, commit, configs, runs, seconds), counted in zip(timed, counts)]
    points = [(timed_step(row), row["seconds"], row["what"]) for row in rows]
    # the groups' policy (their records name it; the benchmark's small stacks ran in the device's default, the same)
    precision = Counter(c["precision"] for _, _, cs, *_ in timed for c in cs if "precision" in c).most_common(1)[0][0]
    counted_rates = fit_counted(points, bench["matmul_peak_flops"], precision)
    for field in ("kernel_flops", "kernel_op_seconds"):  # what this card's steps never timed: another card's rate
        if getattr(counted_rates, field) is not None:
            continue
        for other in stored_cards(ROOT, args.device):
            rates = load_calibration(ROOT, args.device, other).counted
            if other != args.card and rates is not None and getattr(rates, field) is not None:
                counted_rates = dataclasses.replace(counted_rates, **{field: getattr(rates, field)},
                                                    source=f"{counted_rates.source}; {field}, never timed on this card, the {other}'s")
                break
    calibration = dataclasses.replace(Calibration.from_dict(stored["calibration"]), counted=counted_rates)
    for (scaled, seconds, what) in points:
        predicted = counted_rates.seconds(scaled, precision)
        print(f"  {what:<32} {scaled['bytes'] / 1e9:7.3f} GB {scaled['ops']:6.0f} ops  {seconds * 1e3:7.2f} ms measured  "
              f"{predicted * 1e3:7.2f} predicted ({predicted / seconds - 1:+.0%})")
    print(f"{counted_rates.bandwidth / 1e9:.0f} GB/s, {counted_rates.op_seconds * 1e6:.2f} us/op, "
          f"{counted_rates.matmul_flops[precision] / 1e12:.0f} TFLOP/s ({precision}); {kernel_rates(counted_rates)}; "
          f"{counted_rates.source}")
    write_json(path, {**stored, "calibration": calibration.as_dict(), "counted_steps": rows, "counted_at": git_commit(ROOT)})
    print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
