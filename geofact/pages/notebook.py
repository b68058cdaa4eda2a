"""Helpers for notebooks that behave well both in Jupyter and when `geofact run` executes them."""

from __future__ import annotations

from typing import Any, Callable

from geofact.settings import is_batch_run


def interactive(fn: Callable[..., Any], defaults: dict[str, Any], **controls: Any) -> None:
    """In Jupyter, an ipywidgets control over `fn`; under `geofact run`, one call with `defaults`.

    The book is static HTML, where a live widget would only show a stale placeholder, so the executed
    page shows the function's output at the defaults and the code a reader can run to get the control.
    """
    if is_batch_run():
        fn(**defaults)
        return
    import ipywidgets

    ipywidgets.interact_manual(fn, **controls)
