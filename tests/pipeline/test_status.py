import json
import shutil

from geofact.pipeline.ledger import load_ledger
from geofact.pipeline.project import Project
from geofact.pipeline.status import render_status


def test_status_marks_unrun_claims_and_reports_measured_ones(repo, tmp_path):
    for name in ["claims.yaml", "_toc.yml"]:
        shutil.copy(repo.root / name, tmp_path / name)
    (tmp_path / "notebooks").mkdir()
    project = Project(tmp_path)
    page = render_status(project)
    assert "No results yet" in page and "- laptop" not in page

    claims = load_ledger(project.ledger_path)
    claim = claims[0]
    out = tmp_path / "results" / "laptop" / f"{claim.notebook}.json"
    out.parent.mkdir(parents=True)
    out.write_text(json.dumps({"claims": {claim.id: {"verdict": "does not hold", "measured": "0.42", "note": ""}},
                               "provenance": {"git_commit": "abc", "device": "cpu", "environment": {"torch": "t"},
                                              "executed_at": "now", "wall_time_s": 1.0}}))
    page = render_status(project)
    assert "- laptop: **does not hold**. 0.42" in page
    assert page.count("- laptop: not run") == len(claims) - 1
    assert f"0 hold, 1 do not hold, 0 inconclusive, 0 not in regime, {len(claims) - 1} not run" in page

    out.write_text(out.read_text().replace('"does not hold"', '"not in regime"'))
    page = render_status(project)
    assert "- laptop: **not in regime**. 0.42" in page and "0 hold, 0 do not hold, 0 inconclusive, 1 not in regime" in page

    # a page's scale stands beside each of its verdicts (issue 46: a verdict at N = 128 must not read as one at 4096)
    out.write_text(json.dumps({**json.loads(out.read_text()), "scale": "N = 128 (paper 4096), 3 seeds"}))
    assert "- laptop: **not in regime**. At N = 128 (paper 4096), 3 seeds: 0.42" in render_status(project)


def test_an_inconclusive_verdict_is_counted_apart_with_its_interval_in_the_table(repo, tmp_path):
    for name in ["claims.yaml", "_toc.yml"]:
        shutil.copy(repo.root / name, tmp_path / name)
    (tmp_path / "notebooks").mkdir()
    project = Project(tmp_path)
    claim = load_ledger(project.ledger_path)[0]
    out = tmp_path / "results" / "laptop" / f"{claim.notebook}.json"
    out.parent.mkdir(parents=True)
    estimate = {"quantity": "beta", "value": 0.92, "lo": -0.2, "hi": 2.05, "confidence": 0.95, "method": "t", "n": 4}
    out.write_text(json.dumps({"claims": {claim.id: {"verdict": "inconclusive", "measured": "beta", "note": "", "estimate": estimate}},
                               "provenance": {"git_commit": "abc", "device": "cpu", "environment": {"torch": "t"},
                                              "executed_at": "now", "wall_time_s": 1.0}}))
    page = render_status(project)
    assert "0 hold, 0 do not hold, 1 inconclusive, 0 not in regime" in page
    assert "**inconclusive** 0.92 [-0.2, 2.05]" in page
    out.write_text(out.read_text().replace("-0.2,", '"nan",'))
    assert "**inconclusive** 0.92 (no interval)" in render_status(project)
