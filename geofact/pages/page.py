"""A page's setup in one call: what every notebook starts with.

    page = Page("exp-capacity", cache_dir)   # the book's figure style is on from here
    report = page.report                     # headline numbers and verdicts (geofact.pages.report)
    cache = page.cache()                     # the run cache: cache_dir, or .geofact/runs of this checkout
    for x in page.progress(items): ...       # a progress bar that stays out of the book
    page.interactive(fn, defaults, **controls)  # a live control in Jupyter, one call under `geofact run`
"""

from __future__ import annotations

from pathlib import Path

from geofact.pages.notebook import interactive
from geofact.pages.plotting import use_style
from geofact.pages.report import Report
from geofact.progress import progress
from geofact.settings import checkout_root, runs_dir


class Page:
    progress = staticmethod(progress)
    interactive = staticmethod(interactive)

    def __init__(self, name: str, cache_dir: str | Path | None = None) -> None:
        use_style()
        self.name = name
        self.report = Report(name)
        self._cache_dir = Path(cache_dir) if cache_dir else None

    def cache(self, subfolder: str | None = None) -> Path:
        """The run cache (or one of its subfolders): `cache_dir` when the page was given one, else this
        checkout's `.geofact/runs`."""
        root = self._cache_dir or runs_dir(checkout_root())
        return root / subfolder if subfolder else root
