"""geofact.pipeline.intro: the front page groups the ledger's claims and counts their verdicts as the
status page does, and `geofact check` holds the committed page to it."""

from pathlib import Path

from geofact.pipeline.intro import render_intro
from geofact.pipeline.ledger import GROUPS, Claim, group, load_ledger
from geofact.pipeline.project import Project

ROOT = Path(__file__).resolve().parents[2]


def claim(paper: str, notebook: str = "thm-x") -> Claim:
    return Claim(id="c", paper=paper, statement="s", test="t", notebook=notebook)


def test_claims_are_grouped_by_how_the_paper_cites_them():
    assert group(claim("Theorem 4.1 (thm:shared attr), MLP version")) == GROUPS[0]
    assert group(claim("Lemma G.1 (lem:orth vectors pm 1), Appendix G")) == GROUPS[0]
    assert group(claim("Theorem 4.1 (thm:shared attr), statement vs proof")) == GROUPS[1]
    assert group(claim("Proof of Theorem F.1, Appendix F")) == GROUPS[1]
    assert group(claim("Section 2.1 (comparison)")) == GROUPS[1]
    assert group(claim("Theorem 4.1", notebook="exp-capacity")) == GROUPS[2]


def test_the_committed_front_page_counts_every_claim_once_and_is_current():
    project = Project(ROOT)
    text = render_intro(project)
    claims = load_ledger(project.ledger_path)
    sizes = [int(line.split("(")[1].split(")")[0]) for line in text.splitlines() if line.startswith("- **")]
    assert sum(sizes) == len(claims) and len(sizes) == len(GROUPS)
    assert (project.book_dir / "intro.md").read_text() == text  # `geofact status` wrote it; `geofact check` holds it
