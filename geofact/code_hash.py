"""What a cached analysis depends on, as one hash (geofact.analysis.trajectory.analyse_state keys its records by it).

An analysis of a trained state is cached under its name, its parameters and `analysis_code_hash`: the code it runs
(the geofact.analysis package and the model and task modules it evaluates, without their prose) and the function
itself with the helpers and constants it reads where it is defined (a notebook's). The hash is the same on every
Python (`code_without_prose`), so that records a GPU lease makes are read at home. It lives outside
geofact.analysis, which it hashes, so that a change to how the hash is made is not a change to every analysis.
"""

from __future__ import annotations

import ast
import dis
import functools
import hashlib
import inspect
from pathlib import Path
from typing import Any, Callable

import geofact


def _code_and_globals(fn: Callable, seen: set[int]) -> list[str]:
    """The source of `fn` and, recursively, of the functions of its own module it calls by name, with the
    values of the plain globals they read (a notebook's constants): what a cached result depends on."""
    if id(fn) in seen:
        return []
    seen.add(id(fn))
    try:
        parts = [inspect.getsource(fn)]
    except (OSError, TypeError):  # no source to read (a builtin, a lambda typed at a prompt): the name stands in
        parts = [getattr(fn, "__qualname__", repr(fn))]
    code, names = getattr(fn, "__code__", None), set()
    stack = [code] if code is not None else []
    while stack:  # the globals read by the function and by the functions and comprehensions nested in it
        c = stack.pop()
        names.update(i.argval for i in dis.get_instructions(c) if i.opname in ("LOAD_GLOBAL", "LOAD_NAME"))
        stack += [k for k in c.co_consts if inspect.iscode(k)]
    scope = getattr(fn, "__globals__", {})
    for name in sorted(names):
        value = scope.get(name)
        if inspect.isfunction(value) and value.__module__ == fn.__module__:
            parts += _code_and_globals(value, seen)
        elif isinstance(value, (bool, int, float, str, tuple, list, dict)):
            parts.append(f"{name} = {value!r}")
    return parts


def _without_docstrings(source: str) -> ast.Module:
    tree = ast.parse(source)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    return tree


def _written(node: Any) -> str:
    """A syntax tree as text, each node's fields in order, the empty ones (None, []) left out."""
    if isinstance(node, ast.AST):
        return f"{type(node).__name__}(" + ", ".join(f"{name}={_written(value)}" for name, value in ast.iter_fields(node)
                                                      if value is not None and value != []) + ")"
    if isinstance(node, list):
        return "[" + ", ".join(map(_written, node)) + "]"
    return ascii(node)  # not repr: which characters it escapes follows the Python's Unicode tables


@functools.lru_cache(maxsize=256)
def code_without_prose(source: str) -> str:
    """Python source as its syntax tree without docstrings (comments the parser drops): what runs, so that
    rewording a docstring or a comment does not recompute a cached analysis. Written the same by every Python
    (`_written`: empty fields left out, as a field a later Python adds is empty in code that does not use it).
    `ast.dump`, which keyed analyses until 2026-11-30, is not: Python 3.12 writes every definition's
    `type_params=[]` (PEP 695), so the GPU leases' analyses (Python 3.12) were keyed apart from home's (3.11), and
    no page at home could have read them. Constants are written by `ascii`, whose escapes do not depend on the
    Python's Unicode tables."""
    return _written(_without_docstrings(source))


# besides geofact/analysis/, the package's modules an analysis evaluates: the model it runs (hidden states, the
# MLP block and unembedding of TrainedModel) and the task whose bijections it reads (relative to geofact/)
ANALYSED_SOURCES = ("training/model.py", "task.py")


def _hash_package(h, package: Path) -> None:
    for path in [*sorted((package / "analysis").glob("*.py")), *(package / name for name in ANALYSED_SOURCES)]:
        h.update(str(path.relative_to(package)).encode() + code_without_prose(path.read_text()).encode())


def analysis_code_hash(analyse: Callable) -> str:
    """sha256 of the code an analysis runs: the geofact.analysis package and ANALYSED_SOURCES, the function's
    own source and that of the functions of its module it calls, and the plain values they read there (the
    package's modules without their prose: `code_without_prose`, kept by their text, so that a grid's thousands of
    states do not parse the package each)."""
    h = hashlib.sha256()
    _hash_package(h, Path(geofact.__file__).parent)
    for part in _code_and_globals(analyse, set()):
        h.update(part.encode())
    return h.hexdigest()


def analysis_package_hash(package: Path) -> str | None:
    """sha256 of the analysis code of the geofact package at `package` as `analysis_code_hash` writes it (the part
    every analysis's hash shares), or None where there is none: `geofact pack` records it, and `unpack` says where
    an archive's differs from the checkout's, whose pages then read none of its analyses."""
    if not (Path(package) / "analysis").is_dir():
        return None
    h = hashlib.sha256()
    _hash_package(h, Path(package))
    return h.hexdigest()
