"""The book's front page (issue 48): what the paper says, what this book does, what it found at which
scale, how to run it and how to read a verdict.

Generated with the status page (`geofact status`, after every `geofact run`) from claims.yaml and
results/, and checked by `geofact check` like it: every count and list below comes from the verdicts
the pages computed; the prose around them says nothing a result could contradict.
"""

from __future__ import annotations

import json

from geofact.outcomes import FAILS, HOLDS, INCONCLUSIVE, NOT_IN_REGIME, NOT_RUN
from geofact.pipeline.ledger import Claim, load_ledger
from geofact.pipeline.project import Project

GROUPS = ("The theorems as stated", "Proof steps and the paper's other statements", "Experiments")
STATES = (HOLDS, FAILS, INCONCLUSIVE, NOT_IN_REGIME, NOT_RUN)
COUNTED_AS = {HOLDS: "hold", FAILS: "do not hold", INCONCLUSIVE: "inconclusive", NOT_IN_REGIME: "not in regime",
              NOT_RUN: "not run"}  # "9 hold, 2 do not hold", as the status page counts


def group(claim: Claim) -> str:
    """A claim's group: an experiment (its page trains models); a theorem or lemma as the paper states it
    (where it is cited as "Theorem ..." or "Lemma ...", not as a proof or a statement set against its
    proof); else a step of a proof or another statement of the paper's text."""
    if claim.notebook.startswith("exp-"):
        return GROUPS[2]
    stated = claim.paper.startswith(("Theorem", "Lemma")) and " vs " not in claim.paper
    return GROUPS[0] if stated else GROUPS[1]


def _verdicts(project: Project, profile: str) -> dict[str, str]:
    """{claim id: verdict} of every page's results at `profile` (results/<profile>/*.json)."""
    pages = [json.loads(path.read_text()) for path in sorted((project.results_dir / profile).glob("*.json"))]
    return {claim_id: entry.get("verdict", NOT_RUN) for page in pages for claim_id, entry in page.get("claims", {}).items()}


def _counts(claims: list[Claim], verdicts: dict[str, str]) -> str:
    states = [verdicts.get(c.id, NOT_RUN) for c in claims]
    return ", ".join(f"{states.count(s)} {COUNTED_AS[s]}" for s in STATES if states.count(s))


def _listed(claims: list[Claim], verdicts: dict[str, str], state: str) -> str:
    named = [f"{{ref}}`{c.id} <claim-{c.id}>`" for c in claims if verdicts.get(c.id, NOT_RUN) == state]
    return ", ".join(named) if named else "none"


def render_intro(project: Project) -> str:
    claims = load_ledger(project.ledger_path)
    laptop, paper = _verdicts(project, "laptop"), _verdicts(project, "paper")
    by_group = {g: [c for c in claims if group(c) == g] for g in GROUPS}
    lines = [
        "# Geometric factual recall, measured",
        "",
        "*Geometric Factual Recall in Transformers* {cite}`ravfogel-geometric` argues that a transformer can",
        "memorise facts geometrically rather than as an associative memory: for a one-layer model memorising",
        "random bijections from subjects to a shared attribute set, it proves that a logarithmic embedding",
        "dimension suffices, with subject embeddings that superpose their attribute vectors and a small MLP that",
        "selects the relevant one. It extends this to multi-hop queries, with and without chain of thought, with",
        "a matching lower bound, and reports that gradient descent finds this structure and that the trained MLP",
        "transfers zero-shot to new bijections.",
        "",
        "This book is geofact's test of each of those claims: every construction built as real weights and",
        "checked, every bound computed, every experiment trained and analysed, each claim judged against the",
        "alternative it must rule out, with an interval. Every page is executed from the code by `geofact run`",
        "and states its provenance; the counts and lists below are generated from the pages' verdicts.",
        "",
        "## What was found",
        "",
        f"{len(claims)} claims of the paper are tested; {{doc}}`reproduction-status` lists each with its verdict,",
        "interval and scale. At the laptop profile (experiments at a reduced N on a CPU) and at the paper's",
        "(`paper`):",
        "",
    ]
    for g, members in by_group.items():
        lines.append(f"- **{g}** ({len(members)}): laptop {_counts(members, laptop)}; paper {_counts(members, paper)}.")
    theorems = by_group[GROUPS[0]]
    lines += [
        "",
        f"The theorems that hold as stated: {_listed(theorems, laptop, HOLDS)}. "
        f"Those that do not: {_listed(theorems, laptop, FAILS)}.",
        "",
    ]
    experiments = by_group[GROUPS[2]]
    run_at_paper = [c for c in experiments if paper.get(c.id, NOT_RUN) != NOT_RUN]
    lines += [
        f"At the paper's scale (the `paper` profile, on a GPU), {len(run_at_paper)} of the {len(experiments)} "
        "experiment claims have a verdict" + (": " + _counts(run_at_paper, paper) + "." if run_at_paper else
                                              "; the GPU leases so far trained part of the capacity grid "
                                              "({doc}`leases`)."),
        "",
        "## How to read a verdict",
        "",
        "A claim **holds** where the whole interval of what it measures lies in the range the claim predicts,",
        "**does not hold** where the interval misses that range, and is **inconclusive** where this scale cannot",
        "tell the claim from its alternative. It is **not in regime** where the runs behind it are not those the",
        "paper's sentence is about (not trained to its stopping rule, or only at the capacity threshold), and",
        "**fragile** where the same page under another rounding of the CPU's matmuls reached another verdict.",
        "A step of a proof that does not hold beside a theorem that does is a finding about the proof as",
        "written: its page says what fails and why.",
        "",
        "## How to run it",
        "",
        "`make book` executes every page at the laptop profile and builds this book; `make test` runs the tests.",
        "`geofact run PAGE --profile smoke|laptop|paper` executes one page at another scale; the paper's scale",
        "needs a GPU ({doc}`paper-scale`). In Jupyter (`make lab`) every page's parameters can be changed.",
        "",
    ]
    return "\n".join(lines)


def write_intro(project: Project) -> None:
    (project.book_dir / "intro.md").write_text(render_intro(project))
