"""Helpers for notebooks that behave well both in Jupyter and when `geofact run` executes them."""

from __future__ import annotations

import os
from typing import Any, Callable, Iterable, TypeVar

from geofact.report import RESULTS_PATH_ENV

T = TypeVar("T")


def is_batch_run() -> bool:
    """True when the notebook is being executed by `geofact run` (which sets the results path)."""
    return bool(os.environ.get(RESULTS_PATH_ENV))


def progress(iterable: Iterable[T], **kwargs: Any) -> Iterable[T]:
    """tqdm progress: a widget in Jupyter, plain text on stderr in batch runs (kept out of the book)."""
    if is_batch_run():
        from tqdm import tqdm
    else:
        from tqdm.auto import tqdm
    return tqdm(iterable, **kwargs)


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
