"""`geofact pack` / `geofact unpack`: results that travel from a machine without a way out (an
air-gapped GPU node) to the one that renders the book, without the weights.

The heavy work of a page (training, the per-model analyses) is cached as JSON records under
`.geofact/runs/` (geofact.training.sweep, geofact.analysis.trajectory), beside the weights (NPZ),
which at the paper's scale are tens of GB. `pack` writes the JSON records, and the pages and results a
profile executed there, if any, into one .tar.gz with a manifest (file list and sha256, the commit
and the device); `unpack` checks it and puts every file in place. There, `geofact run --records-only`
executes the pages from the records: nothing trains, no weights are needed, and each page's
provenance names the device and commit its records were made on.

What a GPU lease brings back is limited to a few files of a few MiB each (8 of 16 MiB), so an archive
larger than `part_bytes` is written as numbered parts, `ARCHIVE.part1of3` ... `ARCHIVE.part3of3`, at
most MAX_PARTS of them; `unpack` takes the archive, all its parts, or one part (and finds the rest
beside it). Both run where the node's packages are (no nbformat: a page is read as the JSON it is).
"""

from __future__ import annotations

import glob
import hashlib
import io
import json
import math
import re
import tarfile
import time
import zlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from geofact.code_hash import module_hashes
from geofact.pipeline.project import Project
from geofact.store import write_atomically

SCHEMA = "geofact.pack/1"
MANIFEST = "geofact-pack.json"
SKIPPED_DIRS = ("groups",)  # states of groups in flight: weights, and only meaningful where they train
DEFAULT_PART_BYTES = 16 * 2**20  # the largest file a GPU lease brings back
MAX_PARTS = 8  # the most files it brings back
PART = re.compile(r"(?P<archive>.+)\.part(?P<index>[1-9][0-9]*)of(?P<count>[1-9][0-9]*)")


@dataclass(frozen=True)
class Packed:
    paths: list[Path]  # the archive, or its parts in order
    files: int
    bytes_in: int  # the files' total size
    bytes_out: int  # the archive's size (all parts together)


def part_path(archive: Path, index: int, count: int) -> Path:
    """Part `index` (from 1) of `count` of `archive`."""
    return archive.with_name(f"{archive.name}.part{index}of{count}")


def _siblings(archive: Path) -> list[Path]:
    """Parts of `archive` already beside it, of any count."""
    found = archive.parent.glob(f"{glob.escape(archive.name)}.part*of*")
    return sorted(p for p in found if (m := PART.fullmatch(p.name)) and m["archive"] == archive.name)


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
             if json.loads(p.read_bytes()).get("metadata", {}).get("geofact", {}).get("profile") == profile]
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


def pack(project: Project, out: Path, profile: str = "paper", part_bytes: int = DEFAULT_PART_BYTES) -> Packed:
    """Write the records, results and pages of `profile` to the archive `out`, in parts of at most
    `part_bytes` when it is larger (see the module docstring). Parts or an archive of an earlier `pack`
    to the same name are removed, so that what lies beside `out` is one archive."""
    from geofact.provenance import git_commit  # torch: imported when packing, not for the CLI's help

    if not isinstance(part_bytes, int) or part_bytes < 1:
        raise ValueError(f"part_bytes must be an integer >= 1, got {part_bytes!r}")
    members = pack_members(project, profile)
    if not members:
        raise ValueError(f"nothing to pack: no records under {project.runs_dir} and no results of profile {profile!r}")
    data = {str(PurePosixPath(*m.parts)): (project.root / m).read_bytes() for m in members}
    manifest = {"schema": SCHEMA, "profile": profile, "created_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                "git_commit": git_commit(project.root), "devices": _made_on(data),
                "analysis_modules": module_hashes(project.root / "geofact"),
                "files": {name: _sha256(blob) for name, blob in data.items()}}
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, blob in [(MANIFEST, json.dumps(manifest, indent=1).encode()), *data.items()]:
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(blob), int(time.time())
            tar.addfile(info, io.BytesIO(blob))
    archive = buffer.getvalue()
    count = math.ceil(len(archive) / part_bytes)
    if count > MAX_PARTS:
        raise ValueError(f"the archive is {len(archive)} bytes ({len(archive) / 2**20:.1f} MiB): more than {MAX_PARTS} "
                         f"parts of {part_bytes} bytes (part_bytes, --part-bytes); at most {MAX_PARTS} files come back "
                         f"from a GPU lease")
    out = Path(out)
    paths = [out] if count == 1 else [part_path(out, i, count) for i in range(1, count + 1)]
    for stale in {*_siblings(out), out} - set(paths):
        stale.unlink(missing_ok=True)
    for i, path in enumerate(paths):
        write_atomically(path, archive[i * part_bytes:(i + 1) * part_bytes])
    return Packed(paths, len(data), sum(len(b) for b in data.values()), len(archive))


