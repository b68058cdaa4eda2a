"""The built book as a reader meets it: every page opened in headless Chromium with the network cut
off (slow). Chromium is Debian's package (`apt-get install chromium`; CI installs it), driven by
Playwright through `executable_path`: nothing is downloaded at test time."""

import contextlib
import functools
import http.server
import os
import re
import shutil
import threading
from pathlib import Path
from urllib.parse import urldefrag, urlparse

import pytest

from geofact.pipeline.check import check

pytestmark = pytest.mark.slow
SKIPPED_PAGES = {"genindex.html", "search.html", "index.html"}  # Sphinx's index and search; index.html only redirects
WINDOW = {"width": 1280, "height": 800}  # a laptop's browser window at normal zoom: figures shown about 670 px wide
MIN_SHOWN_SCALE = 0.58


def chromium() -> str:
    path = os.environ.get("GEOFACT_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        message = "no Chromium found: apt-get install chromium, or point GEOFACT_CHROMIUM at one"
        if os.environ.get("GEOFACT_REQUIRE_BROWSER"):  # set by CI, where a missing browser is a failure
            pytest.fail(message)
        pytest.skip(message)
    return path


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


# What the page shows once MathJax has finished: math left untypeset, the tab's title, figures and
# their captions, anchors, links, and any widget still waiting for its manager.
INSPECT = """async () => {
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) { await MathJax.startup.promise; }
  const main = document.querySelector('article.bd-article') || document.querySelector('main') || document.body;
  return {
    title: document.title,
    math: document.querySelectorAll('.math').length,
    untypeset: [...document.querySelectorAll('.math')].filter(e => !e.querySelector('mjx-container'))
                 .map(e => e.textContent.slice(0, 80)),
    rawTex: (main.innerText.match(/\\\\\\(|\\\\\\[|\\$\\$/g) || []).length,
    ids: [...document.querySelectorAll('[id]')].map(e => e.id),
    links: [...main.querySelectorAll('a[href]')].map(a => a.getAttribute('href')),
    images: main.querySelectorAll('img').length,
    uncaptioned: [...main.querySelectorAll('img')].filter(img => {
      const figure = img.closest('figure');
      const caption = figure && figure.querySelector('figcaption');
      return !(caption && caption.textContent.trim() && figure.id);
    }).map(img => img.getAttribute('src')),
    imageScales: [...main.querySelectorAll('img')].map(img =>
                   [img.getAttribute('src'), img.naturalWidth ? img.clientWidth / img.naturalWidth : 1]),
    widgetsLoading: [...document.querySelectorAll('.jupyter-widgets, .widget-area')].length
                    + (main.innerText.includes('Loading widget') ? 1 : 0),
  };
}"""


@contextlib.contextmanager
def browser_on(book: Path):
    """Chromium with the network cut off, and the base URL of `book` served locally; requests that tried
    to leave are collected in the returned list."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is in the test extra")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(QuietHandler, directory=str(book)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_port}/"
    try:
        with sync_api.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium(), args=["--no-sandbox"])
            outside: list[str] = []

            def context(viewport: dict):
                ctx = browser.new_context(viewport=viewport)

                def route(r) -> None:
                    if r.request.url.startswith(base) or r.request.url.startswith("data:"):
                        r.continue_()
                    else:
                        outside.append(r.request.url)
                        r.abort()

                ctx.route("**/*", route)
                return ctx

            yield base, context, outside
            browser.close()
    finally:
        server.shutdown()


@pytest.fixture(scope="module")
def pages(committed_book: Path) -> dict[str, dict]:
    """Each page of the book, opened in Chromium: what INSPECT saw, and every request that tried to leave."""
    seen: dict[str, dict] = {}
    with browser_on(committed_book) as (base, context, outside):
        page = context(WINDOW).new_page()
        # every page measured as a first visit: nothing served from the cache of the page before
        page.context.new_cdp_session(page).send("Network.setCacheDisabled", {"cacheDisabled": True})
        loaded: dict[str, int] = {}
        page.on("requestfinished", lambda r: loaded.__setitem__(r.url, r.sizes()["responseBodySize"]))
        for html in sorted(committed_book.glob("*.html")):
            if html.name in SKIPPED_PAGES:
                continue
            outside.clear()
            loaded.clear()
            page.goto(base + html.name, wait_until="networkidle")
            seen[html.name] = {**page.evaluate(INSPECT), "outside": list(outside), "bytes": sum(loaded.values()),
                               "files": set(loaded)}
    return seen


def test_committed_book_is_fresh_and_builds_in_strict_mode(repo, committed_book):
    """Here, beside the other readers of the committed book's build, so that `make test`'s processes build it once."""
    problems = check(repo)
    assert problems == [], "committed pages are stale; run `geofact run` and commit:\n" + "\n".join(problems)
    assert (committed_book / "reproduction-status.html").exists()


def test_every_page_was_opened(pages, committed_book):
    assert "reproduction-status.html" in pages and "thm-khop-lower-bound.html" in pages
    assert len(pages) == len([p for p in committed_book.glob("*.html") if p.name not in SKIPPED_PAGES])


def test_no_request_leaves_the_machine(pages):
    assert {name: p["outside"] for name, p in pages.items() if p["outside"]} == {}


def test_math_typesets_offline_on_every_page(pages):
    assert {name: p["untypeset"][:3] for name, p in pages.items() if p["untypeset"]} == {}
    assert {name: p["rawTex"] for name, p in pages.items() if p["rawTex"]} == {}
    theory = [p for name, p in pages.items() if name.startswith("thm-")]
    assert theory and all(p["math"] >= 10 for p in theory)  # the theory pages are mostly math


def test_titles_are_plain_text(pages):
    assert [p["title"] for p in pages.values() if re.search(r"\\\(|\$|\\[a-z]+\{", p["title"])] == []


def test_no_widget_is_left_loading(pages):
    assert {name: p["widgetsLoading"] for name, p in pages.items() if p["widgetsLoading"]} == {}


def test_status_page_links_land_on_existing_anchors(pages):
    status = pages["reproduction-status.html"]
    internal = [href for href in status["links"] if not urlparse(href).scheme and not href.startswith("mailto:")]
    assert internal, "the status page links to no page"
    broken = []
    for href in internal:
        target, anchor = urldefrag(href)
        target = target or "reproduction-status.html"
        if target not in pages or (anchor and anchor not in pages[target]["ids"]):
            broken.append(href)
    assert broken == []


# A first load was 3.9 MB, 1.5 MB of it the theme's icon script, which book/_templates leaves out;
# MathJax (1.2 MB) and the figures are the rest. The heaviest page, exp-readout (eight figures, 1.09 MB
# of PNG), loads about 3.56 MB since its figure of the spike study's states (2026-11-27; 3.48 MB before).
PAGE_BUDGET = 3_600_000


def test_pages_load_light(pages):
    assert [name for name, p in pages.items() if any("fontawesome.js" in f for f in p["files"])] == []
    assert {name: p["bytes"] for name, p in pages.items() if p["bytes"] > PAGE_BUDGET} == {}


def test_every_figure_has_a_caption_and_a_name(pages):
    assert sum(p["images"] for p in pages.values()) >= 30
    assert {name: p["uncaptioned"] for name, p in pages.items() if p["uncaptioned"]} == {}


def test_figure_text_is_legible_at_normal_zoom(pages):
    """A figure's "small" text (legends, ticks: 10.4 pt at 110 dpi, 15.9 px in the PNG) must read at
    >= 9 px, so no figure may be shown below 0.58 of its size (geofact.pages.plotting.MAX_FIGURE_WIDTH)."""
    shrunk = {name: [(src.rsplit("/", 1)[-1], round(scale, 2)) for src, scale in p["imageScales"] if scale < MIN_SHOWN_SCALE]
              for name, p in pages.items()}
    assert {name: images for name, images in shrunk.items() if images} == {}


def test_every_claim_on_the_status_page_links_to_its_verdict(pages, repo):
    from geofact.pipeline.ledger import load_ledger

    links = set(pages["reproduction-status.html"]["links"])
    expected = {f"{c.notebook}.html#verdict-{c.id}" for c in load_ledger(repo.ledger_path) if f"{c.notebook}.html" in pages}
    assert expected and sorted(expected - links) == []


# The front of the book (issue 48) as a phone and a wide laptop window show it, and every page at a phone's width: the badges are
# there, nothing widens the page past the window, no "nan" reaches the reader, and the status page stays
# a few screens long (56,446 px at 1400 px before it was grouped; 9,238 after, 2026-11-27).
FRONT_PAGES = ("intro.html", "reproduction-status.html", "claims.html")
WIDTHS = (390, 1400)
STATUS_HEIGHT_BUDGET = 12_000  # px at 1400 px wide: about 13 screens of a 900-px window

MEASURE = """async () => {
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) { await MathJax.startup.promise; }
  const main = document.querySelector('article.bd-article') || document.querySelector('main') || document.body;
  return {
    overflow: document.documentElement.scrollWidth - window.innerWidth,
    height: document.documentElement.scrollHeight,
    badges: [...main.querySelectorAll('.gf-badge')].map(b => b.textContent.trim()),
    nan: (main.innerText.match(/\\bnan\\b/gi) || []).length,
  };
}"""


@pytest.fixture(scope="module")
def front(committed_book: Path) -> dict[tuple[str, int], dict]:
    """The front pages at each of WIDTHS; every page of the book at a phone's width."""
    every = sorted(h.name for h in committed_book.glob("*.html") if h.name not in SKIPPED_PAGES)
    seen = {}
    with browser_on(committed_book) as (base, context, _):
        for width in WIDTHS:
            page = context({"width": width, "height": 900}).new_page()
            for name in every if width == min(WIDTHS) else FRONT_PAGES:
                page.goto(base + name, wait_until="networkidle")
                seen[name, width] = page.evaluate(MEASURE)
    return seen


