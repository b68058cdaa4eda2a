"""How many rows the TF32 path predicts again in float32 (geofact.analysis.rechecked), on trained states of the
run cache, TF32 emulated on the CPU: what `geofact plan` prices the recheck at (geofact.ops.costs.UNSURE_SHARE_SEEN).

Run: python bench/bench_recheck_share.py [--profile laptop] [--states 60] [--seed 0] [--cache-dir DIR] [--json]

Samples `--states` states (checkpoints and stops) of exp-interventions' grids at the profile whose weights the run
cache holds (execute the mechanism pages there first), and on each asks what the pages ask through
`TrainedModel.answered`: a rank sweep's edited rows ("edits", the sweep of exp-interventions at its rank_points and
held_out) and an accuracy's ("facts": the model's own facts, and a zero-shot transfer's two smart inits). Prints, per
kind, the rows, the share rechecked in all, and the largest share of one state at d >= 8 (the plan's price sits above
it) and of one call. Every rechecked answer must be float32's, or the benchmark fails.
"""

from __future__ import annotations

import argparse
import json
import random
from contextlib import nullcontext
from pathlib import Path

import torch

from geofact import fast_paths
from geofact.analysis import rechecked
from geofact.analysis.interventions import rank_grid, selectivity_sweep
from geofact.analysis.trained import TrainedModel
from geofact.analysis.transfer import fresh_bijections, zero_shot
from geofact.pipeline.project import Project
from geofact.pipeline.script import page_parameters
from geofact.training.grid import CapacityGrid, ladder_grids

KINDS = ("edits", "facts")


class Tally:
    """Per kind: rows, rows rechecked, the largest share of a state (d >= 8) and of a call; answers not float32's."""

    def __init__(self) -> None:
        self.rows = dict.fromkeys(KINDS, 0)
        self.unsure = dict.fromkeys(KINDS, 0)
        self.worst_state = dict.fromkeys(KINDS, 0.0)
        self.worst_call = dict.fromkeys(KINDS, 0.0)
        self.wrong = 0


def counted(tally: Tally, state: dict[str, list[int]]):
    """`rechecked.rechecked_answered` and its `decided` through emulated TF32: each call's rows and rechecked rows
    added to `state` (kind -> [rows, unsure]) under the kind the caller set, and its answers checked against
    float32's."""
    answered, decided = rechecked.rechecked_answered, rechecked.decided
    unsure = []  # the call's rows near a tie that decides them, as `decided` found them

    def deciding(logits, targets):
        out = decided(logits, targets)
        unsure.append(int(out[1].sum()))
        return out

    def wrapped(model, h, targets):
        unsure.clear()
        hit = answered(model, h, targets)
        states, flat = h.reshape(-1, h.shape[-1]), targets.reshape(-1)
        rows, kind, (taken,) = len(flat), state["kind"], unsure
        state[kind][0] += rows
        state[kind][1] += taken
        tally.worst_call[kind] = max(tally.worst_call[kind], taken / rows)
        tally.wrong += int((hit.reshape(-1) != (model.predict(states) == flat)).sum())
        return hit

    return wrapped, deciding


def measure(states: list[tuple[TrainedModel, dict]], tally: Tally) -> list[dict]:
    """Each state's shares, the TF32 path emulated on the CPU."""
    out = []
    state: dict = {kind: [0, 0] for kind in KINDS}
    saved = (fast_paths.FAST_DEVICES, rechecked.fast_logits, rechecked.computing_in, rechecked.rechecked_answered,
             rechecked.decided)
    fast_paths.FAST_DEVICES, rechecked.fast_logits = ("cpu",), rechecked.emulated_fast_logits
    rechecked.computing_in = lambda precision, device: nullcontext()
    rechecked.rechecked_answered, rechecked.decided = counted(tally, state)
    try:
        for model, p in states:
            c = model.config
            for kind in KINDS:
                state[kind] = [0, 0]
            state["kind"] = "edits"
            selectivity_sweep(model, rank_grid(c.d, p["rank_points"]), p["held_out"], p["alpha"], p["split_seed"])
            state["kind"] = "facts"
            model.correct_fraction()
            zero_shot(model, fresh_bijections(c.N, c.R, c.bijection_seed + 1), p["alpha"])
            row = {"N": c.N, "R": c.R, "d": c.d, "step": model.step}
            for kind in KINDS:
                rows, unsure = state[kind]
                tally.rows[kind] += rows
                tally.unsure[kind] += unsure
                row[kind] = unsure / rows
                if c.d >= 8:
                    tally.worst_state[kind] = max(tally.worst_state[kind], unsure / rows)
            out.append(row)
    finally:
        (fast_paths.FAST_DEVICES, rechecked.fast_logits, rechecked.computing_in, rechecked.rechecked_answered,
         rechecked.decided) = saved
    return out


def cached_states(project: Project, profile: str, cache_dir: Path, count: int, seed: int) -> list[tuple[TrainedModel, dict]]:
    """`count` states of exp-interventions' grids at `profile` whose weights `cache_dir` holds, drawn with `seed`."""
    p = page_parameters(project, "exp-interventions", profile, "cpu", None)
    grids = [CapacityGrid.from_parameter(p["capacity_grid"], p.get("precision")),
             *ladder_grids(p.get("trajectory_grid"), p.get("precision"))]
    candidates = [(c, step) for g in grids for c in g.configs().values() for step in [*g.checkpoints, None]]
    random.Random(seed).shuffle(candidates)
    states = []
    for config, step in candidates:
        try:
            states.append((TrainedModel.load(cache_dir, config, step, "cpu"), p))
        except FileNotFoundError:
            continue
        if len(states) == count:
            break
    if not states:
        raise SystemExit(f"no weights of exp-interventions' grids at the {profile} profile in {cache_dir}: execute "
                         f"the mechanism pages at that profile first")
    return states


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", default="laptop")
    parser.add_argument("--states", type=int, default=60)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cache-dir", type=Path, default=None, help="the run cache (default: this checkout's)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.states < 1:
        raise SystemExit(f"--states must be >= 1, got {args.states}")
    project = Project.find()
    cache_dir = args.cache_dir or project.root / ".geofact" / "runs"
    tally = Tally()
    rows = measure(cached_states(project, args.profile, cache_dir, args.states, args.seed), tally)
    result = {"profile": args.profile, "states": len(rows), "margin": rechecked.CERTAIN_MARGIN,
              **{kind: {"rows": tally.rows[kind], "share": tally.unsure[kind] / max(1, tally.rows[kind]),
                        "worst_state_d_ge_8": tally.worst_state[kind], "worst_call": tally.worst_call[kind]}
                 for kind in KINDS},
              "answers_not_float32s": tally.wrong, "per_state": rows}
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print(f"{len(rows)} states of exp-interventions' grids at the {args.profile} profile, TF32 emulated:")
        for kind in KINDS:
            r = result[kind]
            print(f"  {kind:>5}: {r['rows']:>10} rows, {r['share']:.4f} rechecked; the largest share of a state at "
                  f"d >= 8 {r['worst_state_d_ge_8']:.4f}, of a call {r['worst_call']:.4f}")
        print(f"  answers not float32's: {tally.wrong}")
    if tally.wrong:
        raise SystemExit(f"{tally.wrong} rechecked answers differ from float32's")


if __name__ == "__main__":
    main()
