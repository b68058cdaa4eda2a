"""`Markdown` and `display` for the experiment pages: IPython's where it is installed, and where it is
not (a GPU lease, under `geofact compute`) stand-ins that show nothing, since there a page runs only for
the records it leaves (geofact.pipeline.standins)."""

from __future__ import annotations

try:
    from IPython.display import Markdown, display
except ImportError:
    from geofact.pipeline.standins import Markdown
    from geofact.pipeline.standins import show_nothing as display

__all__ = ["Markdown", "display"]
