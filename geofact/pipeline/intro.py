"""The book's front page (issue 48): what the paper says, what this book does, what it found at which
scale, how to run it and how to read a verdict.

Generated with the status page (`geofact status`, after every `geofact run`) from claims.yaml and
results/, and checked by `geofact check` like it: every count and list below comes from the verdicts
the pages computed; the prose around them says nothing a result could contradict.
"""

from __future__ import annotations

import json
from geofact.outcomes import FAILS, HOLDS, INCONCLUSIVE, NOT_IN_REGIME, NOT_RUN
from geofact.pipeline.ledger import GROUPS, Claim, claim_anchor
from geofact.pipeline.ledger_figure import FIGURE_NAME
from geofact.pipeline.ledger_view import LedgerView, badge
from geofact.pipeline.project import Project


def _listed(view: LedgerView, claims: list[Claim], profile: str, state: str) -> str:
    named = [f"{{ref}}`{c.id} <{claim_anchor(c.id)}>`" for c in claims if view.verdict(c, profile) == state]
    return ", ".join(named) if named else "none"


def _executed_on(project: Project, claims: list[Claim]) -> str:
    """Which pages the claims' paper-profile verdicts come from and the device each executed on (its provenance): the
    synthetic experiments need a GPU at that scale, exp-nl-lm's LMs fit a CPU, and a reader should not have to guess."""
    pages = {}
    for c in claims:
        path = project.results("paper", c.notebook)
        if c.notebook not in pages and path.exists():
            meta = json.loads(path.read_text())["provenance"]
            machine = meta.get("machine") or {}
            where = f"a {machine['cores']}-core CPU" if meta.get("device") == "cpu" and machine.get("cores") else None
            pages[c.notebook] = where or meta.get("device", "an unrecorded device")
    return "from " + "; ".join(f"{{doc}}`{name}` executed on {device}" for name, device in pages.items())


def render_intro(project: Project, view: LedgerView | None = None) -> str:
    view = view or LedgerView.read(project)
    by_group = view.by_group()
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
        "and states its provenance; the counts, lists and the figure below are generated from the pages' verdicts.",
        "",
        "## What was found",
        "",
        f"{len(view.claims)} claims of the paper are tested; {{doc}}`reproduction-status` lists each with its verdict,",
        "interval and scale. At the laptop profile (experiments at a reduced N on a CPU) and at the paper's",
        "(`paper`):",
        "",
    ]
    for g, members in by_group.items():
        lines.append(f"- **{g}** ({len(members)}): laptop {view.counted(members, 'laptop')}; "
                     f"paper {view.counted(members, 'paper')}.")
    theorems = by_group[GROUPS[0]]
    lines += [
        "",
        f"The theorems that hold as stated: {_listed(view, theorems, 'laptop', HOLDS)}. "
        f"Those that do not: {_listed(view, theorems, 'laptop', FAILS)}.",
        "",
    ]
    experiments = by_group[GROUPS[2]]
    run_at_paper = [c for c in experiments if view.verdict(c, "paper") != NOT_RUN]
    lines += [
        f"At the paper's scale (the `paper` profile), {len(run_at_paper)} of the {len(experiments)} "
        "experiment claims have a verdict" + (": " + view.counted(run_at_paper, "paper") + f", {_executed_on(project, run_at_paper)}."
                                              if run_at_paper else "; the GPU leases so far trained part of the capacity grid "
                                              "({doc}`leases`)."),
        "",
        f":::{{figure}} {FIGURE_NAME}",
        ":name: fig-ledger",
        ":width: 100%",
        ":alt: Every claim of the ledger as a square, coloured by its verdict, in three rows (the theorems as stated, "
        "proof steps and other statements, experiments), at the laptop and the paper profile.",
        "",
        "Every claim the book tests, one square each, by group (rows) and profile (columns), coloured and marked",
        "by its verdict; a dark outline marks a verdict that moved under the rounding perturbation (fragile).",
        "Generated with this page from `claims.yaml` and `results/` (`geofact.pipeline.ledger_figure`).",
        ":::",
        "",
        "## How to read a verdict",
        "",
        f"A claim {badge(HOLDS)} where the whole interval of what it measures lies in the range the claim predicts,",
        f"{badge(FAILS)} where the interval misses that range, and is {badge(INCONCLUSIVE)} where this scale cannot",
        f"tell the claim from its alternative. It is {badge(NOT_IN_REGIME)} where the runs behind it are not those the",
        "paper's sentence is about (not trained to its stopping rule, or only at the capacity threshold), and",
        f"{badge(NOT_RUN)} where that profile has not executed its page. A verdict is marked",
        "**fragile** where the same page under another rounding of the CPU's matmuls reached another verdict.",
        "A step of a proof that does not hold beside a theorem that does is a finding about the proof as",
        "written: its page says what fails and why.",
        "",
        "## How to run it",
        "",
        "`make book` executes every page at the laptop profile and builds this book; `make test` runs the tests.",
        "`geofact run PAGE --profile smoke|laptop|paper` executes one page at another scale; the synthetic",
        "experiments at the paper's scale need a GPU ({doc}`paper-scale`), the theory pages and exp-nl-lm's LMs fit a",
        "CPU. In Jupyter (`make lab`) every page's parameters can be changed.",
        "",
    ]
    return "\n".join(lines)