def read_archive(paths: list[Path]) -> tuple[Path, bytes]:
    """(the archive's name, its bytes) from what `paths` name: the archive itself; all its parts
    (ARCHIVE.partIofN, in any order, anywhere); one part, whose siblings are found beside it; or the
    archive's name where only its parts lie beside it. A missing part is an error naming it."""
    paths = [Path(p) for p in paths]
    if len(paths) == 1 and not PART.fullmatch(paths[0].name):
        archive = paths[0]
        if archive.exists():
            return archive, archive.read_bytes()
        paths = _siblings(archive)[:1]
        if not paths:
            raise ValueError(f"{archive}: no such archive, nor parts {archive.name}.partIofN beside it")
    matches = [PART.fullmatch(p.name) for p in paths]
    wholes = {(m["archive"], int(m["count"])) if m else None for m in matches}
    if not paths or None in wholes or len(wholes) != 1:
        raise ValueError(f"archive must be one archive, or parts of one archive (ARCHIVE.partIofN with the same "
                         f"ARCHIVE and N), got {[str(p) for p in paths]}")
    name, count = wholes.pop()
    if len(paths) == 1:  # one part: the others lie beside it
        given = {i: part_path(paths[0].with_name(name), i, count) for i in range(1, count + 1)}
    else:
        given = {int(m["index"]): p for m, p in zip(matches, paths)}
    extra = sorted(set(given) - set(range(1, count + 1)))
    if extra:
        raise ValueError(f"{name} is in {count} parts: there is no part {extra[0]}of{count}")
    missing = [f"{name}.part{i}of{count}" for i in range(1, count + 1) if i not in given or not given[i].exists()]
    if missing:
        raise ValueError(f"{name} is in {count} parts; missing: {', '.join(missing)} (give every part, or one with "
                         f"the others beside it)")
    return paths[0].with_name(name), b"".join(given[i].read_bytes() for i in range(1, count + 1))


@dataclass(frozen=True)
class Unpacked:
    written: list[str]  # new files, and pages replaced (book/ holds one profile's pages at a time)
    identical: list[str]  # already in place, byte for byte
    manifest: dict
    kept_newer: list[str] = field(default_factory=list)  # results in place executed later than the archive's
    warnings: list[str] = field(default_factory=list)  # what in the archive this checkout will not read


def _executed_at(blob: bytes) -> str | None:
    """A results file's `provenance.executed_at` ("YYYY-MM-DD HH:MM UTC", so strings order as times)."""
    try:
        return ((json.loads(blob).get("provenance") or {}).get("executed_at")) or None
    except (ValueError, AttributeError):
        return None


def unpack(project: Project, archive: Path | list[Path], force: bool = False) -> Unpacked:
    """Check `archive` (the archive or its parts, see `read_archive`; manifest, sha256 of every file, no
    path outside the project) and put its files in place. Its pages replace those in book/ (which holds
    the pages of one profile); a record or results file already there with other contents is an error
    naming it, unless `force`. Even forced, a results file executed later than the archive's stays, with its
    page (a lease packs the results it unpacked from older archives beside its own: the lease of 2026-11-28
    carried the theory pages' paper results of 2026-11-26 over those of 2026-11-27)."""
    archive, data = read_archive([archive] if isinstance(archive, (str, Path)) else archive)
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
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
    written, identical, clashes, kept_newer = [], [], [], []
    for name, blob in blobs.items():
        target = project.root / name
        if target.exists():
            here = target.read_bytes()
            if here == blob:
                identical.append(name)
                continue
            theirs, ours = _executed_at(blob), _executed_at(here)
            if name.startswith("results/") and theirs and ours and theirs < ours:
                kept_newer.append(name)
                continue
            if not force and not name.startswith("book/"):
                clashes.append(name)
                continue
        written.append(name)
    kept_pages = {f"book/{PurePosixPath(name).stem}.ipynb" for name in kept_newer}  # a page and its results are one execution
    kept_newer += [name for name in written if name in kept_pages]
    written = [name for name in written if name not in kept_pages]
    if clashes:
        raise ValueError(f"{len(clashes)} file(s) of {archive} differ from those in place, e.g. {clashes[:3]}; "
                         f"pass --force to overwrite them")
    for name in written:
        write_atomically(project.root / name, blobs[name])
    return Unpacked(written, identical, manifest, kept_newer, _analysis_warnings(project, manifest, blobs))


