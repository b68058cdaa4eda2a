"""Records on disk: plain JSON types for them, and writes that a killed process never leaves half done."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Callable

import numpy as np


def to_jsonable(value: Any) -> Any:
    """numpy scalars/arrays and nested containers -> plain JSON types (NaN/inf as strings)."""
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return to_jsonable(value.tolist())
    if isinstance(value, np.generic):
        return to_jsonable(value.item())
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def write_atomically(path: Path, write: Callable[[Any], None] | bytes, sync: bool = False) -> None:
    """`write(file)` (or the bytes given) into a temporary file named for this process, then renamed over
    `path`: a killed write never leaves a half file, and two processes writing the same record never
    share a temporary. `sync` forces the bytes to disk before the rename (states a resume depends on)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        if isinstance(write, bytes):
            f.write(write)
        else:
            write(f)
        if sync:
            f.flush()
            os.fsync(f.fileno())
    tmp.replace(path)


def write_json(path: Path, record: dict) -> None:
    """Write a JSON record atomically."""
    write_atomically(Path(path), (json.dumps(record, indent=1) + "\n").encode())
