"""The publishing side: notebooks -> papermill -> pages, results and the book (the `book` extra serves it).

Nothing outside `geofact.pipeline` imports it, and it never imports the models (README, "Import rules";
tests/test_layout.py). Its interface to the science side is `geofact.settings`.
"""
