"""How far C drawn from `others_per_edit` other relations per edit moves a rank sweep (geofact.analysis.interventions).

Reads the interventions records of one run cache that hold the same state swept with every other relation scored
(`others_per_edit` None) and with p drawn per edit, and prints, over the states where p < R - 1 (elsewhere the two
are the same count): the difference of C at every rank and of the best selectivity, per R.

Make the records by executing exp-interventions under the laptop profile and under a copy of it whose
exp-interventions section adds `others_per_edit: p` (a profile is a YAML file in notebooks/profiles), with one
run cache; then

    python bench/compare_others_sampling.py --cache .geofact --p 1 2
"""

from __future__ import annotations

import argparse
import collections
import json
from pathlib import Path

import numpy as np


def records(cache: Path) -> dict[tuple, dict]:
    """{(config, step, the modules' hashes, the other parameters): {others_per_edit: values}} of the interventions
    records."""
    by_state: dict[tuple, dict] = collections.defaultdict(dict)
    for path in cache.rglob("analyses/interventions/*.json"):
        record = json.loads(path.read_text())
        params = record["params"]
        if "others_per_edit" in params:
            # the hashes of the modules the analysis read, not the code hash (which reads the page's globals,
            # others_per_edit among them), nor the commit (a record is reused while its modules stay the same)
            key = (json.dumps(record["config"], sort_keys=True), record["step"], json.dumps(record.get("modules"), sort_keys=True),
                   json.dumps({k: v for k, v in params.items() if k != "others_per_edit"}, sort_keys=True))
            by_state[key][params["others_per_edit"]] = record["values"]
    return by_state


def compare(by_state: dict[tuple, dict], p: int) -> dict:
    """The differences (sampled minus full) over the states swept both ways with p < R - 1."""
    rank_c, best, per_R = [], [], collections.defaultdict(list)
    for key, by in by_state.items():
        R = json.loads(key[0])["R"]
        if None not in by or p not in by or p >= R - 1:
            continue
        full, sampled = by[None], by[p]
        for (k, follows, stays), (k2, follows2, stays2) in zip(full["sweep"], sampled["sweep"]):
            if (k, follows) != (k2, follows2):  # the edited relation is scored in full either way
                raise ValueError(f"state {key}: rank {k} differs in A ({follows} against {follows2})")
            rank_c.append(stays2 - stays)
        best.append(sampled["selectivity"] - full["selectivity"])
        per_R[R].append(best[-1])

    def summary(values: list[float]) -> dict:
        v = np.asarray(values)
        return {"n": len(v), "mean": float(v.mean()), "sd": float(v.std()), "max_abs": float(np.abs(v).max())}

    if not best:
        raise ValueError(f"no state was swept both with every other relation and with others_per_edit = {p} (< R - 1)")
    unmatched = sum(1 for by in by_state.values() if (None in by) != (p in by))
    return {"p": p, "states": len(best), "unmatched_states": unmatched, "C_every_rank": summary(rank_c), "best_selectivity": summary(best),
            "best_selectivity_by_R": {R: summary(v) for R, v in sorted(per_R.items())}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path, default=Path(".geofact"), help="the run cache (default .geofact)")
    parser.add_argument("--p", type=int, nargs="+", default=[1, 2], help="the others_per_edit values to compare")
    args = parser.parse_args()
    by_state = records(args.cache)
    for p in args.p:
        print(json.dumps(compare(by_state, p)))


if __name__ == "__main__":
    main()
