"""The entity corpus of Appendix E (`app:real-lm-probing-data`, `tab:lm-recall-corpus`).

Real, well-known entities in six categories, each with one certain answer per relation, shipped as
versioned data under `geofact/nl/data/`: `corpus.yaml` holds the schema (relations, field kinds,
controlled vocabularies, five paraphrased templates per relation) and one CSV per category holds the
facts. `load_corpus()` reads and validates both; `validate()` lists every problem instead of stopping
at the first, so a curator sees them all at once.

A fact is rendered through a template into a sentence whose subject and answer spans are known in
characters, which is what the probes (`geofact.nl.relation_probing`) and the corpus LM (`geofact.nl.corpus_lm`)
need to find the subject's tokens and the answer's first token.
"""

from __future__ import annotations

import csv
import hashlib
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import yaml

from geofact.store import record_key

DATA_DIR = Path(__file__).parent / "data"
FIELD_KINDS = ("text", "year", "integer", "century", "choice", "country", "language")
TEMPLATES_PER_RELATION = 5
# Placeholders a generator writes when it does not know (the paper's placeholder set, extended).
PLACEHOLDERS = frozenset({"unknown", "n/a", "none", "varies", "various", "uncertain", "?", "-", "tbd", "null"})
# Matched exactly, not case-folded: "Na" is sodium's symbol.
EXACT_PLACEHOLDERS = frozenset({"NA", "na"})
# Separators that would smuggle a second answer into one cell.
MULTI_ANSWER = re.compile(r";|/| \| |,\s*and\b")
CENTURY = re.compile(r"^(\d+)(st|nd|rd|th) century( BC)?$")


