"""`make bundle`: every wheel a GPU node without a package index needs to run `geofact run`, in one folder.

A node that only computes records needs none of it: `geofact compute` (geofact.ops.compute) runs
the pages as scripts with the node's own torch, numpy, scipy, scikit-learn, matplotlib, pyyaml and
tqdm. The bundle is for a node that executes whole pages, or sweeps as SLURM jobs (submitit).

GPU nodes are often air-gapped, with a site-provided CUDA torch and a newer Python. On a machine with
the registries, this downloads into one folder the wheels of geofact's GPU side for a chosen Python
version and platform (default CPython 3.12, manylinux x86_64): geofact itself, its dependencies but
torch (the node keeps its own CUDA build), and the `node` extra (the notebook runner: papermill,
jupytext, ipykernel, myst-nb for the pages' glued numbers; submitit for clusters). Versions follow
constraints.txt. The book toolchain (jupyter-book, Sphinx themes) stays off the node: pages are
built where the records are unpacked (geofact.ops.pack). On the node (book/paper-scale.md):

    python3 -m venv --system-site-packages .venv      # sees the node's own torch
    .venv/bin/pip install --no-index --find-links bundle "geofact[node]"

    python -m geofact.ops.bundle bundle --python 3.12 [--platform manylinux_2_28_x86_64]
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KEPT_FROM_THE_NODE = {"torch"}  # the node's own build (CUDA); a download would pull gigabytes of nvidia-* wheels
DEFAULT_PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")


def node_requirements(pyproject: Path = ROOT / "pyproject.toml") -> list[str]:
    """geofact's dependencies and its `node` extra, without what the node keeps (torch)."""
    project = tomllib.loads(pyproject.read_text())["project"]
    wanted = project["dependencies"] + project["optional-dependencies"]["node"]
    return [r for r in wanted if re.match(r"[A-Za-z0-9._-]+", r).group(0).lower() not in KEPT_FROM_THE_NODE]


def make_bundle(out: Path, python: str = "3.12", platforms: tuple[str, ...] = DEFAULT_PLATFORMS,
                constraints: Path = ROOT / "constraints.txt") -> list[Path]:
    """Build geofact's wheel and download the node's wheels into `out`; returns the wheels there."""
    if not python.replace(".", "").isdigit() or python.count(".") != 1:
        raise ValueError(f"python must be a version like 3.12, got {python!r}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    pip = [sys.executable, "-m", "pip"]
    subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "--wheel-dir", str(out), str(ROOT)],
                   check=True, capture_output=True)
    platform_args = [arg for p in platforms for arg in ("--platform", p)]
    subprocess.run([*pip, "download", "--dest", str(out), "--only-binary=:all:", "--implementation", "cp",
                    "--python-version", python, *platform_args, "-c", str(constraints),
                    *node_requirements(), "setuptools", "wheel"], check=True)
    return sorted(out.glob("*.whl"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m geofact.ops.bundle", description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="the folder to fill with wheels")
    parser.add_argument("--python", default="3.12", help="the node's Python version (default: 3.12)")
    parser.add_argument("--platform", action="append", default=None,
                        help=f"wheel platform tags to accept (repeatable; default: {', '.join(DEFAULT_PLATFORMS)})")
    args = parser.parse_args(argv)
    try:
        wheels = make_bundle(args.out, args.python, tuple(args.platform or DEFAULT_PLATFORMS))
    except (ValueError, subprocess.CalledProcessError) as exc:
        print(f"geofact bundle: error: {exc}", file=sys.stderr)
        return 1
    size = sum(w.stat().st_size for w in wheels)
    print(f"geofact bundle: {len(wheels)} wheels ({size / 2**20:.0f} MiB) in {args.out} for CPython {args.python}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
