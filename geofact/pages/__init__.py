"""The tools a page uses: its setup (`page.Page`), its report of numbers and verdicts (`report`), the one
figure style and the shared figures (`plotting`, `curves`, `heatmap`, `along_training`), a construction's
weights drawn (`weights`), widgets (`notebook`) and Markdown (`display`).

Pages (notebooks/) import these and the science; these may import the science too (a shared figure
reads a capacity grid), but never the publisher, `geofact.pipeline`, nor does the science import them
(README, "Import rules"; tests/test_layout.py).
"""
