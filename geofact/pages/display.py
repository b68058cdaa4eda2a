"""`Markdown` and `display` for the experiment pages: IPython's where it is installed, and where it is
not (a GPU lease, under `geofact compute`) stand-ins that show nothing, since there a page runs only for
the records it leaves."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator

try:
    from IPython.display import Markdown
    from IPython.display import display as _show
except ImportError:

    class Markdown:  # type: ignore[no-redef]
        """Markdown text kept as it is (`.data`, as IPython's): nothing renders it on a node."""

        def __init__(self, data: str = "", *args: Any, **kwargs: Any) -> None:
            self.data = data

    def _show(*objs: Any, **kwargs: Any) -> None:
        """Nothing to show: the script's output is its records."""


_silent = False


def display(*objs: Any, **kwargs: Any) -> None:
    """IPython's display, unless inside `silenced()`."""
    if not _silent:
        _show(*objs, **kwargs)


@contextmanager
def silenced() -> Iterator[None]:
    """Show nothing inside: a page's verdict code run again at another reading point (geofact.pages.readings)
    computes its verdicts without printing its tables a second time."""
    global _silent
    before, _silent = _silent, True
    try:
        yield
    finally:
        _silent = before


__all__ = ["Markdown", "display", "silenced"]
