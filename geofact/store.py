"""Every record geofact keeps on disk, behind one key scheme and one way to read and write.

A record is a JSON file (schema, config, result, provenance) named by `record_key` of what determines
it, with its tensors, if any, in an NPZ beside it. Writes are atomic, so a killed process never leaves
half a record, and work resumes from the records it finds.

| record | where (under the cache root) | key content |
|---|---|---|
| trained run | `<key>.json`, `<key>.npz`, `<key>-step<t>.npz` | the run's config |
| group training state | `groups/<key>.json` + `.npz` | the group's run keys and settings |
| MLP-freeze transfer | `transfer/<key>.json` | the transfer's config |
| analysis of a run's state | `analyses/<name>/<run key>-<state>-<key>.json` | the parameters and the analysis code |
| trainer benchmark | `bench/<key>.json` | the benchmark's shapes |
| real-LM probe | `real-lm-probing/<model>/<category>.<relation>.<key>.json` | the probe's config and the category's content |
| corpus LM | `corpus-lm/corpus-lm-<key>.json` + `.npz` | the LM's config and its categories' content |

The cache root is `.geofact/runs/` of the checkout unless a page is given another (`Page.cache`).
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
from pathlib import Path
from typing import Any, Callable

import numpy as np

from geofact.settings import RECORDS_ONLY_ENV, records_only

KEY_LENGTH = 16  # hex digits of sha256: 64 bits, no collision among the millions of records a sweep makes
# Records once named by the same sha256 cut elsewhere (probes and corpus LMs at 12 digits, group states
# at 24): `keyed` renames them.
LEGACY_KEY_LENGTHS = (12, 24)
SEEN: dict[str, set[str]] = {"device": set(), "git_commit": set()}  # where the records this process read were made


def _digest(content: Any) -> str:
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()


def record_key(content: Any) -> str:
    """The cache key of a record: sha256 of the canonical JSON (sorted keys) of what determines it."""
    return _digest(content)[:KEY_LENGTH]


def keyed(path: Path, content: Any) -> Path:
    """`path`, whose name holds `record_key(content)`. A record cached under another cut of the same
    sha256 (`LEGACY_KEY_LENGTHS`) is renamed to it first, so that nothing computed before the one key
    scheme is computed again; where the tree is read-only the legacy file is read where it lies."""
    path, digest = Path(path), _digest(content)
    key = digest[:KEY_LENGTH]
    if key not in path.name:
        raise ValueError(f"{path.name} is not named by its record key {key}")
    if path.exists():
        return path
    for length in LEGACY_KEY_LENGTHS:
        legacy = path.with_name(path.name.replace(key, digest[:length]))
        if legacy.exists():
            try:
                legacy.replace(path)
            except FileNotFoundError:  # another process renamed it first
                pass
            except OSError:
                return legacy
            break
    return path


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


def write_arrays(path: Path, arrays: dict[str, np.ndarray], compress: bool = True, sync: bool = False) -> None:
    """Write named arrays as an NPZ atomically (no pickles: plain arrays only)."""
    buffer = io.BytesIO()
    (np.savez_compressed if compress else np.savez)(buffer, **arrays)
    write_atomically(Path(path), buffer.getvalue(), sync=sync)


def read_arrays(path: Path) -> dict[str, np.ndarray]:
    """The named arrays of an NPZ written by `write_arrays`."""
    with np.load(path, allow_pickle=False) as z:
        return {name: z[name] for name in z.files}


def note_origin(record: dict) -> dict:
    """Remember where a record read by this process was made (its device and commit), for the page's
    provenance (`geofact.pipeline.runner` reads `SEEN` at the end of a page); returns the record."""
    origin = record.get("provenance") or {}
    for field in SEEN:
        if origin.get(field):
            SEEN[field].add(str(origin[field]))
    return record


def read_record(path: Path, schema: str, config: dict) -> dict | None:
    """A cached record written by `write_json` (None when absent; its origin noted, `note_origin`); an
    error if it holds another schema or config."""
    path = Path(path)
    if not path.exists():
        return None
    record = json.loads(path.read_text())
    if record.get("schema") != schema or record["config"] != config:
        raise ValueError(f"{path} does not hold a {schema} record of this config; delete it to recompute")
    return note_origin(record)


class RecordMissing(RuntimeError):
    """Records-only execution needed work that is not among the records (training, or a model's weights)."""


def refuse_in_records_only(what: str) -> None:
    """Raise RecordMissing in records-only execution: `what` would need training or weights."""
    if records_only():
        raise RecordMissing(f"{what} is not among the records, and {RECORDS_ONLY_ENV} forbids computing it here: "
                            f"compute it where the weights are (e.g. the GPU node) and `geofact pack` again")
