"""Interactive controls that degrade to a static call when the notebook is executed in batch."""

from __future__ import annotations

import os
from typing import Any, Callable

from geofact.report import RESULTS_PATH_ENV


def interactive(fn: Callable[..., Any], defaults: dict[str, Any], **controls: Any) -> None:
    """In Jupyter, an ipywidgets control over `fn`; under `geofact run`, one call with `defaults`.

    The book is static HTML, where a live widget would only show a stale placeholder, so the executed
    page shows the function's output at the defaults and the code a reader can run to get the control.
    """
    if os.environ.get(RESULTS_PATH_ENV):
        fn(**defaults)
        return
    import ipywidgets

    ipywidgets.interact_manual(fn, **controls)
