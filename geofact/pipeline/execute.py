"""One page executed with papermill into the book, with its provenance (`geofact run`, step by step in
geofact.pipeline.runner's docstring): the kernel pinned to this interpreter, the probe cell that names
the modules it imported, the provenance box and metadata, the page's claims checked against the ledger
and its verdicts section appended (geofact.pipeline.verdicts)."""

from __future__ import annotations

import json
import logging
import os
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator

import nbformat
import papermill
from traitlets.config import Config

from geofact.pipeline.ledger import load_ledger
from geofact.pipeline.project import Project
from geofact.pipeline.script import UNFINISHED_ERRORS, RunSettings
from geofact.pipeline.units import page_cost
from geofact.pipeline.verdicts import NotebookError, check_claims, verdicts_markdown
from geofact.pipeline.machine import describe_machine, machine_line
from geofact.pipeline.stability import (combined, perturbation_environ, perturbed_results, rounding_page,
                                        rounding_results, trains)
from geofact.provenance import environment, git_commit, module_hashes, sha256_file

# papermill reads a parameters cell's comments as help text and warns ("Unable to parse line 8 ...") on every
# line whose comment holds an "=" ("# the frozen threshold the paper reports at R = 16"); geofact does not use
# that help, and the warnings bury the progress bars of `geofact run`.
logging.getLogger("papermill.translators").setLevel(logging.ERROR)
from geofact.settings import RESULTS_PATH_ENV

PROBE_TAG = "geofact-probe"
PROBE_SOURCE = (  # the geofact modules the kernel imported, and where the cached records it read were made
    "import json as _json, sys as _sys\n"
    "_seen = getattr(_sys.modules.get('geofact.store'), 'SEEN', {})\n"
    "print(_json.dumps({'modules': sorted(m for m in _sys.modules if m == 'geofact' or m.startswith('geofact.')),\n"
    "                   'records': {k: sorted(v) for k, v in _seen.items()}}))"
)
HIDDEN_TAGS = ("parameters", "injected-parameters")
# Every page's code starts folded (one click shows it): experiment pages lead with their results, theory
# pages with the proof, and the construction a theory page implements is printed open by its show_source
# cells (their output), beside the statement it proves (issue 48, item 5).
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
KERNEL_NAME = "geofact-runner"
PAGE_KERNELSPEC = {"name": "python3", "display_name": "Python 3", "language": "python"}  # what readers' Jupyter has


def kernel_config(folder: Path) -> Config:
    """The kernel talks to the runner over Unix sockets in `folder` (one per page), not over TCP ports:
    kernels started side by side (`--jobs`) once raced for the same free port, and sockets named in a
    shared folder (jupyter_client's default, the working directory) would race the same way."""
    return Config({"KernelManager": {"transport": "ipc", "ip": str(folder / "kernel")}})


class PageInterrupted(NotebookError):
    """A page left for later: its training met the time budget's deadline (BudgetSpent), or, executed from
    records alone, it needed work that is not among them (RecordMissing)."""


@dataclass(frozen=True)
class RunRecord:
    notebook: str
    profile: str
    wall_time_s: float
    page: Path
    results: Path


