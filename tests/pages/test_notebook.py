from geofact.pages.notebook import interactive
from geofact.progress import progress
from geofact.settings import RESULTS_PATH_ENV, is_batch_run


def test_batch_run_calls_the_function_once_with_defaults(monkeypatch):
    monkeypatch.setenv(RESULTS_PATH_ENV, "/tmp/x.json")
    calls = []
    interactive(lambda N, R: calls.append((N, R)), defaults=dict(N=3, R=2), N=(2, 10), R=(1, 4))
    assert is_batch_run() and calls == [(3, 2)]


def test_progress_is_plain_text_in_batch_runs(monkeypatch):
    monkeypatch.setenv(RESULTS_PATH_ENV, "/tmp/x.json")
    bar = progress(range(3), disable=True)
    assert type(bar).__module__ == "tqdm.std" and list(bar) == [0, 1, 2]
