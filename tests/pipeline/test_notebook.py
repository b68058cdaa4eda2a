import sys

import pytest

from geofact.pipeline.notebook import interactive
from geofact.pipeline.report import Report
from geofact.progress import progress
from geofact.settings import COMPUTE_ONLY_ENV, RESULTS_PATH_ENV, is_batch_run


def test_batch_run_calls_the_function_once_with_defaults(monkeypatch):
    monkeypatch.setenv(RESULTS_PATH_ENV, "/tmp/x.json")
    calls = []
    interactive(lambda N, R: calls.append((N, R)), defaults=dict(N=3, R=2), N=(2, 10), R=(1, 4))
    assert is_batch_run() and calls == [(3, 2)]


def test_progress_is_plain_text_in_batch_runs(monkeypatch):
    monkeypatch.setenv(RESULTS_PATH_ENV, "/tmp/x.json")
    bar = progress(range(3), disable=True)
    assert type(bar).__module__ == "tqdm.std" and list(bar) == [0, 1, 2]


def test_pages_take_ipythons_display_in_jupyter_and_text_stand_ins_under_compute(monkeypatch, capsys):
    import IPython.display

    from geofact.pipeline import notebook

    monkeypatch.delenv(COMPUTE_ONLY_ENV, raising=False)
    assert notebook.Markdown is IPython.display.Markdown and notebook.display is IPython.display.display
    monkeypatch.setenv(COMPUTE_ONLY_ENV, "1")
    monkeypatch.setitem(sys.modules, "IPython", None)  # as on a node: importing it fails
    monkeypatch.setitem(sys.modules, "IPython.display", None)
    from geofact.pipeline.notebook import Markdown, display

    shown = Markdown("**a table**")
    display(shown)
    assert shown.data == "**a table**" and capsys.readouterr() == ("", "")
    with pytest.raises(AttributeError, match="has no attribute 'HTML'"):
        notebook.HTML


def test_under_compute_widgets_are_one_call_and_numbers_are_stored_without_glue(monkeypatch, tmp_path):
    monkeypatch.delenv(RESULTS_PATH_ENV, raising=False)
    monkeypatch.setenv(COMPUTE_ONLY_ENV, "1")
    for absent in ("ipywidgets", "myst_nb"):
        monkeypatch.setitem(sys.modules, absent, None)
    calls = []
    interactive(lambda N: calls.append(N), defaults=dict(N=3), N=(2, 10))
    report = Report("nb")
    report.number("x", 0.5)
    assert calls == [3] and report.numbers == {"x": 0.5}
