import shutil
from pathlib import Path

import pytest

from geofact.nl.corpus import (
    DATA_DIR,
    TEMPLATES_PER_RELATION,
    CorpusError,
    corpus_table,
    facts,
    load_corpus,
    render,
    render_corpus,
    template_for_run,
    validate,
)


@pytest.fixture()
def data_copy(tmp_path: Path) -> Path:
    copy = tmp_path / "data"
    shutil.copytree(DATA_DIR, copy)
    return copy


def _edit_csv(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


def test_shipped_corpus_passes_its_validator():
    assert validate() == []


def test_every_category_has_hundreds_of_facts_and_five_templates_per_relation():
    corpus = load_corpus()
    assert set(corpus.categories) == {"people", "companies", "films", "species", "buildings", "programming_languages",
                                      "countries", "cities", "elements"}
    for cat in corpus.categories.values():
        assert len(cat.entities) >= 60
        assert cat.n_facts >= 250
        for rel in cat.relations.values():
            assert len(rel.templates) == TEMPLATES_PER_RELATION


@pytest.mark.parametrize("old,new,message", [
    ("Ulm,Germany", "unknown,Germany", "placeholder"),
    ("Ulm,Germany", "Ulm,Germania", "country list"),
    ("19th century,Ulm", "19th-century,Ulm", "century must read"),
    (",male,German,physicist", ",man,German,physicist", "is not one of"),
    ("Ulm,Germany", "Ulm; Munich,Germany", "several answers"),
])
def test_validator_names_each_bad_field(data_copy, old, new, message):
    _edit_csv(data_copy / "people.csv", old, new)
    problems = validate(data_copy)
    assert len(problems) == 1 and message in problems[0] and "Albert Einstein" in problems[0]


def test_validator_catches_duplicates_years_and_templates(data_copy):
    people = data_copy / "people.csv"
    people.write_text(people.read_text() + "albert einstein,19th century,Ulm,Germany,male,German,physicist,Judaism\n")
    _edit_csv(data_copy / "films.csv", "The Godfather,Francis Ford Coppola,1972", "The Godfather,Francis Ford Coppola,1872")
    _edit_csv(data_copy / "corpus.yaml", '"{subj} was born in the {obj}"', '"{obj} was the birth century of {subj}"')
    problems = "\n".join(validate(data_copy))
    assert "duplicate entity" in problems
    assert "year 1872 outside [1890, 2025]" in problems
    assert "must end with {obj}" in problems
    with pytest.raises(CorpusError, match="3 corpus problem"):
        load_corpus.__wrapped__(data_copy)


def test_render_spans_point_at_subject_and_answer():
    corpus = load_corpus()
    for fact in facts(corpus, "films")[:50] + facts(corpus, "people", "religion")[:50]:
        for t in range(TEMPLATES_PER_RELATION):
            r = render(corpus, fact, t)
            assert r.text[slice(*r.subject_span)] == fact.subject
            assert r.text[slice(*r.answer_span)] == fact.answer
            assert r.text.endswith(fact.answer) and r.prompt + " " + fact.answer == r.text
    with pytest.raises(ValueError, match=r"template must be in \[0, 4\]"):
        render(corpus, facts(corpus, "films")[0], 5)


def test_template_choice_is_deterministic_and_varies_across_relations():
    chosen = {template_for_run("people", r, 0) for r in load_corpus().category("people").relations}
    assert template_for_run("people", "gender", 3) == template_for_run("people", "gender", 3)
    assert len(chosen) > 1


def test_table_counts_match_the_rendered_corpus():
    corpus = load_corpus()
    rows = {row["category"]: row for row in corpus_table(corpus)}
    assert len(render_corpus(corpus, ["species"])) == rows["species"]["sentences"]
    assert rows["people"]["paper_entities"] == 866 and rows["species"]["paper_entities"] is None
    assert "paradigm" in rows["programming_languages"]["omitted"]


def test_unknown_names_fail_clearly():
    corpus = load_corpus()
    with pytest.raises(ValueError, match="category must be one of"):
        corpus.category("planets")
    with pytest.raises(ValueError, match="relation must be one of"):
        facts(corpus, "people", "height")


def test_validator_checks_integer_ranges_and_keeps_sodium(data_copy):
    _edit_csv(data_copy / "elements.csv", "Hydrogen,H,1,1", "Hydrogen,H,1,8")
    problems = validate(data_copy)
    assert len(problems) == 1 and "integer 8 outside [1, 7]" in problems[0] and "Hydrogen" in problems[0]
    assert any(row["symbol"] == "Na" for row in load_corpus().category("elements").entities)


def test_a_category_digest_moves_with_its_own_content_only(data_copy):
    before = load_corpus.__wrapped__(data_copy)
    _edit_csv(data_copy / "elements.csv", "Hydrogen,H,1,1", "Hydrogen,H,1,2")
    after = load_corpus.__wrapped__(data_copy)
    assert after.category("elements").digest != before.category("elements").digest
    assert after.category("people").digest == before.category("people").digest
    assert after.categories_digest(["people", "films"]) == before.categories_digest(["people", "films"])
    assert after.categories_digest(["people", "films"]) != after.categories_digest(["films", "people"])
    assert after.digest != before.digest
