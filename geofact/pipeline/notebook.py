"""Helpers for notebooks that behave well in Jupyter, under `geofact run` and under `geofact compute`.

Pages take `Markdown` and `display` from here, not from IPython: under `geofact compute` (a bare GPU
node, no Jupyter) a page runs as a plain script, and these are then stand-ins that show nothing (the
page is rendered later, at home, from the records the script leaves); elsewhere they are IPython's own,
so the executed pages are those IPython makes.
"""

from __future__ import annotations

from typing import Any, Callable

from geofact.settings import compute_only, is_batch_run

DISPLAY_NAMES = ("Markdown", "display")


class TextMarkdown:
    """Markdown text kept as it is (`.data`, as IPython's): what `Markdown` is where no IPython renders it."""

    def __init__(self, data: str = "") -> None:
        self.data = data


def show_nothing(*objs: Any, **kwargs: Any) -> None:
    """`display` where there is no page to show anything on: the script's output is its records."""


def __getattr__(name: str) -> Any:
    """`Markdown` and `display`, resolved when a page imports them (not when this module loads), so that
    importing geofact.pipeline.page never imports IPython."""
    if name not in DISPLAY_NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if compute_only():
        return {"Markdown": TextMarkdown, "display": show_nothing}[name]
    import IPython.display

    return getattr(IPython.display, name)


def interactive(fn: Callable[..., Any], defaults: dict[str, Any], **controls: Any) -> None:
    """In Jupyter, an ipywidgets control over `fn`; under `geofact run` or `geofact compute`, one call
    with `defaults`.

    The book is static HTML, where a live widget would only show a stale placeholder, so the executed
    page shows the function's output at the defaults and the code a reader can run to get the control.
    """
    if is_batch_run():
        fn(**defaults)
        return
    import ipywidgets

    ipywidgets.interact_manual(fn, **controls)
