"""Helpers the book tests share: copy the project's publishing skeleton, run the CLI, build the book."""

import shutil
import subprocess
import sys
from pathlib import Path

from geofact.pipeline.project import Project

SKELETON = ["notebooks", "claims.yaml", "_config.yml", "_toc.yml", "book"]


def copy_project(src: Path, dst: Path) -> Project:
    dst.mkdir(parents=True, exist_ok=True)
    for name in SKELETON:
        s = src / name
        if s.is_dir():
            shutil.copytree(s, dst / name, symlinks=True, ignore=shutil.ignore_patterns("_build", "*.ipynb_checkpoints"))
        else:
            shutil.copy2(s, dst / name)
    return Project(dst)


def geofact(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "geofact.pipeline.cli", "--root", str(root), *args], capture_output=True, text=True)


def build_book(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(Path(sys.executable).parent / "jupyter-book"), "build", "book", "-W", "-n", "--keep-going", "--all"],
        cwd=root, capture_output=True, text=True,
    )
