"""What a cached analysis depends on, as one hash (geofact.analysis.trajectory.analyse_state keys its records by it).

An analysis of a trained state is cached under its name, its parameters and `analysis_code_hash`: the code it runs
(the modules of geofact.analysis it reads and what they import of it and of the model, task and precision modules,
without their prose: `analysis_modules`) and the function itself with the helpers and constants it reads where it
is defined (a notebook's). The hash is the same on every
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
from typing import Any, Callable, Iterator

import geofact


def _walk(fn: Callable, seen: set[int]) -> Iterator[tuple[Callable | None, str | None, Any]]:
    """What a cached result of `fn` depends on, in order: (fn, None, None) on entering a function, then
    (None, name, value) for each global it reads (sorted), a function of its own module that it calls walked in turn
    right after its name."""
    if id(fn) in seen:
        return
    seen.add(id(fn))
    yield fn, None, None
    scope = getattr(fn, "__globals__", {})
    for name in sorted(_names_read(fn)):
        value = scope.get(name)
        yield None, name, value
        if inspect.isfunction(value) and value.__module__ == fn.__module__:
            yield from _walk(value, seen)


def _code_and_globals(fn: Callable) -> list[str]:
    """The source of `fn` and, recursively, of the functions of its own module it calls by name, with the
    values of the plain globals they read (a notebook's constants)."""
    parts = []
    for function, name, value in _walk(fn, set()):
        if function is not None:
            try:
                parts.append(inspect.getsource(function))
            except (OSError, TypeError):  # no source to read (a builtin, a lambda typed at a prompt): the name stands in
                parts.append(getattr(function, "__qualname__", repr(function)))
        elif isinstance(value, (bool, int, float, str, tuple, list, dict)):
            parts.append(f"{name} = {value!r}")
    return parts


def _names_read(fn: Callable) -> set[str]:
    """The global names read by the function and by the functions and comprehensions nested in it."""
    code, names = getattr(fn, "__code__", None), set()
    stack = [code] if code is not None else []
    while stack:
        c = stack.pop()
        names.update(i.argval for i in dis.get_instructions(c) if i.opname in ("LOAD_GLOBAL", "LOAD_NAME"))
        stack += [k for k in c.co_consts if inspect.iscode(k)]
    return names


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


# besides geofact/analysis/, the package's modules an analysis may evaluate: the model it runs (hidden states, the
# MLP block and unembedding of TrainedModel), the task whose bijections it reads and the matmul precision it computes
# in (relative to geofact/)
ANALYSED_SOURCES = ("training/model.py", "task.py", "precision.py")
# what every analysis reads, whatever it names: the trained model it is handed
EVERY_ANALYSIS_READS = ("analysis/trained.py",)


def _analysed(package: Path) -> list[str]:
    """The modules whose code keys analyses (relative to the package): geofact/analysis and ANALYSED_SOURCES."""
    return sorted({*(str(p.relative_to(package)) for p in (package / "analysis").glob("*.py")), *ANALYSED_SOURCES})


@functools.lru_cache(maxsize=256)
def _imported(source: str) -> tuple[str, ...]:
    """The geofact modules a module's source imports, as the paths relative to the package they may have (a name
    imported from a package may be a module: both are given)."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return tuple(sorted(path for name in names for path in _module_paths(name)))


def _module_paths(module: str) -> tuple[str, ...]:
    """geofact.analysis.readout -> analysis/readout.py, or analysis/readout/__init__.py were it a package; none
    outside geofact."""
    parts = module.split(".")
    if parts[0] != "geofact" or len(parts) < 2:
        return ()
    path = "/".join(parts[1:])
    return f"{path}.py", f"{path}/__init__.py"


def analysis_modules(analyse: Callable, package: Path | None = None) -> list[str]:
    """The modules of the package (relative paths) whose code an analysis's value depends on: those of the geofact
    objects it (and the helpers of its module it calls) reads by name, EVERY_ANALYSIS_READS, and what they import
    in turn, within geofact/analysis and ANALYSED_SOURCES. A change to another module (how verdicts are judged, how
    states are cached, another analysis) leaves its records read: until 2026-11-30 any change to geofact/analysis
    computed every analysis again, which at the paper's scale needs the weights only a GPU lease has."""
    package = Path(geofact.__file__).parent if package is None else Path(package)
    universe = set(_analysed(package))
    seen, stack = set(), [*EVERY_ANALYSIS_READS, *(p for m in _modules_read(analyse) for p in _module_paths(m))]
    while stack:
        path = stack.pop()
        if path in seen or path not in universe or not (package / path).is_file():
            continue
        seen.add(path)
        stack += _imported((package / path).read_text())
    return sorted(seen)


def _modules_read(fn: Callable) -> set[str]:
    """The modules of the objects `fn` and the functions of its module it calls read by name (module objects
    themselves too)."""
    modules = set()
    for function, _, value in _walk(fn, set()):
        name = value.__name__ if inspect.ismodule(value) else getattr(value, "__module__", None)
        if function is None and isinstance(name, str):
            modules.add(name)
    return modules


def module_hashes(package: Path) -> dict[str, str]:
    """sha256 of each module that keys analyses (`_analysed`), without its prose: `geofact pack` records them, and
    `unpack` names those in which an archive's differ from the checkout's."""
    package = Path(package)
    return {path: hashlib.sha256(code_without_prose((package / path).read_text()).encode()).hexdigest()
            for path in _analysed(package) if (package / path).is_file()}


def analysis_code_hash(analyse: Callable, modules: list[str] | None = None) -> str:
    """sha256 of the code an analysis runs: the modules `analysis_modules` finds (`modules`, where the caller has
    them already), the function's own source and that of the functions of its module it calls, and the plain values
    they read there (the package's modules without their prose: `code_without_prose`, kept by their text, so that a
    grid's thousands of states do not parse the package each)."""
    package = Path(geofact.__file__).parent
    h = hashlib.sha256()
    for path in analysis_modules(analyse, package) if modules is None else modules:
        h.update(path.encode() + code_without_prose((package / path).read_text()).encode())
    for part in _code_and_globals(analyse):
        h.update(part.encode())
    return h.hexdigest()
