"""What exp-scaling's hopeless rule (`TrainConfig.give_up`) saves, and whether it failed a trial that would have
crossed, at other factors and margins than the page's, replayed on the run cache.

Run: python bench/bench_give_up.py [--cache-dir .geofact/runs] [--factors 1 1.5 2 3 4] [--margins 0 1 2]
         [--starts 4 0] [--json]

Reads every d_min trial the cache holds that trained under the rule (a record whose config has `give_up`) with its
checks' accuracies (`accuracy_curve`, kept by records since 2026-11-30). A trial's whole curve without the rule is
its own where it did not give up (the rule changes nothing before it fires), and its audit's where it did (the same
config without `give_up`, which exp-scaling trains with `audit_give_up`). Each (factor, margin, start) is replayed on those
curves through `TrainConfig.gives_up`: how many trials it stops, the share of the trials' run-steps it saves, and
which trials it stops that cross later (false stops, which move a d_min). A trial that gave up with no audit in the
cache is left out and counted. Execute exp-scaling at the laptop profile (it audits) first.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

from geofact.pipeline.project import Project
from geofact.training.config import GIVE_UP_MARGIN, TrainConfig, facts_for
from geofact.training.sweep import load_result


def whole_curves(cache_dir: Path) -> tuple[list[tuple[TrainConfig, list[tuple[int, int]], bool, int]], int]:
    """([(the trial without the rule, its checks' counts, whether it passes, the step it ended at)], trials left
    out for want of an audit) of the trials under the rule in the cache."""
    trials, missing = [], 0
    for path in sorted(cache_dir.glob("*.json")):
        record = json.loads(path.read_text())
        if not (record.get("config") or {}).get("give_up") or "accuracy_curve" not in record:
            continue
        plain = dataclasses.replace(TrainConfig(**record["config"]), give_up=None)
        whole = load_result(cache_dir, plain) if record.get("gave_up") else record
        if whole is None or "accuracy_curve" not in whole:
            missing += 1
            continue
        n, (level, every) = plain.N * plain.R, plain.stop_accuracy
        checks = [(int(t), round(a * n)) for t, a in whole["accuracy_curve"] if 0 < t < plain.max_steps and t % every == 0]
        trials.append((plain, checks, whole["accuracy"] >= level, whole["steps"]))
    return trials, missing


def replay(trials: list, factor: float, margin: float, start: int = 0) -> dict:
    """The rule at (factor, margin) on each trial's checks, read from check `start` on (0: the middle of the budget,
    `TrainConfig.give_up_from`): stops, run-steps saved, false stops."""
    stops, saved, total, false = 0, 0, 0, []
    for plain, checks, passes, end in trials:
        config, needed, tops, stop = dataclasses.replace(plain, give_up=factor), facts_for(plain.stop_accuracy[0], plain.N * plain.R), [], None
        for t, count in checks:
            tops.append(max(tops[-1], count) if tops else count)
            if count >= needed:
                break
            if config.gives_up(tops, margin, start or None):
                stop = t
                break
        total += end
        if stop is not None:
            stops, saved = stops + 1, saved + end - stop
            if passes:
                false.append({"N": plain.N, "d": plain.d, "frozen": plain.frozen_embeddings, "width": plain.mlp_width,
                              "seed": plain.seed, "stopped at": stop})
    return {"factor": factor, "margin": margin, "start": start or "middle", "trials": len(trials), "stopped": stops,
            "saved": saved / total if total else 0.0, "false stops": false}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cache-dir", type=Path, default=None, help="the run cache (default: this checkout's)")
    parser.add_argument("--factors", type=float, nargs="+", default=[1.0, 1.5, 2.0, 3.0, 4.0])
    parser.add_argument("--margins", type=float, nargs="+", default=[0.0, 1.0, GIVE_UP_MARGIN])
    parser.add_argument("--starts", type=int, nargs="+", default=[0],
                        help="first checks the rule reads (0: the middle of the budget, the page's)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    cache_dir = args.cache_dir or Project.find().root / ".geofact" / "runs"
    trials, missing = whole_curves(cache_dir)
    if not trials:
        raise SystemExit(f"no d_min trial under the rule with its checks in {cache_dir}: execute exp-scaling first")
    rows = [replay(trials, f, m, st) for st in args.starts for f in args.factors for m in args.margins]
    if args.json:
        print(json.dumps({"trials": len(trials), "left out (no audit)": missing, "rows": rows}, indent=1))
        return
    print(f"{len(trials)} trials ({sum(t[2] for t in trials)} pass without the rule), {missing} left out for want of an audit")
    print(f"{'from check':>10} {'factor':>6} {'margin':>6} {'stopped':>8} {'saved':>7} {'false stops':>12}")
    for r in rows:
        print(f"{r['start']!s:>10} {r['factor']:>6g} {r['margin']:>6g} {r['stopped']:>8} {r['saved']:>7.1%} {len(r['false stops']):>12}")


if __name__ == "__main__":
    main()
