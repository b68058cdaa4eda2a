import pytest

from geofact.pipeline.ledger import load_ledger, load_not_checkable


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


def test_not_checkable_statements_are_kept_apart_with_their_reason(tmp_path):
    path = tmp_path / "ledger.yaml"
    path.write_text("- {id: a, paper: p, statement: s, test: t, notebook: n}\n"
                    "- {id: b, paper: p, statement: s, not_checkable: a conjecture the paper leaves open}\n")
    assert [c.id for c in load_ledger(path)] == ["a"]
    assert [(n.id, n.not_checkable) for n in load_not_checkable(path)] == [("b", "a conjecture the paper leaves open")]
    path.write_text("- {id: b, paper: p, statement: s, not_checkable: '', test: t}\n")
    with pytest.raises(ValueError, match="lacks"):
        load_ledger(path)
    path.write_text("- {id: b, paper: p, statement: s, not_checkable: why, notebook: n}\n")
    with pytest.raises(ValueError, match="unknown fields"):
        load_not_checkable(path)


def test_repo_ledger_names_reasons_for_what_it_does_not_check(repo):
    assert all(n.not_checkable for n in load_not_checkable(repo.ledger_path))
    assert len(load_ledger(repo.ledger_path)) + len(load_not_checkable(repo.ledger_path)) >= 78
