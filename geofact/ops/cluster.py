"""Sweeps on a cluster: each stacked group of runs a submitit job (SLURM), results through the same cache.

`SweepPool(..., executor=...)` (and so `run_sweep`, and every page) hands each chunk of stacked runs
to a submitit executor instead of local worker processes: the job trains the group and writes its
records into the cache (which must be on a filesystem the jobs share), and the pool reads them when
the job is done. A job killed at its wall limit leaves the group's last state (geofact.training.resume);
running the sweep again re-forms the group and resumes it.

Pages choose the executor from the environment, so a whole profile goes to the cluster unchanged:

    geofact run --profile paper --device cuda --executor slurm \
        --executor-option slurm_partition=gpu --executor-option timeout_min=120 --executor-option gpus_per_node=1

sets GEOFACT_EXECUTOR=slurm and GEOFACT_EXECUTOR_OPTIONS (JSON, submitit's `update_parameters`).
`local` runs the jobs as processes on this machine (submitit's LocalExecutor: the tests use it).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from geofact.settings import EXECUTOR_ENV, EXECUTOR_OPTIONS_ENV

KINDS = ("local", "slurm")


def make_executor(kind: str, folder: Path, options: dict[str, Any] | None = None):
    """A submitit executor: `local` (processes here) or `slurm`; `options` go to `update_parameters`."""
    if kind not in KINDS:
        raise ValueError(f"executor must be one of {KINDS}, got {kind!r}")
    try:
        import submitit
    except ImportError as err:
        raise RuntimeError("cluster sweeps need submitit: pip install -e '.[cluster]'") from err
    executor = submitit.LocalExecutor(folder) if kind == "local" else submitit.AutoExecutor(folder, cluster="slurm")
    executor.update_parameters(**{"timeout_min": 60, **(options or {})})
    return executor


def executor_from_env(folder: Path):
    """The executor $GEOFACT_EXECUTOR names (with $GEOFACT_EXECUTOR_OPTIONS), or None for local workers."""
    kind = os.environ.get(EXECUTOR_ENV)
    if not kind:
        return None
    try:
        options = json.loads(os.environ.get(EXECUTOR_OPTIONS_ENV) or "{}")
    except json.JSONDecodeError as err:
        raise ValueError(f"{EXECUTOR_OPTIONS_ENV} must be a JSON object, got {os.environ[EXECUTOR_OPTIONS_ENV]!r}") from err
    if not isinstance(options, dict):
        raise ValueError(f"{EXECUTOR_OPTIONS_ENV} must be a JSON object, got {options!r}")
    return make_executor(kind, folder, options)


def parse_options(pairs: list[str]) -> dict[str, Any]:
    """`key=value` pairs (values read as JSON when they parse: numbers, true/false) -> a dict."""
    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"executor options must be key=value, got {pair!r}")
        try:
            options[key] = json.loads(value)
        except json.JSONDecodeError:
            options[key] = value
    return options