@contextmanager
def scoped_environ(values: dict[str, str]) -> Iterator[None]:
    """`values` in os.environ (what a kernel or a worker process inherits) for the block, and then the
    environment as it was."""
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _provenance_markdown(meta: dict[str, Any]) -> str:
    params = ", ".join(f"`{k}={v!r}`" for k, v in sorted(meta["parameters"].items())) or "none"
    rows = [
        ("profile", f"`{meta['profile']}`"),
        ("parameters", params),
        ("git commit", f"`{meta['git_commit']}`"),
        ("device", meta["device"]),
    ]
    if "precision" in meta["parameters"]:  # a page that trains: its matmul policy (geofact.precision)
        rows.append(("training precision", f"`{meta['parameters']['precision']}`"))
    made = meta.get("records_made_on", {})
    if made.get("device"):  # the page read cached training and analysis records: where they were computed
        rows += [("cached records made on", "; ".join(made["device"])),
                 ("cached records made at commits", ", ".join(f"`{c[:12]}`" for c in made.get("git_commit", [])))]
    if meta.get("machine"):
        rows.append(("CPU and matmul kernels", machine_line(meta["machine"])))
    if meta.get("rounding"):
        native = "the native kernels of a CPU other than the book run's"
        rows.append(("rounding perturbation", f"`{meta['rounding']['perturbation']}` ({meta['rounding']['environ'] or native})"))
    env = meta["environment"]
    where = f"rounding/{meta['profile']}/{meta['rounding']['perturbation']}/" if meta.get("rounding") else f"{meta['profile']}/"
    rows += [("torch", f"{env['torch']} (python {env['python']}, numpy {env['numpy']})"),
             ("results", f"`results/{where}{meta['notebook']}.json`")]
    return (
        ":::{admonition} Provenance\n:class: note\n\n"
        f"Executed by `geofact run --profile {meta['profile']}` on {meta['executed_at']}, "
        f"wall time {meta['wall_time_s']:.1f} s.\n\n"
        "| | |\n|---|---|\n" + "".join(f"| {k} | {v} |\n" for k, v in rows) + ":::\n"
    )


def _finish_page(nb: nbformat.NotebookNode, meta: dict[str, Any]) -> list[str]:
    """Hide parameter cells, drop the probe, note where the cached records the page read were made (in
    `meta`), insert the provenance box; returns the imported modules."""
    probe = [c for c in nb.cells if PROBE_TAG in c.metadata.get("tags", [])]
    if len(probe) != 1:
        raise NotebookError("lost its provenance probe cell")
    stdout = "".join(o.get("text", "") for o in probe[0].outputs if o.get("name") == "stdout")
    probed = json.loads(stdout.strip().splitlines()[-1])
    if probed["records"].get("device"):
        meta["records_made_on"] = probed["records"]
    nb.cells.remove(probe[0])
    # The saved widget state would make the book load require.js and the widget manager from CDNs, for
    # progress bars that are gone anyway.
    nb.metadata.pop("widgets", None)
    for cell in nb.cells:
        if cell.cell_type == "code":  # widgets are live progress bars (tqdm.auto in libraries): nothing a static page can show
            cell.outputs = [o for o in cell.outputs if WIDGET_MIME not in o.get("data", {})]
        tags = cell.metadata.setdefault("tags", [])
        if any(t in tags for t in HIDDEN_TAGS) and "remove-cell" not in tags:
            tags.append("remove-cell")
        elif cell.cell_type == "code" and "hide-input" not in tags:
            tags.append("hide-input")
    first_md = next((i for i, c in enumerate(nb.cells) if c.cell_type == "markdown"), -1)
    nb.cells.insert(first_md + 1, nbformat.v4.new_markdown_cell(_provenance_markdown(meta)))
    return probed["modules"]


def _pin_kernel(tmp: Path) -> str:
    """A kernelspec running this very interpreter, under tmp/jupyter (which the caller puts first on
    JUPYTER_PATH); returns its name.

    Provenance (torch version, modules) is read in this process, so the kernel must be the same
    interpreter; a user-wide `python3` kernelspec pointing elsewhere would otherwise win.
    """
    spec = tmp / "jupyter" / "kernels" / KERNEL_NAME
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": f"geofact ({sys.executable})",
        "language": "python",
    }))
    return KERNEL_NAME


