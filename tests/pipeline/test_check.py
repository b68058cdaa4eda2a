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


def test_the_stale_pages_are_priced_by_the_longest_each_has_taken(tmp_path):
    """`geofact check` prices what a change stales: per profile, the stale results files' pages with the
    longest wall time each has taken; a fresh one costs nothing."""
    import json

    from geofact.pipeline.check import cost_lines, stale_cost
    from geofact.pipeline.project import Project
    from geofact.provenance import sha256_file

    project = Project(tmp_path)
    project.notebooks_dir.mkdir()
    (project.notebooks_dir / "profiles").mkdir()
    for profile in ("laptop", "paper"):
        (project.notebooks_dir / "profiles" / f"{profile}.yaml").write_text("description: test\n")
        (project.results_dir / profile).mkdir(parents=True)
    for name in ("fresh", "edited"):
        (project.notebooks_dir / f"{name}.py").write_text("# %% tags=['parameters']\nseed = 0\n")

    def results(profile: str, name: str, sha: str, wall_max: float) -> None:
        provenance = {"notebook_sha256": sha, "profile": profile, "parameters": {}, "modules": {},
                      "wall_time_s": 1.0, "wall_time_max_s": wall_max}
        (project.results_dir / profile / f"{name}.json").write_text(json.dumps({"provenance": provenance}))

    results("laptop", "fresh", sha256_file(project.source("fresh")), 100.0)
    results("laptop", "edited", "0" * 64, 600.0)  # its notebook changed since
    results("paper", "edited", "0" * 64, 7200.0)
    stale = stale_cost(project)
    assert stale == {"laptop": [("edited", 600.0)], "paper": [("edited", 7200.0)]}
    assert cost_lines(stale) == ["laptop: 1 page(s), 10 page-minutes (edited 600 s)",
                                 "paper: 1 page(s), 120 page-minutes (edited 7,200 s)"]
