"""How many stacks exp-scaling's d_min searches train, with the seeds of a curve searched together or apart.

Run: python bench/bench_dmin_stacking.py [--profile laptop] [--cache-dir .geofact/runs] [--json]

Replays the page's searches (geofact.d_min_search.find_d_min_streaming, as notebooks/exp-scaling.py calls it) on
the accuracies of the runs the run cache holds, answering a stack at a time as geofact.training.sweep.SweepPool
trains the runs queued at one shape: once with `together` (the seeds of a curve start each N from one guess) and
once without. A run the cache lacks stops the replay with its config (execute the page at that profile first).
Prints, per N, the runs and the stacks each way: on a GPU a small run's step is mostly fixed cost, so stacks, not
runs, are what the searches pay for there (`geofact plan` prices them by their counted steps).
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

from geofact.d_min_search import find_d_min_streaming
from geofact.pipeline.project import Project
from geofact.pipeline.script import page_parameters
from geofact.training.config import TrainConfig
from geofact.training.sweep import load_result


def replay(p: dict, cache_dir: Path, together: bool) -> tuple[list[list[TrainConfig]], dict]:
    """(the stacks trained, in order; {curve: DminSearch}) of the page's searches at parameters `p`."""
    N_values, seeds = sorted(p["N_values"]), p["seeds"]
    regimes = {"learned": False, "frozen": True}
    budgets = [b for b in p["budgets"] if b == "fixed steps"]  # the verdicts' budget
    curves = [(name, w, b, N, s) for name in regimes for w in p["widths"] for b in budgets for N in N_values for s in seeds]
    decided = (p["level"], p["decide_every"]) if p.get("decide_every") is not None else None

    def config(key: tuple, d: int) -> TrainConfig:
        name, w, _, N, s = key
        return TrainConfig(N=N, R=p["R"], d=d, mlp_width=None if w == "4d" else w, frozen_embeddings=regimes[name],
                           seed=s, lr=p["lr"], max_steps=p["max_steps"], batch_size=min(p["batch_size"], N * p["R"]),
                           precision=p.get("precision", "fp32"), stop_accuracy=decided,
                           give_up=p.get("give_up") if decided else None)

    waiting: list[tuple[tuple, int]] = []
    stacks: list[list[TrainConfig]] = []

    def answers() -> list[tuple[tuple, int, float]]:
        shape = config(*waiting[0]).shape_key()
        stack = [(k, d) for k, d in waiting if config(k, d).shape_key() == shape]
        for pair in stack:
            waiting.remove(pair)
        configs = [config(k, d) for k, d in stack]
        stacks.append(configs)
        out = []
        for (k, d), c in zip(stack, configs):
            record = load_result(cache_dir, c)
            if record is None:
                raise SystemExit(f"run {c.key()} is not in {cache_dir}: execute exp-scaling at this profile first ({c.as_dict()})")
            out.append((k, d, record["accuracy"]))
        return out

    follows = {c: c[:3] + (N_values[N_values.index(c[3]) - 1], c[4]) for c in curves if c[3] != N_values[0]}
    searches = find_d_min_streaming(waiting.extend, answers, curves, level=p["level"], d_start=p["d_start"],
                                    d_max=p["d_max"], rel_tol=p["rel_tol"], after=follows,
                                    together={c: c[:4] for c in curves} if together else None)
    return stacks, searches


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", default="laptop")
    parser.add_argument("--cache-dir", type=Path, default=None, help="the run cache (default: this checkout's)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    project = Project.find()
    p = page_parameters(project, "exp-scaling", args.profile, "cpu", None)
    cache_dir = args.cache_dir or project.root / ".geofact" / "runs"
    rows = {}
    for together in (False, True):
        stacks, searches = replay(p, cache_dir, together)
        per_N = Counter(s[0].N for s in stacks)
        runs_N = Counter(c.N for s in stacks for c in s)
        rows["together" if together else "apart"] = {
            "runs": sum(map(len, stacks)), "stacks": len(stacks),
            "per_N": {N: {"runs": runs_N[N], "stacks": per_N[N]} for N in sorted(per_N)},
            "d_min": {" ".join(map(str, k)): s.d_min for k, s in searches.items()}}
    moved = sorted(k for k in rows["apart"]["d_min"] if rows["apart"]["d_min"][k] != rows["together"]["d_min"][k])
    result = {"profile": args.profile, "apart": {k: v for k, v in rows["apart"].items() if k != "d_min"},
              "together": {k: v for k, v in rows["together"].items() if k != "d_min"},
              "d_min_moved": {k: [rows["apart"]["d_min"][k], rows["together"]["d_min"][k]] for k in moved}}
    if args.json:
        print(json.dumps(result, indent=1))
        return
    print(f"exp-scaling's searches at the {args.profile} profile (fixed steps), replayed on the run cache:")
    print(f"{'N':>7} {'apart: runs':>12} {'stacks':>7} {'together: runs':>15} {'stacks':>7}")
    for N in result["apart"]["per_N"]:
        a, t = result["apart"]["per_N"][N], result["together"]["per_N"].get(N, {"runs": 0, "stacks": 0})
        print(f"{N:>7} {a['runs']:>12} {a['stacks']:>7} {t['runs']:>15} {t['stacks']:>7}")
    for way in ("apart", "together"):
        print(f"{way}: {result[way]['runs']} runs in {result[way]['stacks']} stacks")
    print(f"d_min that differ between the two (apart -> together): {result['d_min_moved'] or 'none'}")


if __name__ == "__main__":
    main()
