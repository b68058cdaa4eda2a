"""Which code made a record: the commit, also where the code came without its repository (a GPU lease)."""

import subprocess
from pathlib import Path

import pytest

from geofact.provenance import GIT_COMMIT_ENV, git_commit

ROOT = Path(__file__).resolve().parents[1]


def test_a_copy_without_git_names_the_commit_it_was_sent_from(tmp_path, monkeypatch):
    monkeypatch.setenv(GIT_COMMIT_ENV, "0123abc")
    assert git_commit(tmp_path) == "0123abc"
    monkeypatch.setenv("PATH", str(tmp_path))  # no git on the machine at all
    assert git_commit(tmp_path) == "0123abc"
    monkeypatch.delenv(GIT_COMMIT_ENV)
    assert git_commit(tmp_path) == "unknown"


def test_the_named_commit_wins_over_a_stale_checkout_with_a_warning(monkeypatch):
    """A lease's copy may carry a .git older than the files it was sent (seen on 2026-11-26)."""
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    if not head:
        pytest.skip("not a git checkout")
    monkeypatch.setenv(GIT_COMMIT_ENV, "0123abc")
    with pytest.warns(UserWarning, match="0123abc names the commit of these records, not git's HEAD"):
        assert git_commit(ROOT) == "0123abc"
    monkeypatch.setenv(GIT_COMMIT_ENV, head)
    assert git_commit(ROOT).removesuffix("+dirty") == head  # the checkout it names: its own dirtiness shows
    monkeypatch.delenv(GIT_COMMIT_ENV)
    assert git_commit(ROOT).removesuffix("+dirty") == head
