"""A jupytext percent notebook as the plain Python script it is: its cells, its parameters, and its
execution without Jupyter (`geofact compute`).

A notebook (notebooks/<name>.py) is a Python file whose cells start at `# %%` lines; the rest of such a
line may name the cell's kind (`# %% [markdown]`, whose text is commented out) and its metadata
(`# %% tags=["parameters"]`). `split_cells` reads that with a few lines of text parsing rather than
jupytext, which a bare GPU node does not have, and `declared_parameters` reads the names the
`parameters` cell assigns; `geofact run` (through papermill) and `geofact compute` both take a
profile's parameters for exactly those names (`expected_parameters`).

`geofact compute` executes a page as

    python -m geofact.pipeline.script notebooks/<name>.py '<parameters as JSON>'

which runs its code cells in turn in one fresh `__main__` namespace, with the parameters assigned in
a cell of their own right after the parameters cell, as papermill's injected cell does. Figures are
closed after each cell, as Jupyter's inline backend does. Tracebacks name the notebook's own file and
lines. A page whose training met the time budget's deadline (or, from records alone, needed work that
is not among them) ends with exit status UNFINISHED_STATUS and a last line `UNFINISHED_MARK <why>`;
any other error ends with the traceback and status 1.
"""

from __future__ import annotations

import ast
import json
import math
import re
import sys
import types
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from geofact.pipeline import standins
from geofact.pipeline.profiles import Profile, load_profile

if TYPE_CHECKING:
    from geofact.pipeline.project import Project

CELL_MARKER = re.compile(r"# %%(?P<header>(?:\s.*)?)")
CELL_KIND = re.compile(r"\[(?P<kind>markdown|md|raw)\]$")  # the kinds that are not code; after an optional title
METADATA_KEY = re.compile(r"(?:^|\s+)(?P<key>\w[\w.-]*)=")  # where each `key=value` of a cell header begins
PARAMETERS_TAG = "parameters"
INJECTED_TAG = "injected-parameters"  # papermill's name for the cell it adds
INJECTED_FILENAME = "<injected parameters>"
UNFINISHED_ERRORS = ("BudgetSpent", "RecordMissing")  # exception names that leave a page unfinished, not failed
UNFINISHED_STATUS = 3
UNFINISHED_MARK = "geofact-unfinished:"


@dataclass(frozen=True)
class Cell:
    kind: str  # "code", "markdown" or "raw"
    tags: tuple[str, ...]
    source: str
    line: int  # the line of the file (from 1) where the cell's source starts


def _value(text: str, at: int, line: int) -> tuple[Any, int]:
    """The metadata value starting at `text[at]` and where it ends: JSON, as jupytext writes it, or a Python
    literal (`tags=['parameters']`) running to a space or the end of the line."""
    try:
        return json.JSONDecoder().raw_decode(text, at)
    except ValueError:
        pass
    for end in [*(m.start() for m in re.finditer(r"\s", text[at:])), len(text) - at]:
        try:
            with warnings.catch_warnings():  # a caption's TeX (`\,`) is an invalid escape to Python, as jupytext reads it too
                warnings.simplefilter("ignore")
                return ast.literal_eval(text[at:at + end]), at + end
        except (ValueError, SyntaxError):
            continue
    raise ValueError(f"line {line}: cell metadata must be key=value with JSON values, got {text[at:]!r}")


def _header(text: str, line: int) -> tuple[str, tuple[str, ...]]:
    """(kind, tags) of a cell from the rest of its `# %%` line: `[title] [kind] key=value ...`."""
    text = text.strip()
    at = METADATA_KEY.search(text)
    named = CELL_KIND.search((text[:at.start()] if at else text).strip())
    kind = "code" if not named else "raw" if named["kind"] == "raw" else "markdown"
    metadata = {}
    while at:
        metadata[at["key"]], end = _value(text, at.end(), line)
        at = METADATA_KEY.match(text, end)
        if not at and text[end:].strip():
            raise ValueError(f"line {line}: cell metadata must be key=value with JSON values, got {text[end:]!r}")
    tags = metadata.get("tags", [])
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise ValueError(f"line {line}: tags must be a list of strings, e.g. tags=[\"parameters\"], got {tags!r}")
    return kind, tuple(tags)


def split_cells(text: str) -> list[Cell]:
    """The cells of a percent notebook, in order. Lines before the first `# %%` (jupytext's commented
    header) are a code cell only where they hold code."""
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if CELL_MARKER.fullmatch(line)]
    cells = []
    preamble = lines[:starts[0]] if starts else lines
    if any(line.strip() and not line.lstrip().startswith("#") for line in preamble):
        cells.append(Cell("code", (), "\n".join(preamble), 1))
    for at, end in zip(starts, [*starts[1:], len(lines)]):
        kind, tags = _header(CELL_MARKER.fullmatch(lines[at])["header"], at + 1)
        cells.append(Cell(kind, tags, "\n".join(lines[at + 1:end]), at + 2))
    return cells


def parameters_cell(cells: list[Cell]) -> Cell:
    """The one code cell tagged `parameters`."""
    tagged = [c for c in cells if c.kind == "code" and PARAMETERS_TAG in c.tags]
    if len(tagged) != 1:
        raise ValueError(f"needs exactly one cell tagged {PARAMETERS_TAG!r}, has {len(tagged)}")
    return tagged[0]


def declared_parameters(source: str) -> set[str]:
    """Names assigned at top level of a parameters cell's source (parsed with ast, comments and all)."""
    names = set()
    for node in ast.parse(source).body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        names |= {t.id for t in targets if isinstance(t, ast.Name)}
    return names


