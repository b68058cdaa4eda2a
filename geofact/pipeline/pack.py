"""`geofact pack` / `geofact unpack`: results that travel from a machine without a way out (an
air-gapped GPU node) to the one that renders the book, without the weights.

The heavy work of a page (training, the per-model analyses) is cached as JSON records under
`.geofact/runs/` (geofact.training.sweep, geofact.analysis.trajectory), beside the weights (NPZ),
which at the paper's scale are tens of GB. `pack` writes the JSON records, and the pages and results a
profile executed there, if any, into one .tar.gz with a manifest (file list and sha256, the commit
and the device); `unpack` checks it and puts every file in place. There, `geofact run --records-only`
executes the pages from the records: nothing trains, no weights are needed, and each page's
provenance names the device and commit its records were made on.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import time
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import nbformat

from geofact.pipeline.project import Project
from geofact.provenance import git_commit
from geofact.store import write_atomically

SCHEMA = "geofact.pack/1"
MANIFEST = "geofact-pack.json"
SKIPPED_DIRS = ("groups",)  # states of groups in flight: weights, and only meaningful where they train


@dataclass(frozen=True)
class Packed:
    path: Path
    files: int
    bytes_in: int  # the files' total size
    bytes_out: int  # the archive's size


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def pack_members(project: Project, profile: str) -> list[Path]:
    """What `pack` takes, relative to the project root: every JSON record of the run cache, and the
    results and executed pages of `profile`."""
    root = project.root
    records = [p for p in sorted(project.runs_dir.rglob("*.json"))
               if not set(p.relative_to(project.runs_dir).parts[:-1]) & set(SKIPPED_DIRS)] if project.runs_dir.exists() else []
    results = sorted(project.results_dir.glob(f"{profile}/*.json"))
    pages = [p for p in sorted(project.book_dir.glob("*.ipynb"))
             if nbformat.read(p, as_version=4).metadata.get("geofact", {}).get("profile") == profile]
    return [p.relative_to(root) for p in records + results + pages]


def _made_on(blobs: dict[str, bytes]) -> list[str]:
    """The devices the packed records and results name in their provenance."""
    devices = set()
    for name, blob in blobs.items():
        if name.endswith(".json"):
            device = (json.loads(blob).get("provenance") or {}).get("device")
            if isinstance(device, str):
                devices.add(device)
    return sorted(devices)


def pack(project: Project, out: Path, profile: str = "paper") -> Packed:
    """Write the records, results and pages of `profile` to the archive `out` (see the module docstring)."""
    members = pack_members(project, profile)
    if not members:
        raise ValueError(f"nothing to pack: no records under {project.runs_dir} and no results of profile {profile!r}")
    data = {str(PurePosixPath(*m.parts)): (project.root / m).read_bytes() for m in members}
    manifest = {"schema": SCHEMA, "profile": profile, "created_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                "git_commit": git_commit(project.root), "devices": _made_on(data),
                "files": {name: _sha256(blob) for name, blob in data.items()}}
    out = Path(out)

    def write_tar(f) -> None:
        with tarfile.open(fileobj=f, mode="w:gz") as tar:
            for name, blob in [(MANIFEST, json.dumps(manifest, indent=1).encode()), *data.items()]:
                info = tarfile.TarInfo(name)
                info.size, info.mtime = len(blob), int(time.time())
                tar.addfile(info, io.BytesIO(blob))

    write_atomically(out, write_tar)
    return Packed(out, len(data), sum(len(b) for b in data.values()), out.stat().st_size)


@dataclass(frozen=True)
class Unpacked:
    written: list[str]  # new files, and pages replaced (book/ holds one profile's pages at a time)
    identical: list[str]  # already in place, byte for byte
    manifest: dict


def unpack(project: Project, archive: Path, force: bool = False) -> Unpacked:
    """Check `archive` (manifest, sha256 of every file, no path outside the project) and put its files in
    place. Its pages replace those in book/ (which holds the pages of one profile); a record or results
    file already there with other contents is an error naming it, unless `force`."""
    try:
        with tarfile.open(archive, "r:gz") as tar:
            blobs = {}
            for info in tar.getmembers():
                if not info.isfile():
                    raise ValueError(f"{archive}: {info.name!r} is not a plain file; not a geofact pack")
                blobs[info.name] = tar.extractfile(info).read()
    except (tarfile.TarError, EOFError, zlib.error) as exc:  # truncated or not a .tar.gz at all
        raise ValueError(f"{archive} is not a readable .tar.gz (a truncated copy?): {exc}") from None
    if MANIFEST not in blobs:
        raise ValueError(f"{archive} has no {MANIFEST}: not made by `geofact pack`")
    manifest = json.loads(blobs.pop(MANIFEST))
    if manifest.get("schema") != SCHEMA:
        raise ValueError(f"{archive}: manifest schema must be {SCHEMA!r}, got {manifest.get('schema')!r}")
    if set(blobs) != set(manifest["files"]):
        raise ValueError(f"{archive}: files and manifest differ: {sorted(set(blobs) ^ set(manifest['files']))}")
    allowed = (".geofact/runs/", "results/", "book/")
    for name, blob in blobs.items():
        parts = PurePosixPath(name).parts
        if PurePosixPath(name).is_absolute() or ".." in parts or not name.startswith(allowed):
            raise ValueError(f"{archive}: {name!r} would land outside {', '.join(allowed)}")
        if _sha256(blob) != manifest["files"][name]:
            raise ValueError(f"{archive}: {name!r} does not match its sha256 in the manifest (a damaged archive)")
    written, identical, clashes = [], [], []
    for name, blob in blobs.items():
        target = project.root / name
        if target.exists():
            if target.read_bytes() == blob:
                identical.append(name)
                continue
            if not force and not name.startswith("book/"):
                clashes.append(name)
                continue
        written.append(name)
    if clashes:
        raise ValueError(f"{len(clashes)} file(s) of {archive} differ from those in place, e.g. {clashes[:3]}; "
                         f"pass --force to overwrite them")
    for name in written:
        write_atomically(project.root / name, blobs[name])
    return Unpacked(written, identical, manifest)
