"""`Markdown` and `display` for the experiment pages: IPython's where it is installed, and where it is
not (a GPU lease, under `geofact compute`) stand-ins that show nothing, since there a page runs only for
the records it leaves."""

from __future__ import annotations

from typing import Any

try:
    from IPython.display import Markdown, display
except ImportError:

    class Markdown:  # type: ignore[no-redef]
        """Markdown text kept as it is (`.data`, as IPython's): nothing renders it on a node."""

        def __init__(self, data: str = "", *args: Any, **kwargs: Any) -> None:
            self.data = data

    def display(*objs: Any, **kwargs: Any) -> None:  # type: ignore[no-redef]
        """Nothing to show: the script's output is its records."""

__all__ = ["Markdown", "display"]
