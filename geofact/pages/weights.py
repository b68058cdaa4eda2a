"""Weight matrices and residual states drawn with the proof's names for their coordinates.

A construction names the blocks of its residual stream (`Construction.blocks`: "flag", "bin(s)",
"position", ...); these helpers draw any matrix whose rows or columns are such coordinates, so that a
reader can match each entry to the proof's paragraph (The Annotated Transformer's way).
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib.colors as mcolors
import numpy as np

Labels = dict[str, slice] | Sequence[str] | None

# Annotating every entry keeps a small instance readable; beyond this many the numbers would overlap.
MAX_ANNOTATED = 24
# Entries this small relative to the largest are left unwritten (white on the scale anyway): the
# softmax's leak e^-tau ~ 1e-22 would otherwise crowd the numbers that carry the construction.
UNWRITTEN = 1e-6


def _label_axis(ax, axis: str, labels: Labels, n: int) -> None:
    set_ticks = ax.set_xticks if axis == "x" else ax.set_yticks
    if labels is None:
        set_ticks([])
        return
    if isinstance(labels, dict):
        for block in list(labels.values())[1:]:
            line = ax.axvline if axis == "x" else ax.axhline
            line(block.start - 0.5, color="0.35", linewidth=0.8)
        named = [(name, block) for name, block in labels.items() if block.stop > block.start]
        upright = axis == "y" or all(len(name) <= 3 for name, _ in named)
        set_ticks([(block.start + block.stop - 1) / 2 for _, block in named], [name for name, _ in named],
                  rotation=0 if upright else 90)
        return
    if len(labels) != n:
        raise ValueError(f"{axis} labels: {len(labels)} given for {n} entries")
    set_ticks(range(n), list(labels), rotation=90 if axis == "x" else 0)


def draw_matrix(ax, matrix: Any, title: str, rows: Labels = None, cols: Labels = None) -> None:
    """`matrix` (n_rows, n_cols) as a heatmap on a symmetric red-blue scale (zero is white).

    `rows`/`cols` are either named coordinate blocks (a dict name -> slice: separators and one centred
    label per block) or one label per row/column. Entries are written in when the matrix is small,
    except those below `UNWRITTEN` times the largest.
    """
    values = np.asarray(matrix.detach().cpu() if hasattr(matrix, "detach") else matrix, dtype=float)
    if values.ndim != 2:
        raise ValueError(f"matrix must be 2-D, got shape {values.shape}")
    scale = float(np.abs(values).max()) or 1.0
    ax.imshow(values, cmap="RdBu_r", norm=mcolors.Normalize(-scale, scale), aspect="auto", interpolation="nearest")
    ax.grid(False)
    ax.set_title(title)
    _label_axis(ax, "x", cols, values.shape[1])
    _label_axis(ax, "y", rows, values.shape[0])
    ax.tick_params(length=0)
    if max(values.shape) <= MAX_ANNOTATED:
        for (i, j), value in np.ndenumerate(values):
            if abs(value) >= UNWRITTEN * scale:
                text = f"{value:.0f}" if float(value).is_integer() else f"{value:.2g}"
                ax.text(j, i, text, ha="center", va="center", fontsize="x-small",
                        color="white" if abs(value) > 0.6 * scale else "black")


def source_markdown(fn: Any) -> str:
    """The source of `fn` as a fenced Python block, headed by its file and lines (relative to the package)."""
    lines, first = inspect.getsourcelines(fn)
    path = Path(inspect.getsourcefile(fn)).resolve()
    package = Path(__file__).resolve().parents[1]
    where = path.relative_to(package.parent) if path.is_relative_to(package.parent) else path.name
    header = f"`{fn.__module__}.{fn.__qualname__}` ({where}, lines {first}–{first + len(lines) - 1}):"
    return f"{header}\n\n```python\n{''.join(lines).rstrip()}\n```\n"


def show_source(fn: Any) -> None:
    """Display `fn`'s source under the paragraph it implements (rendered as a code block in the book)."""
    from IPython.display import Markdown, display

    display(Markdown(source_markdown(fn)))


def residual_stream(cache: dict[str, Any], index: int = 0) -> list[tuple[str, Any]]:
    """The residual stream of one prompt layer by layer, from a `Transformer.run_with_cache` cache:
    [("embeddings", (seq, d)), ("after layer 1", (seq, d)), ...] for prompt `index` of the batch."""
    states = [("embeddings", cache["embed"][index])]
    layer = 0
    while f"blocks.{layer}.resid_post" in cache:
        states.append((f"after layer {layer + 1}", cache[f"blocks.{layer}.resid_post"][index]))
        layer += 1
    return states
