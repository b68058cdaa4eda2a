"""Sweeps of training runs with a per-run cache: config -> JSON (+ weights as NPZ).

`run_sweep(configs, cache_dir)` trains only the runs whose result is not already in `cache_dir`,
stacking compatible runs (`shape_key()`) in groups of at most `group_size`, and writes
each group's results as soon as it finishes; an interrupted sweep loses at most the group in
flight and a rerun resumes from the cache. Each JSON holds the config, the result, the code
version and the device; the NPZ holds the trained weights under their parameter names.
Single-hop runs (TrainConfig) train with `trainer.train_group`, multi-hop runs (MultiHopConfig) with
`multihop_trainer.train_multihop`; one sweep may hold both.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from geofact.device import describe_device, resolve_device
import geofact
from geofact.provenance import git_commit
from geofact.training.config import MultiHopConfig, TrainConfig
from geofact.training.model import n_params
from geofact.training.multihop_trainer import train_multihop
from geofact.training.trainer import RunResult, train_group

Config = TrainConfig | MultiHopConfig


def _trainer(config: Config) -> Callable[..., list]:
    return train_group if isinstance(config, TrainConfig) else train_multihop


def result_path(cache_dir: Path, config: Config) -> Path:
    return Path(cache_dir) / f"{config.key()}.json"


def provenance(device: torch.device) -> dict:
    """Code version and device recorded with every run."""
    root = Path(geofact.__file__).resolve().parents[1]
    return {"geofact": geofact.__version__, "git_commit": git_commit(root), "device": describe_device(device),
            "torch": torch.__version__}


def save_result(cache_dir: Path, result: RunResult, origin: dict, save_weights: bool, group_size: int = 1) -> None:
    cache_dir = Path(cache_dir)
    cache_dir.mkdir(parents=True, exist_ok=True)
    key = result.config.key()
    if save_weights:
        np.savez_compressed(cache_dir / f"{key}.npz", **{k: v.float().numpy() for k, v in result.params.items()})
    record = {
        "schema": result.config.schema,
        "config": result.config.as_dict(),
        **result.record(),
        "group_seconds": result.seconds,  # wall time of the stacked group this run trained in
        "group_size": group_size,  # runs in that group: group_seconds / group_size is this run's share
        "weights": f"{key}.npz" if save_weights else None,
        "provenance": origin,
    }
    write_json(result_path(cache_dir, result.config), record)


def write_json(path: Path, record: dict) -> None:
    """Write a JSON record atomically: a killed write never leaves a half file to be read as a result."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=1) + "\n")
    tmp.replace(path)


def read_json(path: Path, schema: str, config: dict) -> dict | None:
    """A cached record written by write_json (None when absent); an error if it holds another schema or config."""
    if not path.exists():
        return None
    record = json.loads(path.read_text())
    if record.get("schema") != schema or record["config"] != config:
        raise ValueError(f"{path} does not hold a {schema} record of this config; delete it to recompute")
    return record


def load_result(cache_dir: Path, config: Config) -> dict | None:
    return read_json(result_path(cache_dir, config), config.schema, config.as_dict())


def load_weights(cache_dir: Path, config: Config) -> dict[str, torch.Tensor]:
    """The trained weights of a cached run (saved with save_weights=True)."""
    with np.load(Path(cache_dir) / f"{config.key()}.npz") as z:
        return {k: torch.from_numpy(z[k]) for k in z.files}


def training_seconds(records: list[dict]) -> float:
    """Training compute behind cached runs: each run's share of its stacked group's wall time."""
    return sum(r["group_seconds"] / r["group_size"] for r in records)


CPU_LOGITS_BUDGET = 2**24  # logits entries (runs x batch x N) per stacked group on a CPU: 64 MiB in float32
GPU_LOGITS_BUDGET = 2**30
GPU_PARAM_BUDGET = 2**29


def default_group_size(config: Config, device: torch.device) -> int:
    """How many runs to stack: as many as keep the step's logits (runs x batch x targets x N) within budget.

    bench/bench_trainer.py on a 2-core CPU (N = 4096, batch 1024): stacks of 4 run at 1.05-1.29x
    the plain loop's model-steps/s, stacks of 16 at 1.02-1.11x; at N = 512, batch 512 stacks of 32
    reach ~3x a single run. On a GPU, where one small run cannot fill the device, many more fit.
    """
    logits = config.step_logits
    if device.type == "cpu":
        return max(1, CPU_LOGITS_BUDGET // logits)
    return max(1, min(GPU_PARAM_BUDGET // n_params(config), GPU_LOGITS_BUDGET // logits))


def stack_chunks(items: list, key: Callable[[Any], Any], size: Callable[[Any], int]) -> list[list]:
    """Items grouped by key(item) (what can train stacked), each group cut into chunks of at most
    size(its first item)."""
    groups: dict[Any, list] = defaultdict(list)
    for item in items:
        groups[key(item)].append(item)
    chunks = []
    for group in groups.values():
        n = size(group[0])
        chunks += [group[i : i + n] for i in range(0, len(group), n)]
    return chunks


def run_sweep(configs: list[Config], cache_dir: Path, device: str | torch.device = "cpu",
              group_size: int | None = None, save_weights: bool = True, progress: bool = True) -> list[dict]:
    """Results (cache records) of every config, in order, training the missing ones.

    group_size=None stacks `default_group_size` runs at a time.
    """
    if group_size is not None and group_size < 1:
        raise ValueError(f"group_size must be >= 1 (or None for the default), got {group_size}")
    device = resolve_device(device)
    missing = list({c.key(): c for c in configs if load_result(cache_dir, c) is None}.values())
    chunks = stack_chunks(missing, lambda c: (type(c), c.shape_key()), lambda c: group_size or default_group_size(c, device))
    bar = None
    if progress and chunks:
        from tqdm.auto import tqdm

        bar = tqdm(total=sum(c.max_steps for c in missing), desc=f"training {len(missing)} runs ({len(configs) - len(missing)} cached)", unit="run-step")
    finished_steps, origin = 0, provenance(device)
    for chunk in chunks:
        for result in _trainer(chunk[0])(chunk, device=device, progress=bar):
            save_result(cache_dir, result, origin, save_weights, len(chunk))
        finished_steps += sum(c.max_steps for c in chunk)
        if bar is not None:  # runs that stopped early skip their remaining steps
            bar.n = finished_steps
            bar.refresh()
    if bar is not None:
        bar.close()
    return [load_result(cache_dir, c) for c in configs]