class CorpusError(ValueError):
    """The corpus data break the schema; `problems` lists every violation found."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        shown = "\n  ".join(problems[:20])
        more = f"\n  ... and {len(problems) - 20} more" if len(problems) > 20 else ""
        super().__init__(f"{len(problems)} corpus problem(s):\n  {shown}{more}")


@dataclass(frozen=True)
class Relation:
    """One attribute of a category: how its answers are checked and the five ways it is asked."""

    name: str
    kind: str
    description: str
    templates: tuple[str, ...]
    values: tuple[str, ...] = ()   # allowed answers for kind "choice"
    min: int | None = None         # inclusive range for kinds "year" and "integer"
    max: int | None = None


@dataclass(frozen=True)
class Category:
    name: str
    entity_kind: str
    sources: str
    relations: dict[str, Relation]
    omitted: dict[str, str]        # the paper's relations left out here, with the reason
    entities: tuple[dict[str, str], ...]

    @property
    def n_facts(self) -> int:
        return len(self.entities) * len(self.relations)

    @property
    def digest(self) -> str:
        """sha256 of this category's relations (kinds, templates) and facts: what a cached probe or LM
        trained on it depends on, so adding another category keeps its caches valid."""
        content = {"relations": {n: vars(r) for n, r in self.relations.items()}, "entities": self.entities}
        return record_key(content)


@dataclass(frozen=True)
class Corpus:
    version: int
    categories: dict[str, Category]
    countries: frozenset[str]
    languages: frozenset[str]
    digest: str                    # sha256 of all the data files, recorded in every result that uses them

    def category(self, name: str) -> Category:
        if name not in self.categories:
            raise ValueError(f"category must be one of {sorted(self.categories)}, got {name!r}")
        return self.categories[name]

    def categories_digest(self, names: list[str] | tuple[str, ...]) -> str:
        """One digest over the named categories' contents (their order matters, as it does for an LM's data)."""
        blob = "/".join(f"{n}:{self.category(n).digest}" for n in names)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Fact:
    category: str
    relation: str
    subject: str
    answer: str


@dataclass(frozen=True)
class Rendered:
    """A fact written out through one template; spans are [start, end) character offsets in `text`."""

    fact: Fact
    template: int
    text: str
    subject_span: tuple[int, int]
    answer_span: tuple[int, int]

    @property
    def prompt(self) -> str:
        """The text before the answer (without the separating space): what an LM continues."""
        return self.text[: self.answer_span[0]].rstrip()


def _read_schema(path: Path) -> dict:
    schema = yaml.safe_load(path.read_text())
    if not isinstance(schema, dict) or "categories" not in schema:
        raise CorpusError([f"{path}: expected a mapping with 'categories'"])
    return schema


def _relation(name: str, spec: dict) -> Relation:
    return Relation(
        name=name,
        kind=str(spec.get("kind")),
        description=str(spec.get("description", "")),
        templates=tuple(spec.get("templates") or ()),
        values=tuple(str(v) for v in spec.get("values") or ()),
        min=spec.get("min"),
        max=spec.get("max"),
    )


def _read_rows(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with path.open(newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        return list(reader.fieldnames or []), list(reader)


def _check_template(where: str, template: str) -> list[str]:
    problems = []
    if template.count("{subj}") != 1 or template.count("{obj}") != 1:
        problems.append(f"{where}: template {template!r} must contain {{subj}} and {{obj}} once each")
    elif not template.endswith("{obj}"):
        problems.append(f"{where}: template {template!r} must end with {{obj}} (the answer is what the LM continues with)")
    elif template.index("{subj}") > template.index("{obj}"):
        problems.append(f"{where}: template {template!r} must put {{subj}} before {{obj}}")
    return problems


def _check_value(where: str, relation: Relation, value: str, countries: frozenset[str], languages: frozenset[str]) -> list[str]:
    if value is None or not value.strip():
        return [f"{where}: empty answer"]
    if value != value.strip() or "  " in value:
        return [f"{where}: stray whitespace in {value!r}"]
    if value.lower() in PLACEHOLDERS or value in EXACT_PLACEHOLDERS:
        return [f"{where}: placeholder answer {value!r} (confidence-or-skip: leave the entity out instead)"]
    if MULTI_ANSWER.search(value):
        return [f"{where}: {value!r} looks like several answers; one answer per (entity, relation)"]
    kind = relation.kind
    if kind in ("year", "integer"):
        if not re.fullmatch(r"-?\d+", value):
            return [f"{where}: {kind} must be an integer, got {value!r}"]
        if not relation.min <= int(value) <= relation.max:
            return [f"{where}: {kind} {value} outside [{relation.min}, {relation.max}]"]
    elif kind == "century" and not CENTURY.match(value):
        return [f"{where}: century must read like '19th century' or '4th century BC', got {value!r}"]
    elif kind == "choice" and value not in relation.values:
        return [f"{where}: {value!r} is not one of {list(relation.values)}"]
    elif kind == "country" and value not in countries:
        return [f"{where}: {value!r} is not in the schema's country list"]
    elif kind == "language" and value not in languages:
        return [f"{where}: {value!r} is not in the schema's language list"]
    return []


def validate(data_dir: Path = DATA_DIR) -> list[str]:
    """Every problem in the corpus data (an empty list when it is clean)."""
    schema = _read_schema(Path(data_dir) / "corpus.yaml")
    countries = frozenset(schema.get("countries") or ())
    languages = frozenset(schema.get("languages") or ())
    problems: list[str] = []
    for cat_name, cat in schema["categories"].items():
        relations = {name: _relation(name, spec) for name, spec in (cat.get("relations") or {}).items()}
        if not relations:
            problems.append(f"{cat_name}: no relations")
        for overlap in sorted(set(relations) & set(cat.get("omitted") or {})):
            problems.append(f"{cat_name}: relation {overlap!r} is both used and listed as omitted")
        for rel in relations.values():
            where = f"{cat_name}.{rel.name}"
            if rel.kind not in FIELD_KINDS:
                problems.append(f"{where}: kind must be one of {FIELD_KINDS}, got {rel.kind!r}")
            if rel.kind == "choice" and len(rel.values) < 2:
                problems.append(f"{where}: a choice needs at least two values")
            if rel.kind in ("year", "integer") and not (isinstance(rel.min, int) and isinstance(rel.max, int)
                                                         and rel.min < rel.max):
                problems.append(f"{where}: a {rel.kind} needs integer min < max")
            if len(rel.templates) != TEMPLATES_PER_RELATION:
                problems.append(f"{where}: needs {TEMPLATES_PER_RELATION} templates, has {len(rel.templates)}")
            if len(set(rel.templates)) != len(rel.templates):
                problems.append(f"{where}: duplicate templates")
            for template in rel.templates:
                problems += _check_template(where, template)
        path = Path(data_dir) / f"{cat_name}.csv"
        if not path.exists():
            problems.append(f"{cat_name}: missing data file {path.name}")
            continue
        header, rows = _read_rows(path)
        expected = ["name", *relations]
        if header != expected:
            problems.append(f"{path.name}: header {header} must be {expected}")
            continue
        seen: dict[str, int] = {}
        for line, row in enumerate(rows, start=2):
            name = row["name"]
            if None in row or any(row[k] is None for k in expected):
                problems.append(f"{path.name}:{line}: expected {len(expected)} fields")
                continue
            if not name.strip() or name.lower() in PLACEHOLDERS:
                problems.append(f"{path.name}:{line}: missing entity name")
                continue
            key = name.casefold()
            if key in seen:
                problems.append(f"{path.name}:{line}: duplicate entity {name!r} (first on line {seen[key]})")
            seen.setdefault(key, line)
            for rel in relations.values():
                problems += _check_value(f"{path.name}:{line} {name} / {rel.name}", rel, row[rel.name], countries, languages)
    return problems


def _digest(data_dir: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(Path(data_dir).glob("*")):
        if path.suffix in (".yaml", ".csv"):
            h.update(path.name.encode())
            h.update(path.read_bytes())
    return h.hexdigest()[:16]


@cache
def load_corpus(data_dir: Path = DATA_DIR) -> Corpus:
    """Read and validate the corpus; raises CorpusError listing every problem."""
    problems = validate(data_dir)
    if problems:
        raise CorpusError(problems)
    schema = _read_schema(Path(data_dir) / "corpus.yaml")
    categories = {}
    for cat_name, cat in schema["categories"].items():
        relations = {name: _relation(name, spec) for name, spec in cat["relations"].items()}
        _, rows = _read_rows(Path(data_dir) / f"{cat_name}.csv")
        categories[cat_name] = Category(
            name=cat_name,
            entity_kind=str(cat["entity_kind"]),
            sources=str(cat.get("sources", "")),
            relations=relations,
            omitted=dict(cat.get("omitted") or {}),
            entities=tuple(rows),
        )
    return Corpus(
        version=int(schema["version"]),
        categories=categories,
        countries=frozenset(schema["countries"]),
        languages=frozenset(schema["languages"]),
        digest=_digest(data_dir),
    )


def facts(corpus: Corpus, category: str, relation: str | None = None) -> list[Fact]:
    """The (subject, answer) facts of one category, for one relation or all, in file order."""
    cat = corpus.category(category)
    if relation is not None and relation not in cat.relations:
        raise ValueError(f"relation must be one of {sorted(cat.relations)} for {category!r}, got {relation!r}")
    names = [relation] if relation is not None else list(cat.relations)
    return [Fact(category, rel, row["name"], row[rel]) for rel in names for row in cat.entities]


def render(corpus: Corpus, fact: Fact, template: int) -> Rendered:
    """Write `fact` through template number `template` (0-4) of its relation."""
    templates = corpus.category(fact.category).relations[fact.relation].templates
    if not 0 <= template < len(templates):
        raise ValueError(f"template must be in [0, {len(templates) - 1}], got {template}")
    pattern = templates[template]
    before, after_subj = pattern.split("{subj}")
    middle = after_subj[: -len("{obj}")]
    subj_start = len(before)
    subj_end = subj_start + len(fact.subject)
    answer_start = subj_end + len(middle)
    text = before + fact.subject + middle + fact.answer
    return Rendered(fact, template, text, (subj_start, subj_end), (answer_start, answer_start + len(fact.answer)))


def template_for_run(category: str, relation: str, seed: int) -> int:
    """The template one probe run uses for every entity (`app:real-lm-probing-data`: sampled
    deterministically per run), from a hash so it does not depend on iteration order."""
    digest = hashlib.sha256(f"{category}/{relation}/{seed}".encode()).digest()
    return digest[0] % TEMPLATES_PER_RELATION


def render_corpus(corpus: Corpus, categories: list[str] | None = None) -> list[Rendered]:
    """Every fact of the chosen categories through every one of its templates (the LM training set)."""
    chosen = categories if categories is not None else list(corpus.categories)
    return [render(corpus, fact, t) for c in chosen for fact in facts(corpus, c) for t in range(TEMPLATES_PER_RELATION)]


# The paper's corpus (`tab:lm-recall-corpus`): entities and relations per category after its tokenisation filter.
PAPER_CORPUS = {
    "buildings": (1662, ("architect", "architectural_style", "building_type", "completion_year", "construction_start_year",
                         "floor_count", "height_meters", "location", "purpose")),
    "companies": (1312, ("country_of_incorporation", "founding_year", "headquarters_location", "industry",
                         "legal_structure", "main_founder")),
    "films": (442, ("based_on", "country_of_origin", "director", "distributor", "genre", "lead_cast", "original_language",
                    "producer", "production_company", "release_year", "runtime_minutes", "screenwriter")),
    "people": (866, ("century_of_birth", "city_of_birth", "country_of_birth", "gender", "main_language", "occupation",
                     "religion")),
    "programming_languages": (328, ("designer", "file_extension", "first_appeared_year", "implementation_language",
                                    "influenced_by", "license", "paradigm", "typing_discipline")),
}


def corpus_table(corpus: Corpus) -> list[dict[str, object]]:
    """One row per category, in the form of `tab:lm-recall-corpus`, with the paper's counts beside ours."""
    rows = []
    for name, cat in sorted(corpus.categories.items()):
        paper_entities, paper_relations = PAPER_CORPUS.get(name, (None, ()))
        rows.append({
            "category": name,
            "entities": len(cat.entities),
            "relations": len(cat.relations),
            "facts": cat.n_facts,
            "sentences": cat.n_facts * TEMPLATES_PER_RELATION,
            "relation_names": ", ".join(cat.relations),
            "paper_entities": paper_entities,
            "paper_relations": len(paper_relations) if paper_relations else None,
            "omitted": ", ".join(f"{k} ({v})" for k, v in cat.omitted.items()),
        })
    return rows


if __name__ == "__main__":
    found = validate()
    print("\n".join(found) if found else f"corpus clean: {sum(r['entities'] for r in corpus_table(load_corpus()))} entities")
    raise SystemExit(1 if found else 0)
