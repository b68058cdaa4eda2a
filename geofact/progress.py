"""Progress bars that behave both in Jupyter and under `geofact run`."""

from __future__ import annotations

from typing import Any, Iterable, TypeVar

from geofact.settings import is_batch_run

T = TypeVar("T")


def progress(iterable: Iterable[T], **kwargs: Any) -> Iterable[T]:
    """tqdm progress: a widget in Jupyter, plain text on stderr in batch runs (kept out of the book)."""
    if is_batch_run():
        from tqdm import tqdm
    else:
        from tqdm.auto import tqdm
    return tqdm(iterable, **kwargs)
