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


def test_a_test_against_an_alternative_names_it_with_its_population(tmp_path):
    from geofact.pipeline.ledger import population_mismatches

    path = tmp_path / "ledger.yaml"
    base = "- {id: a, paper: p, statement: s, test: t, notebook: n"
    path.write_text(base + ", alternative: flat, population: learned cells, population_rule: {min_headroom: 3}}\n")
    (claim,) = load_ledger(path)
    assert claim.population_rule == {"min_headroom": 3}
    judged = {"verdict": "holds", "measured": "", "note": "", "estimate": {}, "population": {"min_headroom": 3}}
    assert population_mismatches([claim], {"a": judged}) == []
    assert "the ledger says {'min_headroom': 3}" in population_mismatches([claim], {"a": {**judged, "population": {"min_headroom": 1}}})[0]
    assert "did not test against it" in population_mismatches([claim], {"a": {"verdict": "holds", "measured": "", "note": ""}})[0]
    assert population_mismatches([claim], {"a": {"verdict": "not run", "measured": "", "note": ""}}) == []
    path.write_text(base + ", alternative: flat, population: p, population_rule: {cells: every (k, R) of the grid}}\n")
    with pytest.raises(ValueError, match="quote a value holding a comma"):
        load_ledger(path)
    path.write_text(base + ", alternative: flat}\n")
    with pytest.raises(ValueError, match="needs all three"):
        load_ledger(path)
    path.write_text(base + "}\n")
    assert "does not name" in population_mismatches(load_ledger(path), {"a": judged})[0]


def test_committed_results_test_the_claims_the_ledger_sets_against_an_alternative(repo):
    """The ledger's population rules are the ones the committed pages applied (and every claim judged
    against an alternative is one the ledger names it for)."""
    import json

    from geofact.pipeline.ledger import population_mismatches

    claims = load_ledger(repo.ledger_path)
    problems = []
    for path in sorted((repo.root / "results").glob("*/*.json")):
        if path.parent.name == "interactive":
            continue
        reported = json.loads(path.read_text())["claims"]
        problems += [f"{path.parent.name}/{path.stem}: {p}" for p in population_mismatches([c for c in claims if c.notebook == path.stem], reported)]
    assert problems == []
