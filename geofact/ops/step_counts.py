"""This checkout's training step counted per stack, for the plan (issue 47, items 1 and 5).

`geofact plan` prices a group by what its step moves and computes as this checkout's code runs it
(geofact.training.traffic.step_traffic, and hop_step_traffic for a multi-hop stack, a step with its share of
the checks: bytes, FLOPs and ops on fake `meta` tensors) at the rates its card was fitted to
(geofact.ops.calibration.CountedRates), so a change to the step moves the plan before any GPU has timed it.
A count takes a few seconds a single-hop stack, about a minute a multi-hop one; they are kept in
`.geofact/traffic/<code version>.json`, where the code version hashes the trainer's sources (`code_version`):
a change to the step counts again, a change to a page or an analysis reads the kept counts.

The counts of the committed code are committed too, as `bench/calibration/step-counts/<code version>.json`
(`COMMITTED`), which a checkout without counts of its own reads: on a fresh clone the first plans of the three
profiles counted for 2-4 minutes on a 2-core VM (2026-12-02), every CI run's plan test among them. They are what
a count on this code gives, counts on `meta` tensors being the same on every machine with this torch; a change to
the step makes them another version's, read by no one, until `python -m geofact.ops.step_counts --commit` copies
this checkout's kept counts there (and removes the other versions').
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path

import torch

from geofact.store import write_json
from geofact.training import fused_ce, step
from geofact.training.config import MultiHopConfig, TrainConfig
from geofact.training.traffic import hop_step_traffic, step_traffic


def switches() -> dict:
    """The step's switches as this process has them: whether geofact's kernels are wanted (GEOFACT_FUSED_CE, the one
    setting of the environment a count on `meta` reads) and the settings a process may change at run time (a test's
    monkeypatch, `geofact.ops.step_ab`'s contexts): where each kind of kernel is on, how whole logits become the
    softmax. Their values as written are in the sources' hash already. A count made under one setting is not the step
    of another (`geofact plan` under GEOFACT_FUSED_CE=0 prices the step of torch's ops alone)."""
    from geofact.training import data, fused_norm, hop_step, optim

    return {"kernels": fused_ce.wanted(), "output layer": step.FUSED_WAY_DEVICES, "softmax": step.WHOLE_WAY,
            "unstored": (fused_ce.UNSTORED_MIN_PROGRAMS, fused_ce.UNSTORED_MAX_D), "norms": fused_norm.DEVICES,
            "sampler": data.FUSED_DEVICES, "AdamW kernel": optim.FUSED_KERNEL_DEVICES,
            "AdamW per run": (optim.PER_RUN_DEVICES, optim.PER_RUN_MIN_PARAMS), "multi-hop step": hop_step.DEVICES}


def code_version() -> str:
    """A hash of torch's version, the step's `switches` and the sources a count runs: geofact/training/,
    geofact's top-level modules (the trainer imports geofact.host, .store, .task and others there) and this module
    (how a stack is counted and what a count holds); a change to any of them counts again."""
    package = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256(torch.__version__.encode() + json.dumps(switches(), sort_keys=True).encode())
    for path in sorted([*package.glob("*.py"), *package.glob("training/*.py"), Path(__file__).resolve()]):
        digest.update(str(path.relative_to(package)).encode() + path.read_bytes())
    return digest.hexdigest()[:16]


WORK = ("flops", "kernel_flops", "bytes", "ops", "kernel_ops")
COMMITTED = Path("bench") / "calibration" / "step-counts"  # the committed code's counts, under the checkout's root


def _read(path: Path | None) -> dict[str, dict]:
    return json.loads(path.read_text()) if path is not None and path.exists() else {}


def _made_under() -> dict:
    """What a committed count file records it was counted under: this torch and the step's `switches`."""
    return json.loads(json.dumps({"torch": torch.__version__, "switches": switches()}))


def commit_counts(root: Path, replace_other: bool = False) -> Path:
    """Copy this checkout's kept counts (`StepCounts`' file for the current `code_version`) to `COMMITTED`, with
    the committed ones of this version, and remove every other version's there: the file to commit. Refused where
    the committed file was counted under another torch or other switches (a CUDA machine's, or under
    GEOFACT_FUSED_CE=0), which would leave the checkouts it serves (a CPU's, CI's) without counts, unless
    `replace_other`."""
    version = code_version()
    kept = Path(root) / ".geofact" / "traffic" / f"{version}.json"
    if not kept.exists():
        raise FileNotFoundError(f"no counts of this code ({version}) in {kept.parent}: run `geofact plan` first")
    target, here = Path(root) / COMMITTED / f"{version}.json", _made_under()
    others = [p for p in (Path(root) / COMMITTED).glob("*.json") if p != target]
    for other in others:
        theirs = _read(other).get("made_under")
        if theirs != here and not replace_other:
            raise ValueError(f"{other} was counted under {theirs}, this process counts under {here}: commit the counts "
                             "of a checkout like the one that made it, or pass --replace")
    for other in others:
        other.unlink()
    counts = {**_read(target).get("counts", {}), **_read(kept)}
    write_json(target, {"made_under": here, "counts": dict(sorted(counts.items()))})
    return target


def kinds(configs: list[TrainConfig | MultiHopConfig]) -> list[TrainConfig | MultiHopConfig]:
    """One run of each kind in a stack (its runs alike but for seed, R and budget), each at the stack's largest R
    (the stack pads its relation tables to it), seed 0: what a stack's step is made of, run for run."""
    top = max(c.R for c in configs)
    return list(dict.fromkeys(replace(c, R=top, seed=0, max_steps=1, loss_threshold=0.0) for c in configs))


def stack_key(configs: list[TrainConfig | MultiHopConfig]) -> str:
    """What a stack's count per run depends on: the kinds of its runs (`kinds`)."""
    runs = sorted(json.dumps({**c.as_dict(), "kind": type(c).__name__}, sort_keys=True) for c in kinds(configs))
    return hashlib.sha256(json.dumps(runs).encode()).hexdigest()[:24]


def _count(configs: list[TrainConfig | MultiHopConfig]) -> dict:
    traffic = hop_step_traffic(configs) if isinstance(configs[0], MultiHopConfig) else step_traffic(configs)
    return {k: getattr(traffic, k) for k in WORK}


class StepCounts:
    """Counted steps {"flops", "kernel_flops", "bytes", "ops", "kernel_ops"} by stack, kept under `root`/.geofact/traffic (none: in memory only).

    A stack of M runs of k kinds is counted at its k kinds and at twice them (other seeds), and priced at the
    line through the two: the stack's work is its fixed part and the same again for every run, runs of one kind
    being alike. So a stack of 42 costs two small counts, not one of 42 runs (whose set-up on fake tensors
    dominates: minutes for the paper profile); tests/ops/test_costs.py checks the line against whole counts."""

    def __init__(self, root: Path | None = None) -> None:
        version = code_version()
        self.path = None if root is None else Path(root) / ".geofact" / "traffic" / f"{version}.json"
        committed = None if root is None else Path(root) / COMMITTED / f"{version}.json"
        self.counts: dict[str, dict] = {**_read(committed).get("counts", {}), **_read(self.path)}
        self.counted = 0  # stacks counted here, found in neither file

    def __call__(self, configs: list[TrainConfig | MultiHopConfig]) -> dict:
        each = kinds(configs)
        copies = _copies(configs, len(each))
        key = stack_key(configs) + ("" if copies == 1 else f"x{copies}")
        if copies == 0:  # the line's second point would step differently from the stack: the stack itself
            key += f"/{len(configs)}"
        if key not in self.counts:
            if copies == 0:
                whole = _count([replace(c, seed=s) for s, c in enumerate(configs)])
                self.counts[key] = {"runs": len(configs), "at": whole, "per_run": {k: 0.0 for k in WORK}}
            else:
                base = [replace(c, seed=s) for s in range(copies) for c in each]
                one = _count(base)
                two = _count(base + [replace(c, seed=copies + s) for s in range(copies) for c in each])
                self.counts[key] = {"runs": len(base), "at": one, "per_run": {k: (two[k] - one[k]) / len(base) for k in WORK}}
            self.counted += 1
            if self.path is not None:
                write_json(self.path, self.counts)
        line = self.counts[key]
        return {k: line["at"].get(k, 0.0) + (len(configs) - line["runs"]) * line["per_run"].get(k, 0.0) for k in WORK}


def _copies(configs: list[TrainConfig | MultiHopConfig], kinds: int) -> int:
    """How many copies of the stack's kinds its line is counted from (the line through that many and twice): 1,
    unless the fused output layer leaves the softmax unstored in the stack but not at its kinds
    (geofact.training.fused_ce.unstored, which depends on the runs in the stack); then the fewest copies that
    do. 0 where the stack stores it but twice its kinds would not: the stack is counted whole (it is small)."""
    if not fused_ce.wanted() or "meta" not in step.FUSED_WAY_DEVICES:  # the output layer does not step by size
        return 1
    first = configs[0]
    B, D = first.batch_size * (first.n_targets if isinstance(first, MultiHopConfig) else 1), first.d
    if fused_ce.unstored(len(configs), B, D):
        copies = 1
        while not fused_ce.unstored(copies * kinds, B, D):
            copies += 1
        return copies
    return 1 if not fused_ce.unstored(2 * kinds, B, D) else 0


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="commit this checkout's counted steps (see the module's docstring)")
    parser.add_argument("--commit", action="store_true", required=True,
                        help="copy .geofact/traffic/<code version>.json to bench/calibration/step-counts/")
    parser.add_argument("--replace", action="store_true",
                        help="replace committed counts made under another torch or other switches")
    parser.add_argument("--root", type=Path, default=Path.cwd())
    args = parser.parse_args()
    print(commit_counts(args.root, args.replace))
