"""One state's analyses of each mechanism page, timed on the device at the paper's shapes, beside the plan's price of
the same state (geofact.ops.costs.STATE_WORK): the analyses' 4.5 of the H100's planned minutes are priced at the
rates fitted to the timed training steps, which no lease has checked on an analysis (issue 47, item 3).

Run: python bench/bench_analyses.py --device cuda [--N 4096] [--R 16] [--d 32 256 768] [--steps 300] [--json]

For each d, one run of the capacity grid's recipe (learned embeddings, batch 1024) is trained for --steps steps (300:
the grid's first kept state, whose logits are spread as a checkpoint's are; at step 0 nearly every row would be a
tie the recheck predicts again), then each analysis runs once to warm up (libraries, Triton's compiles for the
shape) and --repeats times timed, the median kept: a rank sweep as exp-interventions runs it at the paper profile
(32 rank points, 2 other relations drawn per edit, `sweep`), the readouts of both targets (`readouts`), the
zero-shot transfer of both targets (`zero-shot-transfer`) and the state's accuracy (`accuracy`). Each row holds the
measured seconds, the plan's (`predicted_seconds`, at the card's calibration: bench/calibration/<device>-<card>.json)
and its error; a CPU prices at its own calibration where one is stored. The host reads the analyses' values, so the
device's work is done when each clock stops.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import replace
from pathlib import Path

import torch

from geofact.analysis.interventions import rank_grid, selectivity_sweep
from geofact.analysis.readout import model_readouts
from geofact.analysis.trained import TrainedModel
from geofact.analysis.transfer import fresh_bijections, zero_shot
from geofact.device import describe_device, resolve_device
from geofact.ops.calibration import card_of, load_calibration, stored_cards
from geofact.ops.costs import STATE_WORK, Analysis, _accuracy
from geofact.training.config import TrainConfig
from geofact.training.trainer import train_group

ROOT = Path(__file__).resolve().parents[1]
# the paper profile's parameters of each analysis, as the pages record them (notebooks/profiles/paper.yaml)
PARAMS = {"interventions": {"held_out": 0.2, "alpha": 1e-3, "rank_points": 32, "split_seed": 0, "others_per_edit": 2},
          "readouts": {"held_out": 0.2, "alpha": 1e-3, "split_seed": 0},
          "zero-shot-transfer": {"new_task_offset": 1000, "alpha": 1e-3}}


def analyses(model: TrainedModel) -> dict:
    """{name: the analysis of one checkpoint state, as its page runs it}."""
    c, p = model.config, PARAMS
    new = fresh_bijections(c.N, c.R, c.bijection_seed + p["zero-shot-transfer"]["new_task_offset"])
    return {
        "interventions": lambda: selectivity_sweep(model, rank_grid(c.d, p["interventions"]["rank_points"]), 0.2, 1e-3, 0,
                                                   "unembedding", p["interventions"]["others_per_edit"]),
        "readouts": lambda: [{k: r.mean for k, r in model_readouts(model, 0.2, 1e-3, 0, t).items()}
                             for t in ("unembedding", "embedding")],
        "zero-shot-transfer": lambda: [zero_shot(model, new, 1e-3, t) for t in ("unembedding", "embedding")],
        "accuracy": model.accuracy,
    }


def timed(fn, device: torch.device, repeats: int) -> float:
    """The median wall seconds of `fn` after one call to warm up (it reads its values back to the host)."""
    fn()
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        began = time.perf_counter()
        fn()
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def rows(N: int, R: int, d: int, steps: int, device: torch.device, repeats: int, calibration) -> list[dict]:
    config = TrainConfig(N=N, R=R, d=d, batch_size=min(1024, N * R), max_steps=steps, lr=1e-3, loss_threshold=0.0)
    precision = "tf32" if device.type == "cuda" else "fp32"
    (result,) = train_group([replace(config, precision=precision)], device=device)
    model = TrainedModel(config, {k: v.detach() for k, v in result.params.items()}, step=steps)
    out = []
    for name, fn in analyses(model).items():
        seconds = timed(fn, device, repeats)
        work = _accuracy(config) if name == "accuracy" else STATE_WORK[name][0](config, PARAMS[name])
        row = {"analysis": name, "N": N, "R": R, "d": d, "steps": steps, "device": describe_device(device),
               "seconds": seconds}
        if calibration is not None:
            predicted = Analysis("", name, 1, work).seconds(calibration)
            row.update(predicted_seconds=predicted, error=predicted / seconds - 1, calibration=calibration.device)
        out.append(row)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--N", type=int, default=4096)
    parser.add_argument("--R", type=int, default=16)
    parser.add_argument("--d", type=int, nargs="+", default=[32, 256, 768])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.N < 8 or args.R < 3 or any(d < 2 for d in args.d) or args.steps < 1 or args.repeats < 1:
        raise SystemExit(f"--N must be >= 8, --R >= 3 (a sweep draws 2 other relations), every --d >= 2, --steps and "
                         f"--repeats >= 1; got N={args.N}, R={args.R}, d={args.d}, steps={args.steps}, "
                         f"repeats={args.repeats}")
    device = resolve_device(args.device)
    cards, card = stored_cards(ROOT, device.type), card_of(describe_device(device))
    # this card's calibration, or the kind's only one; none for a card never calibrated (rows without a price)
    calibration = load_calibration(ROOT, device.type, card if card in cards else None) \
        if card in cards or len(cards) == 1 else None
    for d in args.d:
        for row in rows(args.N, args.R, d, args.steps, device, args.repeats, calibration):
            if args.json:
                print(json.dumps(row), flush=True)
                continue
            text = f"d = {d:4d} {row['analysis']:>20}: {row['seconds'] * 1e3:9.1f} ms"
            if "predicted_seconds" in row:
                text += f", planned {row['predicted_seconds'] * 1e3:9.1f} ms ({row['error']:+.0%})"
            print(text, flush=True)


if __name__ == "__main__":
    main()
