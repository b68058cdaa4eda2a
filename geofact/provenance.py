"""Provenance: which code, parameters and machine produced a page or a result."""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import os
import platform
import subprocess
import warnings
from pathlib import Path

import numpy as np

import geofact


def sha256_file(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def module_hashes(modules: list[str]) -> dict[str, str]:
    """sha256 of the source of each geofact module (the modules a notebook actually imported)."""
    out = {}
    for name in sorted(modules):
        spec = importlib.util.find_spec(name)
        origin = spec.origin if spec else None
        out[name] = sha256_file(Path(origin)) if origin and origin.endswith(".py") else "missing"
    return out


GIT_COMMIT_ENV = "GEOFACT_GIT_COMMIT"  # the commit of a copy without .git (a GPU lease gets the files, not the repository)


def git_commit(root: Path) -> str:
    """HEAD commit, with '+dirty' when tracked files other than generated pages/results differ.

    $GEOFACT_GIT_COMMIT, where set, names the commit instead of git: the lease recipe passes
    `git rev-parse HEAD` from home, whose files the GPU node was sent. It wins over what git finds
    there, since the node's copy may carry a stale .git (a lease of 2026-11-26 stamped its records with
    the commit before the one sent, "+dirty"). Without either, "unknown"."""
    def git(*args: str) -> str:
        try:
            done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=False)
        except OSError:  # no git on this machine
            return ""
        return done.stdout.strip()

    head, named = git("rev-parse", "HEAD"), os.environ.get(GIT_COMMIT_ENV, "").strip()
    if named and not (head.startswith(named) or named.startswith(head or "-")):
        if head:
            warnings.warn(f"{GIT_COMMIT_ENV}={named} names the commit of these records, not git's HEAD {head[:12]} "
                          f"in {root}: unset it unless this tree is a copy of {named}", stacklevel=2)
        return named
    if not head:
        return named or "unknown"
    dirty = git("status", "--porcelain", "--untracked-files=no", "--", ".", ":!book", ":!results")
    return head + ("+dirty" if dirty else "")


def _version(package: str) -> str:
    """An installed package's version, read from its metadata: the publisher records torch's without importing it."""
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def environment() -> dict[str, str]:
    return {
        "geofact": geofact.__version__,
        "python": platform.python_version(),
        "torch": _version("torch"),
        "numpy": np.__version__,
        "platform": platform.platform(terse=True),
    }
