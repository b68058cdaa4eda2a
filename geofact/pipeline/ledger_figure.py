"""The ledger at a glance (issue 48, the front page's figure): every claim a square, coloured and marked by
its verdict, in a row per group and a panel per profile; a dark outline where the verdict is fragile.

Written as SVG by hand rather than with matplotlib: the file is generated with the status page and held
to it byte for byte by `geofact check`, so it must not depend on fonts, dates or a renderer's version;
its text stays text (readable by a screen reader, selectable), and each square's tooltip names its claim.
"""

from __future__ import annotations

from html import escape

from geofact.outcomes import FAILS, HOLDS, INCONCLUSIVE, NOT_IN_REGIME, NOT_RUN
from geofact.pipeline.ledger_view import MARKS, STATES, LedgerView
from geofact.pipeline.project import Project

FIGURE_NAME = "ledger.svg"  # in book/, beside intro.md
# Okabe-Ito, as the book's figures (geofact.pages.plotting) and the badges (book/_static/geofact.css).
FILL = {HOLDS: "#009E73", FAILS: "#D55E00", INCONCLUSIVE: "#E69F00", NOT_IN_REGIME: "#56B4E9", NOT_RUN: "#D9D9D9"}
INK = {HOLDS: "#FFFFFF", FAILS: "#FFFFFF", INCONCLUSIVE: "#000000", NOT_IN_REGIME: "#000000", NOT_RUN: "#555555"}
PROFILES = ("laptop", "paper")
SQUARE, GAP, PER_LINE = 20, 4, 12  # px; a group wraps after PER_LINE claims
PANEL_GAP, FONT, LINE = 40, 14, 22  # px between the profiles' panels; text size and a text line's height


def _line_count(n: int) -> int:
    return max(1, -(-n // PER_LINE))


def _square(x: float, y: float, state: str, extra: str = "") -> list[str]:
    return [f'<rect x="{x}" y="{y}" width="{SQUARE}" height="{SQUARE}" rx="3" fill="{FILL[state]}"{extra}/>',
            f'<text x="{x + SQUARE / 2:g}" y="{y + SQUARE - 6}" text-anchor="middle" font-size="13" '
            f'fill="{INK[state]}">{escape(MARKS[state])}</text>']


def render_ledger_svg(view: LedgerView) -> str:
    """The figure as SVG text: a group's name, then its claims at each profile side by side. Within a group
    the squares are sorted by state (STATES order), so each row reads as a bar of its counts; the claims keep
    ledger order within a state."""
    panel = PER_LINE * (SQUARE + GAP) - GAP
    width = len(PROFILES) * panel + (len(PROFILES) - 1) * PANEL_GAP
    body: list[str] = []
    for p, profile in enumerate(PROFILES):
        body.append(f'<text x="{p * (panel + PANEL_GAP)}" y="{FONT + 2}" font-weight="bold">{profile}</text>')
    y = LINE + 8
    for g, members in view.by_group().items():
        body.append(f'<text x="0" y="{y + FONT}">{escape(g)} ({len(members)})</text>')
        y += LINE
        for p, profile in enumerate(PROFILES):
            ordered = sorted(members, key=lambda c: STATES.index(view.verdict(c, profile)))
            for i, claim in enumerate(ordered):
                state = view.verdict(claim, profile)
                fragile = view.fragile(claim, profile) is not None
                tip = f"{claim.id}: {state}" + (", fragile under the rounding perturbation" if fragile else "")
                body += [f"<g><title>{escape(tip)}</title>",
                         *_square(p * (panel + PANEL_GAP) + (i % PER_LINE) * (SQUARE + GAP),
                                  y + (i // PER_LINE) * (SQUARE + GAP), state,
                                  ' stroke="#000000" stroke-width="3"' if fragile else ""), "</g>"]
        y += _line_count(len(members)) * (SQUARE + GAP) + 10
    y += 6
    x = 0
    for state in (*STATES, "fragile"):
        label_width = SQUARE + 6 + 8 * len(state) + 20
        if x + label_width > width:
            x, y = 0, y + SQUARE + 8
        body += (_square(x, y, state) if state in FILL else
                 [f'<rect x="{x}" y="{y}" width="{SQUARE}" height="{SQUARE}" rx="3" fill="#FFFFFF" stroke="#000000" stroke-width="3"/>'])
        body.append(f'<text x="{x + SQUARE + 6}" y="{y + SQUARE - 5}">{escape(state)}</text>')
        x += label_width
    height = y + SQUARE + 4
    return "\n".join([f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
                      f'font-family="sans-serif" font-size="{FONT}" role="img" aria-labelledby="ledger-title">',
                      '<title id="ledger-title">Every claim of the ledger by group and verdict, at the laptop and the paper '
                      'profile</title>', f'<rect width="{width}" height="{height}" fill="#FFFFFF"/>', *body, "</svg>"]) + "\n"


def write_ledger_figure(project: Project, view: LedgerView) -> None:
    (project.book_dir / FIGURE_NAME).write_text(render_ledger_svg(view))