def parameter_defaults(source: str) -> dict[str, Any]:
    """The values a parameters cell assigns (its literals: None, numbers, strings, lists, dicts)."""
    values = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and all(isinstance(t, ast.Name) for t in node.targets):
            value = ast.literal_eval(node.value)
            values.update({t.id: value for t in node.targets})
    return values


def page_parameters(project: Project, name: str, profile: str, device: str | None,
                    precision: str | None = None) -> dict[str, Any]:
    """Every parameter notebook `name` runs with at `profile`: its parameters cell's values, with the
    profile's (and the device's and precision's) in their place."""
    defaults = parameter_defaults(parameters_cell(split_cells(project.source(name).read_text())).source)
    return {**defaults, **expected_parameters(project, name, profile, device, precision)}


SHARED_RUNS_PARAMETERS = ("capacity_grid",)  # pages declaring one read the same cached runs (geofact.training.grid)


def notebook_parameters(project: Project, name: str) -> set[str]:
    """The names notebook `name`'s parameters cell declares."""
    try:
        return declared_parameters(parameters_cell(split_cells(project.source(name).read_text())).source)
    except (ValueError, SyntaxError) as exc:
        raise ValueError(f"notebook {name!r} {exc}") from None


@dataclass(frozen=True)
class RunSettings:
    """What every page of one `geofact run` or `geofact compute` executes with, resolved once and passed
    down: the profile (its file read and checked), the device as asked and as described (a device that
    is not here is an error before any page runs), and the precision policy (None: the device's default)."""

    profile: Profile
    device: str
    device_description: str
    precision: str | None = None
    rounding: str | None = None  # a perturbation of geofact.pipeline.stability (`geofact run --rounding`), or None


    @classmethod
    def resolve(cls, project: Project, profile: str, device: str, precision: str | None = None,
                rounding: str | None = None) -> RunSettings:
        from geofact.pipeline.machine import torch_facts
        from geofact.precision import check_precision

        described = torch_facts(device)["device"]  # asked of the kernels' interpreter: the publisher never imports torch
        settings = cls(load_profile(profile, project.profiles_dir), device, described, precision, rounding)
        if precision is not None:
            check_precision(precision, device)
        return settings

    def parameters(self, project: Project, name: str) -> dict[str, Any]:
        """The parameters this profile gives notebook `name` (only those its parameters cell declares); under a
        rounding perturbation, a page with a run cache trains into the perturbation's own."""
        declared = notebook_parameters(project, name)
        params = self.profile.parameters_for(name, declared, self.device, self.precision)
        if self.rounding is not None and "cache_dir" in declared:
            from geofact.pipeline.stability import rounding_cache

            params["cache_dir"] = str(rounding_cache(project, self.rounding))
        return params


def expected_parameters(project: Project, name: str, profile: str, device: str | None,
                        precision: str | None = None) -> dict[str, Any]:
    """The parameters `profile` gives notebook `name` (only those its parameters cell declares), with the
    device and precision policy asked for (geofact.pipeline.profiles.Profile.parameters_for)."""
    return load_profile(profile, project.profiles_dir).parameters_for(name, notebook_parameters(project, name), device,
                                                                      precision)


def _literal(value: Any, name: str) -> str:
    """`value` as Python source that evaluates to it (what YAML and JSON give: None, bool, int, float,
    str, lists and dicts of them)."""
    if value is None or isinstance(value, (bool, int, str)):
        return repr(value)
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else f"float({str(value)!r})"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_literal(v, name) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_literal(k, name)}: {_literal(v, name)}" for k, v in value.items()) + "}"
    raise ValueError(f"parameter {name!r} must be None, a bool, int, float, str, list or dict, "
                     f"got {type(value).__name__} {value!r}")


def render_parameters(params: dict[str, Any]) -> str:
    """The injected cell: one assignment per parameter, as papermill writes it."""
    return "\n".join(["# Parameters", *(f"{k} = {_literal(v, k)}" for k, v in params.items())]) + "\n"


def script_cells(text: str, params: dict[str, Any]) -> list[Cell]:
    """The code cells of a notebook, with the parameters assigned in a cell right after its parameters cell."""
    cells = split_cells(text)
    after = cells.index(parameters_cell(cells)) + 1
    injected = Cell("code", (INJECTED_TAG,), render_parameters(params), 1)
    return [c for c in [*cells[:after], injected, *cells[after:]] if c.kind == "code"]


def execute(cells: list[Cell], path: Path) -> None:
    """Run `cells` in turn in a fresh module `__main__`, as a kernel's namespace is.

    The module has no file, so worker processes a page spawns (run_sweep's, one per core) do not run
    the page again on start-up, as they would re-run a script. Each cell compiles at its own lines of
    `path`, without this module's `from __future__` flags."""
    main = types.ModuleType("__main__")
    sys.modules["__main__"] = main
    for cell in cells:
        filename = INJECTED_FILENAME if INJECTED_TAG in cell.tags else str(path)
        code = compile("\n" * (cell.line - 1) + cell.source, filename, "exec", dont_inherit=True)
        exec(code, main.__dict__)
        pyplot = sys.modules.get("matplotlib.pyplot")
        if pyplot is not None:
            pyplot.close("all")


def main(argv: list[str]) -> int:
    """Execute notebook `argv[0]` with the parameters of the JSON `argv[1]` (see the module docstring)."""
    path, params = Path(argv[0]), json.loads(argv[1])
    standins.install()  # before the page imports anything: where Jupyter's packages are not, their stand-ins
    cells = script_cells(path.read_text(), params)
    try:
        execute(cells, path)
    except Exception as exc:
        if type(exc).__name__ not in UNFINISHED_ERRORS:
            raise
        print(f"{UNFINISHED_MARK} {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        return UNFINISHED_STATUS
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
