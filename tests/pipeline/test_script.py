"""geofact.pipeline.script: a percent notebook's cells read without jupytext, its parameters injected as
papermill injects them, and its code run as a script."""

import datetime
import math
import subprocess
import sys

import jupytext
import pytest

from geofact.pipeline.script import (
    UNFINISHED_MARK,
    UNFINISHED_STATUS,
    declared_parameters,
    parameters_cell,
    render_parameters,
    script_cells,
    split_cells,
)

NOTEBOOK = '''# ---
# jupyter:
#   kernelspec:
#     name: python3
# ---

# %% [markdown]
# # A page
# with x = 1 in its prose

# %% tags=['parameters']
seed = 0
sizes = [1, 2]

# %% mystnb={"figure": {"caption": "a [md] caption, tags=[x]", "name": "fig-a"}}
total = seed + sum(sizes)

# %% [raw]
# raw text

# %% A titled cell tags=["hide-input", "x"]
import sys
print(total, __name__, file=sys.stderr)
'''


def test_the_cells_and_their_kinds_tags_and_lines_are_read_from_the_text():
    cells = split_cells(NOTEBOOK)
    assert [(c.kind, c.tags, c.line) for c in cells] == [
        ("markdown", (), 8), ("code", ("parameters",), 12), ("code", (), 16), ("raw", (), 19), ("code", ("hide-input", "x"), 22)]
    assert cells[2].source.strip() == "total = seed + sum(sizes)"
    assert NOTEBOOK.splitlines()[cells[4].line - 1] == "import sys"


def test_every_notebook_splits_into_the_cells_jupytext_reads(repo):
    for name in repo.notebooks():
        ours, theirs = split_cells(repo.source(name).read_text()), jupytext.read(repo.source(name)).cells
        assert [(c.kind, c.tags) for c in ours] == [(c.cell_type, tuple(c.metadata.get("tags", []))) for c in theirs], name
        assert [c.source.strip() for c in ours if c.kind == "code"] == [c.source.strip() for c in theirs if c.cell_type == "code"]


def test_there_must_be_exactly_one_parameters_cell_with_well_formed_tags():
    with pytest.raises(ValueError, match="exactly one cell tagged 'parameters', has 0"):
        parameters_cell(split_cells("# %%\nx = 1\n"))
    with pytest.raises(ValueError, match="has 2"):
        parameters_cell(split_cells("# %% tags=['parameters']\nx = 1\n# %% tags=['parameters']\ny = 2\n"))
    with pytest.raises(ValueError, match="line 1: tags must be a list of strings"):
        split_cells("# %% tags=\"parameters\"\nx = 1\n")
    with pytest.raises(ValueError, match="line 2: cell metadata must be key=value with JSON values, got '\\[parameters\\]'"):
        split_cells("\n# %% tags=[parameters]\nx = 1\n")


def test_code_before_the_first_marker_is_a_cell_and_a_commented_header_is_not():
    assert split_cells("# header\n\n# %%\nx = 1\n")[0].line == 4
    assert [c.line for c in split_cells("import os\n# %%\nx = 1\n")] == [1, 3]


def test_parameters_are_injected_right_after_the_parameters_cell_as_assignments():
    params = {"seed": 3, "lr": 1e-3, "name": "it's", "grid": {"N": 128, "R_values": [2, 4]}, "cap": float("inf"),
              "off": None, "flag": True}
    cells = script_cells(NOTEBOOK, params)
    assert [c.tags for c in cells] == [("parameters",), ("injected-parameters",), (), ("hide-input", "x")]
    source = cells[1].source
    assert source.startswith("# Parameters\n") and "seed = 3\n" in source
    namespace: dict = {"seed": 0}
    exec(source, namespace)
    assert {k: namespace[k] for k in params} == params and math.isinf(namespace["cap"])
    assert declared_parameters(cells[0].source) == {"seed", "sizes"}


def test_a_parameter_that_is_no_literal_is_an_error_naming_it():
    with pytest.raises(ValueError, match="parameter 'when' must be None, a bool, int, float, str, list or dict, got date"):
        render_parameters({"when": datetime.date(2024, 1, 1)})


def script(tmp_path, text: str, params: str = '{"seed": 5}') -> subprocess.CompletedProcess:
    path = tmp_path / "page.py"
    path.write_text(text)
    return subprocess.run([sys.executable, "-m", "geofact.pipeline.script", str(path), params],
                          capture_output=True, text=True, cwd=tmp_path)


def test_a_script_runs_its_code_cells_in_one_main_namespace_with_the_parameters(tmp_path):
    done = script(tmp_path, NOTEBOOK)
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip() == "8 __main__"  # seed 5 injected over seed 0; the namespace is __main__'s


def test_figures_are_closed_after_each_cell_and_annotations_are_the_pages_own(tmp_path):
    done = script(tmp_path, "# %% tags=['parameters']\nseed = 0\n# %%\nimport matplotlib\nmatplotlib.use('Agg')\n"
                            "import matplotlib.pyplot as plt\nplt.plot([1])\ndef f(x: int): pass\n"
                            "# %%\nprint(len(plt.get_fignums()), f.__annotations__)\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "0 {'x': <class 'int'>}"  # not the string 'int' of the runner's own __future__ import


def test_a_failing_cell_names_the_notebook_file_and_line(tmp_path):
    done = script(tmp_path, "# %% tags=['parameters']\nseed = 0\n\n# %%\nx = 1\nraise ValueError(f'boom {seed}')\n")
    assert done.returncode == 1
    assert f'File "{tmp_path / "page.py"}", line 6' in done.stderr and "ValueError: boom 5" in done.stderr


def test_a_page_whose_budget_is_spent_ends_unfinished_with_a_last_line_saying_why(tmp_path):
    done = script(tmp_path, "# %% tags=['parameters']\nseed = 0\n# %%\n"
                            "from geofact.training.resume import BudgetSpent\nraise BudgetSpent('2 of 8 runs checkpointed')\n")
    assert done.returncode == UNFINISHED_STATUS
    assert done.stderr.strip().splitlines()[-1] == f"{UNFINISHED_MARK} BudgetSpent: 2 of 8 runs checkpointed"