def run_notebook(project: Project, name: str, settings: RunSettings) -> RunRecord:
    """Execute one page with papermill into book/<name>.ipynb and results/<profile>/<name>.json (see
    geofact.pipeline.runner's docstring), its claims checked against the ledger."""
    profile = settings.profile.name
    source_sha256 = sha256_file(project.source(name))  # the source executed, even if the file is edited meanwhile
    nb = project.read_notebook(name)
    params = settings.parameters(project, name)
    nb.metadata["kernelspec"] = dict(PAGE_KERNELSPEC)
    nb.metadata.setdefault("language_info", {"name": "python"})
    nb.cells.append(nbformat.v4.new_code_cell(PROBE_SOURCE, metadata={"tags": [PROBE_TAG]}))
    commit = git_commit(project.root)

    with tempfile.TemporaryDirectory() as tmp:
        source, executed, results_tmp = (Path(tmp) / f for f in ("in.ipynb", "out.ipynb", "results.json"))
        nbformat.write(nb, source)
        kernel = _pin_kernel(Path(tmp))
        jupyter_path = os.pathsep.join(filter(None, [str(Path(tmp) / "jupyter"), os.environ.get("JUPYTER_PATH")]))
        started = time.perf_counter()
        try:
            with scoped_environ({RESULTS_PATH_ENV: str(results_tmp), "JUPYTER_PATH": jupyter_path}):
                papermill.execute_notebook(
                    str(source), str(executed), parameters=params, kernel_name=kernel,
                    progress_bar=False, cwd=str(project.notebooks_dir), config=kernel_config(Path(tmp)),
                )
        except papermill.PapermillExecutionError as exc:
            failed = project.root / ".geofact" / "failed" / f"{name}.ipynb"
            failed.parent.mkdir(parents=True, exist_ok=True)
            if executed.exists():
                failed.write_bytes(executed.read_bytes())
            if exc.ename in UNFINISHED_ERRORS:
                raise PageInterrupted(f"{exc.ename}: {exc.evalue}") from None
            raise NotebookError(
                f"notebook {name!r} failed in cell {exc.cell_index} (execution count {exc.exec_count}) "
                f"at profile {profile!r}: {exc.ename}: {exc.evalue}\n  executed copy: {failed}"
            ) from None
        wall = time.perf_counter() - started
        if not results_tmp.exists():
            raise NotebookError(f"notebook {name!r} ran but never called Report.save(): no results were written")
        report = json.loads(results_tmp.read_text())
        out = nbformat.read(executed, as_version=4)

    meta: dict[str, Any] = {
        "notebook": name,
        "profile": profile,
        "parameters": params,
        "device": settings.device_description,
        "device_arg": settings.device,
        **({"precision_arg": settings.precision} if settings.precision is not None else {}),
        "git_commit": commit,
        "environment": environment(),
        "machine": describe_machine(),
        **({"rounding": {"perturbation": settings.rounding, "environ": perturbation_environ(settings.rounding)}}
           if settings.rounding is not None else {}),
        "executed_at": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "wall_time_s": round(wall, 2),
        "wall_time_max_s": round(max(wall, page_cost(project, name, profile)), 2),  # what plan_units schedules by
        "notebook_sha256": source_sha256,
    }
    modules = _finish_page(out, meta)
    out.metadata["kernelspec"] = dict(PAGE_KERNELSPEC)  # the pinned runner kernel exists only during the run
    meta["modules"] = module_hashes(modules)
    claims = [c for c in load_ledger(project.ledger_path) if c.notebook == name]  # the page's claims, in ledger order
    check_claims(name, claims, report["claims"])
    stable = None
    if settings.rounding is None and trains(meta):  # the perturbed run, where there is one, tests these verdicts
        stable = combined({**report, "provenance": meta}, perturbed_results(project, profile, name))
    out.cells.append(nbformat.v4.new_markdown_cell(verdicts_markdown(name, profile, claims, report["claims"], stable)))
    out.metadata["geofact"] = meta

    if settings.rounding is None:
        page, results = project.page(name), project.results(profile, name)
    else:  # not the book's: the perturbed run is compared with it (geofact.pipeline.stability)
        page, results = (rounding_page(project, settings.rounding, name),
                         rounding_results(project, profile, name, settings.rounding))
    page.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(out, page)
    results.parent.mkdir(parents=True, exist_ok=True)
    results.write_text(json.dumps({**report, "provenance": meta}, indent=1, sort_keys=True) + "\n")
    return RunRecord(name, profile, wall, page, results)
