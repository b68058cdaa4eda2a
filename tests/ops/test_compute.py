"""`geofact compute`: pages as scripts where Jupyter is not (a GPU lease). The CLI runs here with the
notebook toolchain made unimportable, as on the node; tests/pipeline/test_pipeline.py rehearses the
whole lease in an environment that lacks it."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from geofact.ops.compute import ComputeUnfinished, compute, marker_path
from geofact.pipeline.project import Project
from geofact.settings import DEADLINE_ENV

ROOT = Path(__file__).resolve().parents[2]
NODE_LACKS = ("papermill", "jupytext", "nbformat", "ipykernel", "IPython", "myst_nb", "ipywidgets", "submitit")
PAGE = """# %% [markdown]
# # {name}

# %% tags=["parameters"]
seed = 0
cache_dir = None

# %%
import sys

import matplotlib.pyplot as plt

from geofact.pages.display import Markdown, display
from geofact.pages.page import Page
from geofact.pipeline.standins import is_stand_in

page = Page("{name}", cache_dir)
display(Markdown(f"seed {{seed}}"))
plt.subplots()[1].plot([0, seed])  # matplotlib asks IPython whether a shell runs
page.interactive(lambda n: print("interactive", n), defaults=dict(n=seed), n=(1, 9))
page.report.number("seed", seed)  # glued in Jupyter; under compute stored only
page.report.claim("{name}-claim", holds=seed > 2, measured=f"seed {{seed}}")
{body}
page.report.save()
print("executed {name}", sorted(m for m in {lacks} if m in sys.modules and not is_stand_in(sys.modules[m])), file=sys.stderr)
"""


def notebook(project: Project, name: str, body: str = "") -> None:
    (project.notebooks_dir / f"{name}.py").write_text(PAGE.format(name=name, body=body, lacks=NODE_LACKS))


@pytest.fixture
def project(tmp_path) -> Project:
    """A checkout with three pages (`ok`, `spent`: its training meets the deadline, `broken`) and a profile."""
    project = Project(tmp_path / "project")
    project.profiles_dir.mkdir(parents=True)
    (project.profiles_dir / "smoke.yaml").write_text("description: tests\ndefaults: {seed: 3}\nnotebooks: {}\n")
    (project.root / "_toc.yml").write_text("root: index\n")
    notebook(project, "ok")
    notebook(project, "spent", "from geofact.training.resume import BudgetSpent\nraise BudgetSpent('3 of 8 runs checkpointed')")
    notebook(project, "broken", "def fail():\n    raise ValueError('boom')\nfail()")
    return project


@pytest.fixture
def node_env(tmp_path) -> dict[str, str]:
    """This environment, but every package the node lacks is not found (a finder that refuses them,
    installed at start-up by a sitecustomize first on the path)."""
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    (stubs / "sitecustomize.py").write_text(
        "import sys\n\n\nclass NodeLacks:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        f"        if name.split('.')[0] in {NODE_LACKS!r}:\n"
        "            raise ModuleNotFoundError(f'No module named {name!r} (not on the node)', name=name)\n\n\n"
        "sys.meta_path.insert(0, NodeLacks())\n")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(stubs)])}


def geofact(project: Project, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "geofact.pipeline.cli", "--root", str(project.root), *args],
                          capture_output=True, text=True, env=env, cwd=project.root)


def test_a_page_computes_with_its_parameters_without_jupyter_and_is_not_computed_twice(project, node_env):
    done = geofact(project, node_env, "compute", "ok", "--profile", "smoke")
    assert done.returncode == 0, done.stderr
    assert "interactive 3" in done.stderr and "executed ok []" in done.stderr  # the profile's seed; nothing the node lacks
    assert "[1/1] ok: computed in" in done.stdout and "ok-claim: holds (seed 3)" in done.stdout
    marker = json.loads(marker_path(project, "smoke", "ok").read_text())
    assert marker["parameters"] == {"seed": 3} and marker["claims"]["ok-claim"]["verdict"] == "holds"
    assert not (project.root / "results").exists()  # results are made at home, by geofact run --records-only

    done = geofact(project, node_env, "compute", "ok", "--profile", "smoke")
    assert done.returncode == 0 and "ok: computed at" in done.stdout and "skipped" in done.stdout
    assert "executed ok" not in done.stderr
    done = geofact(project, node_env, "compute", "ok", "--profile", "smoke", "--force")
    assert done.returncode == 0 and "executed ok" in done.stderr
    source = project.notebooks_dir / "ok.py"
    source.write_text(source.read_text().replace("seed > 2", "seed > 4"))  # another page: its marker no longer holds
    done = geofact(project, node_env, "compute", "ok", "--profile", "smoke")
    assert done.returncode == 0 and "ok-claim: does not hold (seed 3)" in done.stdout


def test_a_page_whose_budget_is_spent_is_unfinished_and_the_pages_after_the_deadline_do_not_start(project, node_env,
                                                                                                   monkeypatch):
    done = geofact(project, node_env, "compute", "spent", "ok", "--profile", "smoke", "--budget", "600")
    assert done.returncode == 3, done.stderr
    assert "1 page(s) computed (ok); unfinished: spent (BudgetSpent: 3 of 8 runs checkpointed)" in done.stderr
    assert "run the same command again" in done.stderr and not marker_path(project, "smoke", "spent").exists()
    monkeypatch.setenv(DEADLINE_ENV, "")  # compute() sets the deadline of this process: put back after the test
    with pytest.raises(ComputeUnfinished) as caught:
        compute(project, ["broken", "ok"], "smoke", "cpu", budget=1e-6)
    assert caught.value.unfinished == ["broken"] and caught.value.done == ["ok"]  # ok was computed before: skipped


def test_a_failing_page_stops_the_command_naming_it_with_its_traceback(project, node_env):
    done = geofact(project, node_env, "compute", "broken", "ok", "--profile", "smoke")
    assert done.returncode == 1
    assert "geofact compute: error: notebook 'broken' failed (exit status 1)" in done.stderr
    tail = done.stderr.split("the end of its output:")[1]
    assert f'File "{project.notebooks_dir / "broken.py"}", line 24, in fail' in tail and "ValueError: boom" in tail
    assert "executed ok" not in done.stderr and not marker_path(project, "smoke", "broken").exists()


@pytest.mark.parametrize("args,error", [
    (["ok", "--profile", "smoke", "--budget", "-5"], "budget must be a number of seconds > 0, got -5.0"),
    (["ok", "--profile", "huge"], "profile must be one of ['smoke'], got 'huge'"),
    (["nowhere", "--profile", "smoke"], "notebook must be one of ['broken', 'ok', 'spent'], got 'nowhere'"),
    (["ok", "--profile", "smoke", "--device", "cuda:7"], "device='cuda:7'"),
    (["ok", "--profile", "smoke", "--grid-d", "8"], "grid cells (--grid-R, --grid-d) are for the capacity grid's pages"),
])
def test_bad_arguments_are_clear_errors_before_anything_runs(project, node_env, args, error):
    done = geofact(project, node_env, "compute", *args)
    assert done.returncode == 1 and "geofact compute: error: " in done.stderr and error in done.stderr
    assert not (project.root / ".geofact").exists()


def test_run_and_plan_refuse_to_build_pages_on_part_of_the_grid(project, node_env):
    from geofact.ops.compute import GRID_CELLS_ENV
    from geofact.training.grid import CELLS_ENV

    assert GRID_CELLS_ENV == CELLS_ENV  # the operations and the publisher name it without importing the grid (torch)
    for command in (["run", "ok", "--profile", "smoke"], ["plan", "--profile", "smoke"]):
        done = geofact(project, {**node_env, CELLS_ENV: '{"d": [8]}'}, *command)
        assert done.returncode == 1 and f"{CELLS_ENV} is set" in done.stderr, done.stderr[-1000:]


def test_a_page_cut_inside_a_progress_bar_is_still_read_as_unfinished():
    from geofact.ops.compute import unfinished_reason
    from geofact.pipeline.script import UNFINISHED_MARK, UNFINISHED_STATUS

    # as the lease rehearsal saw it: the mark after an open bar's line, the bar written again after it
    tail = (f"retraining 8 transfers:  50%| 240/480 [00:00<00:00, 632.82run-step/s]{UNFINISHED_MARK} BudgetSpent: "
            "time budget spent with 1 of 2 groups not started\n\nretraining 8 transfers:  50%| 240/480\n")
    assert unfinished_reason(UNFINISHED_STATUS, tail) == "BudgetSpent: time budget spent with 1 of 2 groups not started"
    assert unfinished_reason(1, tail) is None  # another exit status is a failure, whatever it printed
    assert unfinished_reason(UNFINISHED_STATUS, "Traceback ...\nValueError: x\n") is None