def _analysis_name(member: str) -> str | None:
    """The analysis an archive member is a record of (a grid run's, .geofact/runs/analyses/NAME/..., or a spike
    study's kept state's, under its variant's folder), or None."""
    parts = PurePosixPath(member).parts
    if parts[:2] != (".geofact", "runs") or "analyses" not in parts[2:-2]:
        return None
    return parts[parts.index("analyses", 2) + 1]


def _analysis_warnings(project: Project, manifest: dict, blobs: dict[str, bytes]) -> list[str]:
    """Where some of the archive's analysis records were keyed by other code than this checkout's, a line saying how
    many and which modules differ: each record names the modules its analysis read (`modules`,
    geofact.code_hash.analysis_modules), the manifest their hashes where it was packed. A record that reads a module
    hashing otherwise here is not read; one whose modules all hash alike is read unless its analysis function (a
    notebook's, which the key hashes too) changed. Records that name no modules (keyed before 2026-11-30's
    per-analysis keys) are not read either."""
    records = {name: blob for name, blob in blobs.items() if name.endswith(".json") and _analysis_name(name)}
    if not records:
        return []
    theirs, ours = manifest.get("analysis_modules"), module_hashes(project.root / "geofact")
    commit = str(manifest.get("git_commit"))[:12]
    unnamed, unread, differ = 0, Counter(), set()
    for name, blob in records.items():
        try:
            record = json.loads(blob)
        except ValueError:  # not JSON: no page reads it either
            record = None
        modules = record.get("modules") if isinstance(record, dict) else None
        if not isinstance(theirs, dict) or not isinstance(modules, list):
            unnamed += 1
            continue
        changed = {m for m in modules if theirs.get(m) != ours.get(m)}
        if changed:
            unread[_analysis_name(name)] += 1
            differ |= changed
    lines = []
    if unnamed:
        lines.append(f"{unnamed} of its {len(records)} analysis records name no modules that keyed them (commit {commit}; "
                     f"records keyed before 2026-11-30's per-analysis keys, or unreadable): the pages here will not read "
                     f"them, and compute them again where the weights are")
    if unread:
        lines.append(f"{sum(unread.values())} of its {len(records)} analysis records ("
                     + ", ".join(f"{n} of {a}" for a, n in sorted(unread.items()))
                     + f") read code that differs here, in {', '.join(sorted(differ))} (commit {commit}): the pages here "
                     f"will not read them, and compute them again where the weights are")
    return lines


def _records(source: Path, pattern: str, folder: str, depth: int) -> list[dict]:
    """The JSON objects of a run-cache folder (`pattern` under it) or of a pack archive (or its parts: its .json
    members whose `depth`-th parent folder is named `folder`)."""
    source = Path(source)
    if source.is_dir():
        texts = [p.read_text() for p in sorted(source.glob(pattern))]
    else:
        _, data = read_archive([source])
        with tarfile.open(fileobj=io.BytesIO(data)) as archive:
            members = [m for m in archive.getmembers() if m.isfile() and m.name.endswith(".json")
                       and len(PurePosixPath(m.name).parents) > depth
                       and PurePosixPath(m.name).parents[depth].name == folder]
            texts = [archive.extractfile(m).read().decode() for m in members]
    return [r for r in map(json.loads, texts) if isinstance(r, dict)]


def read_run_records(source: Path) -> list[dict]:
    """The run records (JSON with a loss curve) of a run-cache folder or a pack archive (or its parts)."""
    return [r for r in _records(source, "*.json", "runs", 0) if r.get("loss_curve") and "config" in r]


def read_analysis_records(source: Path) -> list[dict]:
    """The analysis records of a state (geofact.analysis.trajectory: runs/analyses/NAME/*.json, and a spike study's
    runs/variants/.../analyses/NAME/*.json) of a run-cache folder or a pack archive (or its parts)."""
    return [r for r in _records(source, "**/analyses/*/*.json", "analyses", 1)
            if r.get("schema") == "geofact.analysis.state/1" and "config" in r]
