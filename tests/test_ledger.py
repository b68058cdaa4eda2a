import pytest

from geofact.ledger import load_ledger


def test_repo_ledger_is_valid_and_points_at_notebooks(repo):
    claims = load_ledger(repo.ledger_path)
    assert claims and len({c.id for c in claims}) == len(claims)
    assert {c.notebook for c in claims} <= set(repo.notebooks())


def test_duplicate_and_incomplete_claims_are_rejected(tmp_path):
    entry = "- {id: a, paper: p, statement: s, test: t, notebook: n}\n"
    (tmp_path / "dup.yaml").write_text(entry * 2)
    with pytest.raises(ValueError, match="duplicate"):
        load_ledger(tmp_path / "dup.yaml")
    (tmp_path / "short.yaml").write_text("- {id: a, paper: p}\n")
    with pytest.raises(ValueError, match="lacks"):
        load_ledger(tmp_path / "short.yaml")
