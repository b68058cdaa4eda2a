"""geofact.pipeline.status and claim_cards: the status page counts and badges every verdict by group, the
claims page carries each verdict's measurement at its scale, and the ledger figure marks every claim once."""

import json
import shutil

from geofact.pipeline.claim_cards import render_claims
from geofact.pipeline.ledger import GROUPS, claim_anchor, group, load_ledger
from geofact.pipeline.ledger_figure import render_ledger_svg
from geofact.pipeline.ledger_view import LedgerView, badge, count_badge
from geofact.pipeline.project import Project
from geofact.pipeline.status import generated_pages, render_status

PROVENANCE = {"git_commit": "abc", "device": "cpu", "environment": {"torch": "t"}, "executed_at": "now", "wall_time_s": 1.0}


def empty_project(repo, tmp_path) -> Project:
    for name in ["claims.yaml", "_toc.yml"]:
        shutil.copy(repo.root / name, tmp_path / name)
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "book").mkdir()
    return Project(tmp_path)


def row(page: str, claim_id: str) -> str:
    return next(line for line in page.splitlines() if f"<{claim_anchor(claim_id)}>`" in line)


def test_status_marks_unrun_claims_and_reports_measured_ones(repo, tmp_path):
    project = empty_project(repo, tmp_path)
    assert "No results yet" in render_status(project)

    claims = load_ledger(project.ledger_path)
    claim = claims[0]
    out = project.results("laptop", claim.notebook)
    out.parent.mkdir(parents=True)
    out.write_text(json.dumps({"claims": {claim.id: {"verdict": "does not hold", "measured": "0.42", "note": ""}},
                               "provenance": PROVENANCE}))
    page, cards = render_status(project), render_claims(project)
    assert row(page, claim.id).endswith(f"| {badge('does not hold')} |")
    assert sum(row(page, c.id).endswith(f"| {badge('not run')} |") for c in claims) == len(claims) - 1
    members = [c for c in claims if group(c) == group(claim)]
    counts = next(line for line in page.splitlines() if line.startswith(f"| {group(claim)} ({len(members)}) |"))
    assert counts == f"| {group(claim)} ({len(members)}) | {count_badge('does not hold', 1)} {count_badge('not run', len(members) - 1)} |"
    assert f"- laptop: {badge('does not hold')}. 0.42." in cards
    assert cards.count(f"- laptop: {badge('not run')}") == len(claims) - 1

    # a page's scale stands beside each of its verdicts (issue 46: a verdict at N = 128 must not read as one at 4096)
    out.write_text(json.dumps({**json.loads(out.read_text()), "scale": "N = 128 (paper 4096), 3 seeds"}))
    assert f"- laptop: {badge('does not hold')}. At N = 128 (paper 4096), 3 seeds: 0.42." in render_claims(project)


def test_an_inconclusive_verdict_is_counted_apart_with_its_interval_in_the_table(repo, tmp_path):
    project = empty_project(repo, tmp_path)
    claim = next(c for c in load_ledger(project.ledger_path) if group(c) == GROUPS[2])
    out = project.results("laptop", claim.notebook)
    out.parent.mkdir(parents=True)
    estimate = {"quantity": "beta", "value": 0.92, "lo": -0.2, "hi": 2.05, "confidence": 0.95, "method": "t", "n": 4}
    out.write_text(json.dumps({"claims": {claim.id: {"verdict": "inconclusive", "measured": "beta", "note": "", "estimate": estimate}},
                               "provenance": PROVENANCE, "scale": "N = 128"}))
    page = render_status(project)
    assert count_badge("inconclusive", 1) in page
    assert f"{badge('inconclusive')} 0.92 [-0.2, 2.05]" in row(page, claim.id)
    assert f"- {{doc}}`{claim.notebook}`: laptop: N = 128." in page  # the experiments' scales, above their table
    out.write_text(out.read_text().replace("-0.2,", '"nan",'))
    assert f"{badge('inconclusive')} 0.92 (no interval)" in render_status(project)
    out.write_text(out.read_text().replace('"value": 0.92', '"value": "nan"'))
    assert "nan" not in row(render_status(project), claim.id)  # no estimate is said so, not printed as "nan"


def test_the_ledger_figure_marks_every_claim_once_per_profile(repo, tmp_path):
    project = empty_project(repo, tmp_path)
    claims = load_ledger(project.ledger_path)
    out = project.results("laptop", claims[0].notebook)
    out.parent.mkdir(parents=True)
    out.write_text(json.dumps({"claims": {claims[0].id: {"verdict": "holds", "measured": "1", "note": ""}},
                               "provenance": PROVENANCE}))
    svg = render_ledger_svg(LedgerView.read(project))
    assert svg.count("<title>") == 2 * len(claims)  # one square per claim at laptop and at paper
    assert svg.count(f"<title>{claims[0].id}: holds</title>") == 1
    assert svg.count(": not run</title>") == 2 * len(claims) - 1


def test_the_committed_generated_pages_are_current(repo):
    stale = [path.name for path, text in generated_pages(repo).items() if not path.exists() or path.read_text() != text]
    assert stale == []
