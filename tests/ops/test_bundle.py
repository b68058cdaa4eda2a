"""`make bundle` (geofact.ops.bundle): the wheels install into a clean virtual environment with no package
index, beside a torch the environment already has (as a GPU node keeps its own), and run pages."""

import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from geofact.ops.bundle import node_requirements

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def test_the_node_requirements_leave_torch_to_the_node():
    names = [r.split(">")[0].split("=")[0] for r in node_requirements()]
    assert "torch" not in names and {"numpy", "papermill", "myst-nb", "submitit"} <= set(names)


def test_the_bundle_installs_with_no_index_and_runs_the_smoke_profile(tmp_path):
    python = f"{sys.version_info.major}.{sys.version_info.minor}"  # this machine stands in for the node
    done = subprocess.run([sys.executable, "-m", "geofact.ops.bundle", str(tmp_path / "bundle"), "--python", python],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    wheels = {p.name.split("-")[0].lower() for p in (tmp_path / "bundle").glob("*.whl")}
    assert "geofact" in wheels and "torch" not in wheels and not any(w.startswith("nvidia") for w in wheels)

    venv.create(tmp_path / "node", with_pip=True)
    pip = [str(tmp_path / "node" / "bin" / "python"), "-m", "pip", "install", "--quiet"]
    torch_spec = f"torch=={__import__('torch').__version__.split('+')[0]}"
    subprocess.run([*pip, torch_spec], check=True)  # the node's own torch, installed before the bundle
    offline = {**os.environ, "PIP_CONFIG_FILE": os.devnull, "PIP_NO_INDEX": "1"}  # no index, no extra wheel folders
    done = subprocess.run([*pip, "--no-index", "--find-links", str(tmp_path / "bundle"), "geofact[node]"],
                          capture_output=True, text=True, env=offline)
    assert done.returncode == 0, done.stderr[-3000:]

    project = tmp_path / "project"  # the notebooks and book skeleton, run by the installed geofact
    for name in ["notebooks", "claims.yaml", "_config.yml", "_toc.yml"]:
        (shutil.copytree if (ROOT / name).is_dir() else shutil.copy2)(ROOT / name, project / name)
    done = subprocess.run([str(tmp_path / "node" / "bin" / "geofact"), "--root", str(project), "run",
                           "thm-khop-cot", "exp-capacity", "--profile", "smoke"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (project / "results" / "smoke" / "exp-capacity.json").exists() and (project / "book" / "exp-capacity.ipynb").exists()
