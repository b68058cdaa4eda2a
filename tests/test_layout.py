"""The package's import rules (README, "Import rules"), four groups, each a set of packages: the science
(everything but the three below) imports neither the page tools (geofact.pages) nor the publisher
(geofact.pipeline), and of the operations (geofact.ops) only the executor its sweeps hand groups to; the page
tools may import the science but not the publisher; the publisher never reaches a model, directly or through
another module (the operations included), and does not import the page tools. Every rule is checked for every
module of a package, and "a model" is computed from the imports, not listed."""

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "geofact"
NOT_SCIENCE = ("geofact.pages", "geofact.pipeline", "geofact.ops")
SWEEP_EXECUTOR = "geofact.ops.cluster"  # the one operations module the science imports


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}


def imports(name: str) -> set[str]:
    """The geofact modules `name` imports anywhere in its body (function-level imports included)."""
    found = set()
    for node in ast.walk(ast.parse(MODULES[name].read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("geofact"):
            found |= {f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in MODULES else node.module for a in node.names}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("geofact")}
    return {m for m in found if m != "geofact"}


def closure(name: str) -> set[str]:
    """Every geofact module importing `name` brings in (its packages' __init__ included)."""
    seen, todo = set(), [name]
    while todo:
        current = todo.pop()
        for m in imports(current):
            parents = [".".join(m.split(".")[:i]) for i in range(2, m.count(".") + 1)]
            for dep in [m, *parents]:
                if dep in MODULES and dep not in seen:
                    seen.add(dep)
                    todo.append(dep)
    return seen


def is_under(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def science() -> list[str]:
    return [name for name in MODULES if not any(is_under(name, p) for p in NOT_SCIENCE)]


def defines_a_network(name: str) -> bool:
    """A module that defines a network (an nn.Module, a class with a `forward` or `logits`, or the stacked
    model's parameters: `init_params`) or loads one (transformers)."""
    tree = ast.parse(MODULES[name].read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and (any(ast.unparse(b).endswith("Module") for b in node.bases) or any(
                isinstance(f, ast.FunctionDef) and f.name in ("forward", "logits") for f in node.body)):
            return True
        if isinstance(node, ast.FunctionDef) and node.name == "init_params":
            return True
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            if any(n.split(".")[0] == "transformers" for n in names):
                return True
    return False


NETWORKS = {name for name in MODULES if defines_a_network(name)}
# Modules that build or train networks, what the book toolchain must never pull in: those that define one
# and every module that reaches one of them (the constructions, the trainers, the analyses, the LMs, ...).
MODELS = tuple(sorted(name for name in MODULES if name in NETWORKS or closure(name) & NETWORKS))


def test_nothing_outside_the_pipeline_imports_it_but_the_operations():
    offenders = {name: sorted(m for m in imports(name) if is_under(m, "geofact.pipeline"))
                 for name in MODULES if not any(is_under(name, p) for p in ("geofact.pipeline", "geofact.ops"))}
    assert {name: ms for name, ms in offenders.items() if ms} == {}


def test_the_science_never_imports_the_page_tools():
    offenders = {name: sorted(m for m in imports(name) if is_under(m, "geofact.pages"))
                 for name in MODULES if not is_under(name, "geofact.pages")}
    assert {name: ms for name, ms in offenders.items() if ms} == {}  # the publisher included


def test_the_page_tools_reach_the_science_and_not_the_publisher():
    pages = [name for name in MODULES if is_under(name, "geofact.pages")]
    assert len(pages) >= 9
    reached = {name: sorted(m for m in closure(name) if is_under(m, "geofact.pipeline")) for name in pages}
    assert {name: ms for name, ms in reached.items() if ms} == {}
    assert "geofact.training.grid" in imports("geofact.pages.curves")  # the science is theirs to use


def test_the_science_imports_of_the_operations_only_the_sweep_executor():
    offenders = {name: sorted(m for m in imports(name) if is_under(m, "geofact.ops") and m != SWEEP_EXECUTOR)
                 for name in science()}
    assert {name: ms for name, ms in offenders.items() if ms} == {}
    assert imports(SWEEP_EXECUTOR) <= {"geofact.settings"}  # and that one reaches nothing of the science


def test_models_are_found_from_the_imports():
    assert {"geofact.transformer", "geofact.training.model", "geofact.nl.lm"} <= NETWORKS
    assert {"geofact.training.trainer", "geofact.training.sweep", "geofact.analysis.readout", "geofact.nl.lm",
            "geofact.constructions.disjoint", "geofact.ops.costs", "geofact.ops.calibration", "geofact.ops.benchmark"} <= set(MODELS)
    assert not {"geofact.training.config", "geofact.precision", "geofact.evidence", "geofact.ops.pack"} & set(MODELS)


def test_the_pipeline_never_reaches_a_model():
    pipeline = [name for name in MODULES if is_under(name, "geofact.pipeline")]
    assert len(pipeline) >= 16
    reached = {name: sorted(m for m in closure(name) if any(is_under(m, model) for model in MODELS)) for name in pipeline}
    assert {name: ms for name, ms in reached.items() if ms} == {}


def test_the_rules_see_real_imports():
    # the checker itself: a science module's imports are found, function-level ones included
    assert "geofact.training.sweep" in imports("geofact.analysis.trajectory")
    assert "geofact.pipeline.verdicts" in imports("geofact.pipeline.cli")  # imported inside a function
    assert any(is_under(m, "geofact.training.model") for m in closure("geofact.analysis.trajectory"))


def test_no_module_imports_itself_back():
    """No import cycle among geofact's modules, function-level imports included (a cycle hidden inside a
    function is still one)."""
    graph = {name: {m for m in imports(name) if m in MODULES and m != name} for name in MODULES}
    cycles, state = [], {}

    def visit(node, path):
        state[node] = "open"
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                cycles.append(path[path.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = "done"

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert cycles == []


SCIENCE_PACKAGES = ("geofact.training", "geofact.analysis", "geofact.constructions", "geofact.nl")


def test_the_publisher_imports_no_science_package():
    """The publisher's interface to the science is a few shared modules (geofact.settings, geofact.precision,
    geofact.outcomes, ...), never a module of the science's packages, directly or through another."""
    pipeline = [name for name in MODULES if is_under(name, "geofact.pipeline")]
    reached = {name: sorted(m for m in closure(name) if any(is_under(m, p) for p in SCIENCE_PACKAGES)) for name in pipeline}
    assert {name: ms for name, ms in reached.items() if ms} == {}


def test_the_publisher_never_loads_torch():
    """Every module of the publisher imported at once, in a fresh interpreter: torch stays out (what only
    torch can say, the publisher asks of a child interpreter: geofact.pipeline.machine.torch_facts)."""
    pipeline = sorted(name for name in MODULES if is_under(name, "geofact.pipeline"))
    probe = ("import importlib, sys\n"
             f"for name in {pipeline!r}:\n    importlib.import_module(name)\n"
             "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
