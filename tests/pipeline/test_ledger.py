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


def test_committed_intervals_stay_inside_the_range_their_test_spans(repo):
    """Where a test's claim and alternative together span [0, 1] or [-1, 1] (a fraction, an MRR, a difference of
    them), its interval lies inside that span: a Student t over a few units passes it (a drop of 0.998
    [0.993, 1.003] read "inconclusive" against "degrades" up to 1), and the quantity cannot."""
    import json
    import math

    spans = {(0.0, 1.0), (-1.0, 1.0)}
    problems = []
    for path in sorted((repo.root / "results").rglob("*.json")):
        if "interactive" in path.parts:
            continue
        for claim_id, claim in json.loads(path.read_text())["claims"].items():
            for test in claim.get("tests") or []:
                ranges = (test["claim_range"], test["alternative_range"])
                span = (min(float(r["lo"]) for r in ranges), max(float(r["hi"]) for r in ranges))
                lo, hi = (float(test["estimate"][end]) for end in ("lo", "hi"))
                if span in spans and not math.isnan(lo) and not span[0] <= lo <= hi <= span[1]:
                    problems.append(f"{path.relative_to(repo.root)} {claim_id}: [{lo:.4g}, {hi:.4g}] outside {list(span)}")
    assert problems == []
