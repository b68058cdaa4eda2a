"""A page's setup in one call: what every notebook starts with.

    page = Page("exp-capacity", cache_dir, device, precision)   # the book's figure style is on from here
    device = page.device                     # the page's device, resolved once: a torch.device from here on
    report = page.report                     # headline numbers and verdicts (geofact.pages.report)
    cache = page.cache()                     # the run cache: cache_dir, or .geofact/runs of this checkout
    for x in page.progress(items): ...       # a progress bar that stays out of the book
    page.interactive(fn, defaults, **controls)  # a live control in Jupyter, one call under `geofact run`
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from geofact.pages.notebook import interactive
from geofact.pages.plotting import use_style
from geofact.pages.report import Report
from geofact.progress import progress
from geofact.settings import checkout_root, runs_dir

if TYPE_CHECKING:
    import torch


class Page:
    progress = staticmethod(progress)
    interactive = staticmethod(interactive)

    def __init__(self, name: str, cache_dir: str | Path | None = None, device: str | torch.device | None = None,
                 precision: str | None = None) -> None:
        """`device` and `precision`, the page's parameters, are resolved here and nowhere else on the page:
        a device this machine lacks, or a precision policy the device cannot run, fails at the page's first
        cell, before any work; below it every function takes `self.device`, a torch.device, as it is
        (geofact.device.as_device)."""
        use_style()
        self.name = name
        self.device = self.precision = None
        if device is not None:
            from geofact.device import as_device  # torch: only the pages that compute on a device need it

            self.device = as_device(device)
        if precision is not None:
            from geofact.precision import check_precision

            self.precision = check_precision(precision, self.device)
        self.report = Report(name)
        self._cache_dir = Path(cache_dir) if cache_dir else None

    def cache(self, subfolder: str | None = None) -> Path:
        """The run cache (or one of its subfolders): `cache_dir` when the page was given one, else this
        checkout's `.geofact/runs`."""
        root = self._cache_dir or runs_dir(checkout_root())
        return root / subfolder if subfolder else root
