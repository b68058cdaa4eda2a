"""What `geofact run` tells the code a page runs, as environment variables.

The publishing side (`geofact.pipeline`) sets these; the science side reads them. Neither imports the
other: this module, with the thread count of `geofact.device` (THREADS_ENV) and the page count of
`geofact.processes` (PAGES_AT_ONCE_ENV), is the whole interface between them.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

RESULTS_PATH_ENV = "GEOFACT_RESULTS_PATH"  # where the page's Report writes its results (set only under `geofact run`)
RECORDS_ONLY_ENV = "GEOFACT_RECORDS_ONLY"  # `geofact run --records-only`: pages execute from cached records alone
DEADLINE_ENV = "GEOFACT_DEADLINE"  # Unix time after which no new work starts and work in flight checkpoints
EXECUTOR_ENV = "GEOFACT_EXECUTOR"  # where sweeps run their groups: "local" or "slurm"
EXECUTOR_OPTIONS_ENV = "GEOFACT_EXECUTOR_OPTIONS"  # JSON options for that executor


def is_batch_run() -> bool:
    """True when the notebook is being executed by `geofact run` (which sets the results path)."""
    return bool(os.environ.get(RESULTS_PATH_ENV))


def records_only() -> bool:
    return os.environ.get(RECORDS_ONLY_ENV, "") not in ("", "0")


def deadline() -> float | None:
    """The deadline (Unix time) from $GEOFACT_DEADLINE, or None when there is no budget."""
    value = os.environ.get(DEADLINE_ENV)
    if not value:
        return None
    try:
        return float(value)
    except ValueError:
        raise ValueError(f"{DEADLINE_ENV} must be a Unix time in seconds, got {value!r}") from None


def past_deadline() -> bool:
    limit = deadline()
    return limit is not None and time.time() >= limit


def checkout_root(start: Path | None = None) -> Path:
    """The nearest directory at or above `start` (default: the working directory) holding _toc.yml and
    notebooks/: a geofact checkout, where both the pages and the publisher find their files."""
    here = Path(start or Path.cwd()).resolve()
    for candidate in (here, *here.parents):
        if (candidate / "_toc.yml").exists() and (candidate / "notebooks").is_dir():
            return candidate
    raise FileNotFoundError(f"no geofact checkout (a folder with _toc.yml and notebooks/) at or above {here}")


def runs_dir(root: Path) -> Path:
    """The training-run cache of the checkout at `root` (geofact.training.sweep): one JSON + NPZ per run, not committed."""
    return Path(root) / ".geofact" / "runs"