def test_every_page_fits_a_phone_and_the_front_pages_a_wide_window(front):
    assert len([key for key in front if key[1] == min(WIDTHS)]) > len(FRONT_PAGES)  # every page at 390 px
    assert {key: m["overflow"] for key, m in front.items() if m["overflow"] > 0} == {}


def test_the_status_page_badges_every_verdict_and_stays_short(front, repo):
    from geofact.pipeline.ledger import load_ledger
    from geofact.pipeline.ledger_view import LedgerView

    status = front["reproduction-status.html", 1400]
    profiles = LedgerView.read(repo).profiles
    claims = load_ledger(repo.ledger_path)
    verdicts = [b for b in status["badges"] if b[0] in "✓✗?○–" and not b[2].isdigit()]
    assert len(verdicts) == len(claims) * len(profiles)  # one badge per claim and profile, with its words
    assert any(b.startswith("✓") and b.endswith("hold") for b in status["badges"])  # the counts, badged
    assert status["height"] <= STATUS_HEIGHT_BUDGET
    assert front["intro.html", 1400]["badges"]  # the front page's key to the verdicts


def test_no_nan_reaches_the_front_pages(front):
    assert {key: m["nan"] for key, m in front.items() if key[0] in FRONT_PAGES and m["nan"]} == {}
