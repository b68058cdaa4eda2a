"""The publishing side: notebooks -> papermill -> pages, results and the book (the `book` extra serves it).

Nothing outside `geofact.pipeline` imports it; it never imports a model, nor the page tools
(`geofact.pages`), which the pages themselves import (README, "Import rules"; tests/test_layout.py).
Its interface to the science side is `geofact.settings`.
"""
