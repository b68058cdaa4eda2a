"""The checker's provenance rule: the commit a page names must be in the checkout's history."""

import subprocess
from pathlib import Path

from geofact.pipeline.check import _history, _unreproducible


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=root,
                          capture_output=True, text=True, check=True).stdout.strip()


def commit(root: Path, text: str) -> str:
    (root / "f.txt").write_text(text)
    git(root, "add", "f.txt")
    git(root, "commit", "-qm", text)
    return git(root, "rev-parse", "HEAD")


def test_a_commit_outside_the_history_is_flagged_and_history_commits_pass(tmp_path):
    git(tmp_path, "init", "-q")
    first = commit(tmp_path, "one")
    git(tmp_path, "checkout", "-qb", "side")
    lost = commit(tmp_path, "side")  # exists as an object, but main never had it
    git(tmp_path, "checkout", "-q", "-")
    head = commit(tmp_path, "two")
    in_history = _history(tmp_path)
    assert _unreproducible({"git_commit": first}, "page", in_history) == []
    assert _unreproducible({"git_commit": head + "+dirty"}, "page", in_history) == []
    for commit_id in (lost, "0217a5e84e3a849d96a787ae2996637978b299ad", "unknown"):
        (problem,) = _unreproducible({"git_commit": commit_id}, "page book/x.ipynb", in_history)
        assert problem.startswith("page book/x.ipynb: made at commit") and "not in this checkout's history" in problem


def test_outside_a_repository_or_in_a_shallow_clone_history_is_not_judged(tmp_path):
    plain = tmp_path / "plain"
    plain.mkdir()
    assert _history(plain) is None
    origin = tmp_path / "origin"
    origin.mkdir()
    git(origin, "init", "-q")
    commit(origin, "one")
    commit(origin, "two")
    subprocess.run(["git", "clone", "-q", "--depth", "1", origin.as_uri(), str(tmp_path / "shallow")], check=True)
    assert _history(tmp_path / "shallow") is None
    assert _unreproducible({"git_commit": "deadbeef"}, "page", None) == []
