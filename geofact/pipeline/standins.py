"""Stand-ins for the page toolchain where it is not installed: a GPU lease, under `geofact compute`.

A page is written for Jupyter: it shows Markdown (`geofact.pages.display`: IPython's, or stand-ins
that show nothing where IPython is not installed), glues numbers into its prose with myst-nb, and its project helper reads notebooks with jupytext and nbformat. A lease has none of
them, and under `geofact compute` a page runs only for the records it leaves, so there `glue(...)`
has nothing to glue into and becomes a no-op, and the notebook readers, which the compute path never
calls, fail with a message naming what is missing if anything does call them. Each stand-in is
installed only where its module cannot be imported: where the toolchain is installed, pages get the
real one and run as under `geofact run`. (IPython itself gets none: libraries look for it in
`sys.modules` to tell whether a notebook runs them, and must find nothing.)

(The page tools, geofact.pages, need none of this: they import nothing from the publisher.)
"""

from __future__ import annotations

import importlib.util
import sys
import types
from typing import Any


def glue_nothing(*objs: Any, **kwargs: Any) -> None:
    """myst-nb's `glue` where no page shows anything: the script's output is its records."""


def _absent(name: str) -> types.ModuleType:
    """A module whose every attribute is an error naming the missing package."""
    module = types.ModuleType(name, f"stand-in for {name}, which is not installed here (geofact.pipeline.standins)")

    def missing(attribute: str) -> Any:
        if attribute.startswith("__"):  # what introspection asks of any module (inspect, pickle): plainly absent
            raise AttributeError(attribute)
        raise ModuleNotFoundError(f"{name} is not installed here, and {name}.{attribute} was asked for: `geofact compute` "
                                  f"needs no {name}, but `geofact run` and the book do (pip install -e '.[book]')")

    module.__getattr__ = missing
    return module


def _module(name: str, **attributes: Any) -> types.ModuleType:
    module = types.ModuleType(name, f"stand-in for {name}, which is not installed here (geofact.pipeline.standins)")
    module.__dict__.update(attributes)
    return module


STAND_INS = {
    "myst_nb": lambda: {"myst_nb": _module("myst_nb", glue=glue_nothing)},
    "jupytext": lambda: {"jupytext": _absent("jupytext")},
    "nbformat": lambda: {"nbformat": _absent("nbformat")},
}


def _installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a finder that refuses the name, or a half-imported module
        return False


def is_stand_in(module: types.ModuleType) -> bool:
    return (module.__doc__ or "").startswith("stand-in for ")


def install() -> list[str]:
    """Install a stand-in for each toolchain package that is not installed; the names of those installed."""
    installed = []
    for name, build in STAND_INS.items():
        if name in sys.modules or _installed(name):
            continue
        sys.modules.update(build())
        installed.append(name)
    return installed
