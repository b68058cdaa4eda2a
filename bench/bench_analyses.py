"""One state's analyses of each mechanism page, timed on the device at the paper's shapes, beside the plan's price of
the same state (geofact.ops.costs.STATE_WORK): the analyses' 4.5 of the H100's planned minutes are priced at the
rates fitted to the timed training steps, which no lease has checked on an analysis (issue 47, item 3).

Run: python bench/bench_analyses.py --device cuda [--N 4096] [--R 16] [--d 32 256 768] [--steps 300] [--repeats 2]
[--json]

For each d, one run of the capacity grid's recipe (learned embeddings, batch 1024) is trained for --steps steps (300:
a state the paper's grid keeps, whose logits are spread as a checkpoint's are; at step 0 nearly every row would be a
tie the recheck predicts again) and moved to the device, then each analysis runs once to warm up (libraries,
Triton's compiles for the shape) and --repeats times timed, the median kept: a rank sweep as exp-interventions runs it
at the paper profile (`PARAMS`: 32 rank points, 2 other relations drawn per edit), the readouts of both targets, the
zero-shot transfer of both targets and the state's accuracy; and loading the state as a page does (TrainedModel.load of
its weights, written as the run cache writes them, to the device; the page cache warm). Each row (printed as it is timed: a timeout keeps the
rows before it) holds the measured seconds, the trained state's accuracy, the plan's seconds (`predicted_seconds`, at
the card's calibration: bench/calibration/<device>-<card>.json; a CPU at its own where one is stored) and its error.
The host reads the analyses' values, so the device's work is done when each clock stops. It runs where a GPU lease
runs, without the Jupyter packages (`geofact.pipeline.standins`).
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Iterator

import torch

from geofact.pipeline import standins

standins.install()  # geofact.ops imports the publisher's modules, and a GPU lease has no Jupyter packages

from geofact.analysis.interventions import rank_grid, selectivity_sweep  # noqa: E402
from geofact.analysis.readout import model_readouts  # noqa: E402
from geofact.analysis.trained import TrainedModel  # noqa: E402
from geofact.analysis.transfer import fresh_bijections, zero_shot  # noqa: E402
from geofact.device import describe_device, resolve_device  # noqa: E402
from geofact.ops.calibration import card_of, load_calibration, stored_cards  # noqa: E402
from geofact.ops.costs import STATE_WORK, Analysis, _accuracy, _loaded  # noqa: E402
from geofact.store import write_arrays  # noqa: E402
from geofact.training.config import TrainConfig  # noqa: E402
from geofact.training.trainer import train_group  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
# the paper profile's parameters of each analysis, as the pages record them (notebooks/profiles/paper.yaml)
PARAMS = {"interventions": {"held_out": 0.2, "alpha": 1e-3, "rank_points": 32, "split_seed": 0, "others_per_edit": 2},
          "readouts": {"held_out": 0.2, "alpha": 1e-3, "split_seed": 0},
          "zero-shot-transfer": {"new_task_offset": 1000, "alpha": 1e-3}}


def analyses(model: TrainedModel) -> dict:
    """{name: the analysis of one checkpoint state, as its page runs it (`PARAMS`), reading its values on the host}."""
    c, sweep, readout, transfer = model.config, PARAMS["interventions"], PARAMS["readouts"], PARAMS["zero-shot-transfer"]
    new = fresh_bijections(c.N, c.R, c.bijection_seed + transfer["new_task_offset"])
    targets = ("unembedding", "embedding")
    return {
        "interventions": lambda: selectivity_sweep(model, rank_grid(c.d, sweep["rank_points"]), sweep["held_out"],
                                                   sweep["alpha"], sweep["split_seed"], "unembedding",
                                                   sweep["others_per_edit"]),
        "readouts": lambda: [{k: r.mean for k, r in model_readouts(model, readout["held_out"], readout["alpha"],
                                                                   readout["split_seed"], t).items()} for t in targets],
        "zero-shot-transfer": lambda: [zero_shot(model, new, transfer["alpha"], t) for t in targets],
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


def trained(config: TrainConfig, device: torch.device) -> TrainedModel:
    """The run trained on `device` (TF32 on CUDA) and its state on it: a RunResult's weights are the host's copies."""
    (result,) = train_group([replace(config, precision="tf32" if device.type == "cuda" else "fp32")], device=device)
    model = TrainedModel(config, {k: v.to(device) for k, v in result.params.items()}, step=config.max_steps)
    del result
    gc.collect()  # the run's CUDA graphs go with it (a lease found them held until collected)
    if device.type == "cuda":
        torch.cuda.empty_cache()
    if model.device.type != device.type:
        raise RuntimeError(f"the state to analyse is on {model.device}, not on {device}")
    return model


def rows(N: int, R: int, d: int, steps: int, device: torch.device, repeats: int, calibration) -> Iterator[dict]:
    """A row per analysis of one state at (N, R, d), as each is timed, and one of loading it as the pages do."""
    config = TrainConfig(N=N, R=R, d=d, batch_size=min(1024, N * R), max_steps=steps, lr=1e-3, loss_threshold=0.0)
    model = trained(config, device)
    accuracy = model.accuracy()
    priced = {"accuracy": _accuracy(config), "load": _loaded(config)}
    with tempfile.TemporaryDirectory() as folder:  # written as the run cache writes a state (sweep.save_result)
        write_arrays(Path(folder) / f"{config.key()}.npz", {k: v.float().cpu().numpy() for k, v in model.weights.items()},
                     compress=False)
        load = {"load": lambda: TrainedModel.load(Path(folder), config, None, device).weights["E_ent"].sum().item()}
        for name, fn in {**load, **analyses(model)}.items():
            seconds = timed(fn, device, repeats)
            work = priced[name] if name in priced else STATE_WORK[name][0](config, PARAMS[name])
            row = {"analysis": name, "N": N, "R": R, "d": d, "steps": steps, "params": PARAMS.get(name, {}),
                   "state_accuracy": accuracy, "device": describe_device(device), "seconds": seconds}
            if calibration is not None:
                predicted = Analysis("", name, 1, work, name=name).seconds(calibration)  # its refitted factor too
                row.update(predicted_seconds=predicted, error=predicted / seconds - 1, calibration=calibration.device)
            yield row


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
    if args.N < 8 or not 2 <= args.R <= args.N or any(d < 2 for d in args.d) or args.steps < 1 or args.repeats < 1:
        raise SystemExit(f"--N must be >= 8, --R in [2, N] (a sweep's C needs another relation), every --d >= 2, "
                         f"--steps and --repeats >= 1; got N={args.N}, R={args.R}, d={args.d}, steps={args.steps}, "
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
