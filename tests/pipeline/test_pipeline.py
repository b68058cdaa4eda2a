"""End to end: notebooks -> papermill -> pages -> checker -> strict book build, and a GPU lease rehearsed (marked slow)."""

import importlib.metadata
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from geofact.pipeline.check import check
from geofact.pipeline.ledger import GROUPS
from geofact.pipeline.ledger_view import FRAGILE_BADGE, badge, count_badge
from geofact.pipeline.project import Project
from geofact.pipeline.execute import WIDGET_MIME
from geofact.pipeline.stability import FRAGILE, STABLE, page_stability
from geofact.processes import usable_cores
from geofact.provenance import GIT_COMMIT_ENV
from tests.pipeline.book import build_book, copy_project, geofact

pytestmark = pytest.mark.slow
@pytest.fixture(scope="module")
def smoke(repo, tmp_path_factory) -> Project:
    """A copy of the repository's notebooks and book, with every notebook executed at `smoke`."""
    project = copy_project(repo.root, tmp_path_factory.mktemp("smoke"))
    shutil.rmtree(project.results_dir, ignore_errors=True)
    for page in project.book_dir.glob("*.ipynb"):
        page.unlink()
    done = geofact(project.root, "run", "--profile", "smoke", "--jobs", "2")  # as make book runs them
    assert done.returncode == 0, done.stderr
    return project


@pytest.fixture
def mutable(smoke, tmp_path) -> Project:
    project = copy_project(smoke.root, tmp_path / "copy")
    shutil.copytree(smoke.results_dir, project.results_dir)
    return project


def test_every_notebook_runs_at_smoke_and_states_its_provenance(smoke):
    for name in smoke.notebooks():
        nb = nbformat.read(smoke.page(name), as_version=4)
        meta = nb.metadata["geofact"]
        assert meta["profile"] == "smoke" and meta["device"] == "cpu"
        assert {"git_commit", "environment", "wall_time_s", "parameters", "modules", "notebook_sha256"} <= set(meta)
        assert any("Provenance" in c.source for c in nb.cells if c.cell_type == "markdown")
        hidden = [c for c in nb.cells if {"parameters", "injected-parameters"} & set(c.metadata.get("tags", []))]
        assert len(hidden) == 2 and all("remove-cell" in c.metadata["tags"] for c in hidden)
        assert not [o for c in nb.cells for o in c.get("outputs", []) if WIDGET_MIME in o.get("data", {})]  # no progress widget
        assert "widgets" not in nb.metadata  # its saved state would pull the widget manager from a CDN
        shown = [c for c in nb.cells if c.cell_type == "code" and "remove-cell" not in c.metadata["tags"]]
        folded = [c for c in shown if "hide-input" in c.metadata["tags"]]
        assert len(folded) == len(shown)  # a theory page's construction is open as its show_source cells' output
        if name in ("thm-disjoint-attributes", "thm-shared-attributes", "thm-khop-cot", "thm-khop-no-cot"):  # constructions
            assert any("show_source(" in c.source and c.outputs for c in folded)
        results = json.loads(smoke.results("smoke", name).read_text())
        assert results["claims"] and results["provenance"]["parameters"] == meta["parameters"]
        closing = nb.cells[-1].source  # the verdicts, each under the anchor the status page links to
        assert closing.startswith(f"(verdicts-{name})=")
        for claim_id, entry in results["claims"].items():
            assert f"(verdict-{claim_id})=\n**`{claim_id}`**" in closing and badge(entry["verdict"]) in closing
    # the one claim smoke cannot test: the paper's category means need the paper's models
    not_run = {(name, claim_id): c["note"] for name in smoke.notebooks()
               for claim_id, c in json.loads(smoke.results("smoke", name).read_text())["claims"].items() if c["verdict"] == "not run"}
    assert list(not_run) == [("exp-real-lm-probing", "exp-real-lm-category-mrr")]
    assert "none of the paper's five models loaded" in next(iter(not_run.values()))
    status = smoke.status_page.read_text()
    row = next(line for line in status.splitlines() if line.startswith(f"| {GROUPS[2]} ("))
    assert count_badge("not run", 1) in row  # the counts table: one experiment claim not run
    assert "{ref}`thm-khop-cot <verdict-thm-khop-cot>`" in status
    assert "Tested on {ref}`thm-khop-cot <verdict-thm-khop-cot>`" in smoke.claims_page.read_text()


def test_corpus_lm_verdicts_an_under_trained_lm_cannot_give_are_not_in_regime(smoke):
    # at smoke the corpus LMs train 2 epochs (38 steps, the paper ~3,600) and memorise nothing
    claims = json.loads(smoke.results("smoke", "exp-nl-lm").read_text())["claims"]
    memorizes = claims["exp-nl-lm-memorizes"]
    assert memorizes["verdict"] == "not in regime"
    assert "fewer than the paper's ~3,600" in memorizes["note"] and "the rule alone gives 'does not hold'" in memorizes["note"]
    for claim in ("exp-nl-lm-layer0-readout", "exp-nl-lm-per-category", "exp-nl-lm-entity-tokens"):
        assert claims[claim]["verdict"] == "not in regime" and "does not memorise its corpus" in claims[claim]["note"], claim
    assert claims["exp-nl-lm-size"]["verdict"] == "holds"  # a count, no training


def test_check_passes_on_a_fresh_run(smoke):
    assert check(smoke) == []


def test_a_rounding_run_tests_the_verdicts_and_a_planted_flip_is_marked_fragile(mutable):
    # issue 45 item 4: the same page at two roundings (the book's run and MKL's compatible kernels); whatever the
    # perturbation moved at smoke, the comparison runs on every claim, and a verdict flipped by hand is caught
    page = "exp-capacity"
    before = nbformat.read(mutable.page(page), as_version=4)
    done = geofact(mutable.root, "run", page, "--profile", "smoke", "--rounding", "mkl-compatible")
    assert done.returncode == 0, done.stderr
    after = nbformat.read(mutable.page(page), as_version=4)  # the book's page is not the perturbed run's ...
    assert after.metadata["geofact"] == before.metadata["geofact"] and after.cells[:-1] == before.cells[:-1]
    perturbed = mutable.results_dir / "rounding" / "smoke" / "mkl-compatible" / f"{page}.json"
    data = json.loads(perturbed.read_text())
    prov = data["provenance"]
    assert prov["rounding"] == {"perturbation": "mkl-compatible", "environ": {"MKL_CBWR": "COMPATIBLE"}}
    assert prov["machine"]["kernel_env"] == {"MKL_CBWR": "COMPATIBLE"} and prov["machine"]["cpu"]
    assert Path(prov["parameters"]["cache_dir"]).is_relative_to(mutable.root / ".geofact" / "rounding")
    compared = page_stability(mutable, "smoke", page)
    assert compared and all(s.state in (STABLE, FRAGILE) for s in compared.values())
    assert check(mutable) == []  # `geofact run` refreshed the status page and the book page's closing section
    closing = nbformat.read(mutable.page(page), as_version=4).cells[-1].source
    assert "*Rounding:*" in closing and closing.count("*Rounding:*") == len(compared)

    claim = next(c for c, s in compared.items() if s.state == STABLE)
    data["claims"][claim]["verdict"] = "holds" if data["claims"][claim]["verdict"] != "holds" else "does not hold"
    perturbed.write_text(json.dumps(data))
    assert page_stability(mutable, "smoke", page)[claim].state == FRAGILE
    problems = check(mutable)
    assert any(f"book/{page}.ipynb: its verdicts section is out of date" in p for p in problems)
    assert any("reproduction-status.md: out of date" in p for p in problems)
    done = geofact(mutable.root, "status")
    assert done.returncode == 0 and check(mutable) == []
    closing = nbformat.read(mutable.page(page), as_version=4).cells[-1].source
    assert f"**`{claim}`**" in closing and "**fragile**: " + data["claims"][claim]["verdict"] in closing
    assert f"{FRAGILE_BADGE} (under rounding: {data['claims'][claim]['verdict']})" in mutable.status_page.read_text()
    old_layout = perturbed.parent.parent / perturbed.name  # before each perturbation had a folder of its own
    perturbed.rename(old_layout)
    assert f"results/rounding/smoke/{page}.json: perturbed results go under results/rounding/<profile>/<perturbation>/ " \
           f"(git mv it to results/rounding/smoke/mkl-compatible/{page}.json)" in check(mutable)


def test_check_catches_a_planted_error_output(mutable):
    name = mutable.notebooks()[0]
    nb = nbformat.read(mutable.page(name), as_version=4)
    code = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code" and "remove-cell" not in c.metadata.get("tags", []))
    nb.cells[code].outputs.append(nbformat.v4.new_output("error", ename="ValueError", evalue="planted", traceback=[]))
    nbformat.write(nb, mutable.page(name))
    assert any(f"cell {code} holds an error output" in p for p in check(mutable))


def test_check_catches_a_changed_notebook(mutable):
    name = mutable.notebooks()[0]
    src = mutable.source(name)
    src.write_text(src.read_text() + "\n# %%\nprint('new cell')\n")
    assert any("stale" in p and f"notebooks/{name}.py changed" in p for p in check(mutable))


def test_check_catches_changed_profile_parameters(mutable):
    path = mutable.profiles_dir / "smoke.yaml"
    path.write_text(path.read_text().replace("seed: 0", "seed: 1"))
    assert any("now gives parameters" in p for p in check(mutable))


def test_check_catches_a_changed_library_module(mutable):
    name = mutable.notebooks()[0]
    nb = nbformat.read(mutable.page(name), as_version=4)
    module = sorted(nb.metadata["geofact"]["modules"])[-1]
    nb.metadata["geofact"]["modules"][module] = "0" * 64  # as if the module had changed since the run
    nbformat.write(nb, mutable.page(name))
    assert any("library modules changed" in p and module in p for p in check(mutable))


def test_check_catches_a_stale_status_page(mutable):
    mutable.status_page.write_text(mutable.status_page.read_text() + "\nhand edit\n")
    assert any("out of date" in p for p in check(mutable))


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_failing_notebook_fails_the_run_naming_notebook_and_cell(mutable, jobs):
    (mutable.notebooks_dir / "broken.py").write_text(
        "# %% [markdown]\n# # Broken\n\n# %% tags=['parameters']\nseed = 0\n\n# %%\nx = 1\n\n# %%\nraise ValueError('boom')\n"
    )
    status = mutable.status_page.read_text()
    done = geofact(mutable.root, "run", "broken", "thm-khop-cot", "--profile", "smoke", "--jobs", jobs)
    assert done.returncode == 1
    assert "'broken' failed in cell" in done.stderr and "ValueError: boom" in done.stderr
    assert not mutable.page("broken").exists() and mutable.status_page.read_text() == status


def test_a_worker_killed_mid_page_fails_the_run_clearly_and_the_same_command_then_resumes(mutable):
    """SIGKILL of a `run --jobs 2` worker (out of memory, a kill from the terminal: nothing of it cleans up)
    while its page executes: the run fails in time with a message that says what to do, not a hang; run
    again, the page executes. The page's kernel kills the worker that drives it (its parent) the first time only."""
    marker = mutable.root / "killed-once"
    (mutable.notebooks_dir / "killer.py").write_text(
        "# %% [markdown]\n# # Killer\n\n# %% tags=['parameters']\nseed = 0\ncache_dir = None\n\n# %%\n"
        "import os, pathlib, signal\n\nfrom geofact.pages.page import Page\n\n"
        f"marker = pathlib.Path({str(marker)!r})\n"
        "if not marker.exists():\n"
        "    marker.touch()\n"
        "    os.kill(os.getppid(), signal.SIGKILL)\n"
        "Page('killer', cache_dir).report.save()\n"
    )
    args = ("run", "killer", "thm-khop-cot", "--profile", "smoke", "--jobs", "2")
    started = time.monotonic()
    done = geofact(mutable.root, *args)
    assert marker.exists() and time.monotonic() - started < 300
    assert done.returncode == 1, done.stderr[-2000:]
    assert "a worker process of `geofact run` died" in done.stderr and "run the same command again" in done.stderr
    assert not mutable.page("killer").exists()
    done = geofact(mutable.root, *args)
    assert done.returncode == 0, done.stderr[-2000:]
    assert mutable.page("killer").exists()


def test_a_page_whose_models_all_fail_to_load_runs_names_them_and_reports_no_verdict(mutable):
    """exp-real-lm-probing on a machine where no LM loads: the page executes (a multi-page run goes on),
    names each model with why it did not load, and its claims are "not run" (with why) instead of holding vacuously."""
    path = mutable.profiles_dir / "smoke.yaml"
    path.write_text(path.read_text().replace("models: [tiny-random]", "models: [/nowhere/missing.gguf]"))
    done = geofact(mutable.root, "run", "exp-real-lm-probing", "thm-khop-cot", "--profile", "smoke", "--jobs", "2")
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(mutable.results("smoke", "exp-real-lm-probing").read_text())
    claims = results["claims"]
    assert results["numbers"]["n_models_run"] == 0 and len(claims) == 8
    # every claim about a model is "not run"; the paper's own table is still judged against its text
    assert claims.pop("exp-real-lm-depth-table")["verdict"] == "does not hold"
    assert all(c["verdict"] == "not run" and "does not exist" in c["note"] for c in claims.values())
    page = mutable.page("exp-real-lm-probing").read_text()
    assert "No model could be loaded" in page and "/nowhere/missing.gguf" in page and "does not exist" in page
    cards = mutable.claims_page.read_text()
    assert f"- smoke: {badge('not run')} (no model could be loaded: /nowhere/missing.gguf" in cards
    assert check(mutable) == []


def test_a_time_budget_leaves_unfinished_pages_for_the_next_call_and_runs_the_rest(mutable):
    (mutable.notebooks_dir / "budgeted.py").write_text(  # a page whose training meets the deadline
        "# %% [markdown]\n# # Budgeted\n\n# %% tags=['parameters']\nseed = 0\n\n# %%\n"
        "from geofact.training.resume import BudgetSpent\nraise BudgetSpent('3 of 8 runs checkpointed')\n"
    )
    before = mutable.page("thm-khop-cot").stat().st_mtime
    done = geofact(mutable.root, "run", "budgeted", "thm-khop-cot", "--profile", "smoke", "--budget", "600")
    assert done.returncode == 3, done.stderr[-2000:]
    assert "1 page(s) executed (thm-khop-cot); unfinished: budgeted (BudgetSpent: 3 of 8 runs checkpointed)" in done.stderr
    assert "run the same command again" in done.stderr
    assert not mutable.page("budgeted").exists() and mutable.page("thm-khop-cot").stat().st_mtime > before
    done = geofact(mutable.root, "run", "thm-khop-cot", "--profile", "smoke", "--budget", "0.001", "--jobs", "2")
    assert done.returncode == 3 and "0 page(s) executed (none); unfinished: thm-khop-cot (not started" in done.stderr
    done = geofact(mutable.root, "run", "thm-khop-cot", "--profile", "smoke", "--budget", "-5")
    assert done.returncode == 1 and "budget must be a number of seconds > 0" in done.stderr


def same(a, b) -> bool:
    """Equal JSON values, floats up to summation order (records come back in another order from a cache)."""
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-12) or (math.isnan(a) and math.isnan(b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


THIS_EXECUTION = {"grid_wall_seconds", "wall_seconds"}  # the wall time of the execution itself, not of the training
TRAINING_SPEED = {"bench", "bench_min_policy_ratio", "bench_max_policy_ratio", "grid_train_seconds", "judged_again_seconds", "train_seconds"}
RECORDED_PAGES = ["exp-capacity", "exp-readout", "exp-interventions", "exp-freeze-transfer", "exp-multihop", "exp-scaling"]
NODE_HAS = ("torch", "numpy", "scipy", "scikit-learn", "matplotlib", "pyyaml", "tqdm", "pytest")  # a GPU lease's (transformers aside)
NODE_LACKS = ("papermill", "jupytext", "nbformat", "ipykernel", "IPython", "myst_nb", "ipywidgets", "submitit")
LEASE_BUDGET = 20  # seconds per compute command: smoke needs several, as the paper profile needs many 10-minute ones
# the node's commands train on the cores this test may use: on one (a `make test` worker's share of two) they
# need about twice the commands, and a page's work past the deadline takes twice as long
LEASE_SLOWER = max(1, 2 // usable_cores())
LEASE_FILES, LEASE_FILE_BYTES = 8, 16 * 2**20  # what a lease brings back


def requirement_closure(names: tuple[str, ...]) -> list[importlib.metadata.Distribution]:
    """The installed distributions `names` need, theirs included (extras and other platforms' markers left out)."""
    found: dict[str, importlib.metadata.Distribution] = {}
    todo = list(names)
    while todo:
        dist = importlib.metadata.distribution(todo.pop())
        key = canonicalize_name(dist.metadata["Name"])
        if key not in found:
            found[key] = dist
            todo += [r.name for r in map(Requirement, dist.requires or []) if not r.marker or r.marker.evaluate({"extra": ""})]
    return list(found.values())


def node_python(root: Path) -> Path:
    """A virtual environment holding what a GPU lease has and nothing else: no pip, no system site-packages,
    and in its site-packages symlinks to this interpreter's NODE_HAS and their requirements (each
    distribution's top-level entries and dist-info). Returns its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    python = root / "bin" / "python"
    site = Path(subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                               capture_output=True, text=True, check=True).stdout.strip())
    for dist in requirement_closure(NODE_HAS):
        assert dist.files is not None, f"{dist.metadata['Name']} lists no files"
        for top in {f.parts[0] for f in dist.files} - {"..", "__pycache__"}:
            if not (site / top).exists():
                (site / top).symlink_to(dist.locate_file(top))
    return python


def test_a_gpu_lease_rehearsed_computes_in_budgeted_commands_packs_in_parts_and_renders_the_smoke_results_at_home(
        smoke, repo, tmp_path):
    """Issue 33: on a bare node (its own packages only, geofact as source, no .git) the training pages compute
    in commands of a time budget, resumed until done, and `pack` within what a lease brings back; at home the
    parts unpack and the pages execute from the records alone into the same verdicts and numbers as a direct run."""
    python = node_python(tmp_path / "venv")
    home_commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo.root, capture_output=True, text=True).stdout.strip()
    node = copy_project(repo.root, tmp_path / "node")  # the working tree sent in, without .git
    shutil.copytree(repo.root / "geofact", node.root / "geofact", ignore=shutil.ignore_patterns("__pycache__"))
    env = {**os.environ, "PYTHONPATH": str(node.root), "PYTHONNOUSERSITE": "1", GIT_COMMIT_ENV: home_commit}

    def on_node(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([python, *args], cwd=node.root, env=env, capture_output=True, text=True, timeout=600)

    probe = on_node("-c", "import importlib, geofact\n"
                          f"for name in {NODE_LACKS + ('torch', 'numpy', 'yaml', 'sklearn')}:\n"
                          "    try: importlib.import_module(name); print(name)\n"
                          "    except ImportError: pass\n"
                          "print(geofact.__file__)")
    assert probe.stdout.split() == ["torch", "numpy", "yaml", "sklearn", str(node.root / "geofact" / "__init__.py")], probe.stderr
    # the lease's first command runs the CUDA tests: their conftest may import nothing the node lacks
    shutil.copytree(repo.root / "tests", node.root / "tests", ignore=shutil.ignore_patterns("__pycache__"))
    done = on_node("-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/training/test_cuda.py")
    assert done.returncode == 0 and "skipped" in done.stdout, done.stdout[-2000:] + done.stderr[-2000:]

    walls, status = [], None
    while status != 0:  # the same command again, as each lease command is, until every page is computed
        assert len(walls) < 15 * LEASE_SLOWER, f"still unfinished after {len(walls)} commands of {LEASE_BUDGET} s"
        started = time.perf_counter()
        done = on_node("-m", "geofact.pipeline.cli", "--root", str(node.root), "compute", "--profile", "smoke",
                       "--budget", str(LEASE_BUDGET))
        walls.append(time.perf_counter() - started)
        status = done.returncode
        assert status in (0, 3), done.stderr[-3000:]
        assert walls[-1] < LEASE_BUDGET + 120 * LEASE_SLOWER, walls  # a page overruns the deadline only by what follows its training
    print(f"compute commands of budget {LEASE_BUDGET} s took " + ", ".join(f"{w:.1f}" for w in walls) + " s")
    assert len(walls) >= 2
    assert all(f"] {name}: computed" in done.stdout for name in RECORDED_PAGES)  # in this command or skipped as done
    assert {p.stem for p in (node.root / ".geofact" / "computed" / "smoke").glob("*.json")} == set(RECORDED_PAGES)
    assert not (node.root / "results").exists()

    out = tmp_path / "OUT"  # everything in one pack, within a lease's limits
    done = on_node("-m", "geofact.pipeline.cli", "--root", str(node.root), "pack", str(out / "smoke.tar.gz"), "--profile", "smoke")
    assert done.returncode == 0, done.stderr[-2000:]
    sizes = [p.stat().st_size for p in out.iterdir()]
    assert 1 <= len(sizes) <= LEASE_FILES and max(sizes) <= LEASE_FILE_BYTES
    parts = tmp_path / "parts"  # a larger archive's parts, as the paper profile's would be
    done = on_node("-m", "geofact.pipeline.cli", "--root", str(node.root), "pack", str(parts / "smoke.tar.gz"),
                   "--profile", "smoke", "--part-bytes", str(sum(sizes) // 3 + 1))
    assert done.returncode == 0, done.stderr[-2000:]
    n_parts = int(re.search(r"in (\d+) parts", done.stdout)[1])  # about 3: this archive's size differs by its dates
    assert 2 <= n_parts <= LEASE_FILES and len(list(parts.iterdir())) == n_parts

    clean = copy_project(repo.root, tmp_path / "clean")  # home, as a fresh clone: no run cache, no smoke results
    done = geofact(clean.root, "unpack", str(parts / f"smoke.tar.gz.part1of{n_parts}"))  # the first part finds the others
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"made at commit {home_commit[:12]} on cpu (profile smoke)" in done.stdout
    assert not list(clean.runs_dir.rglob("*.npz")) and list(clean.runs_dir.rglob("*.json"))  # records travelled, weights did not
    done = geofact(clean.root, "run", *RECORDED_PAGES, "--profile", "smoke", "--records-only", "--jobs", "2")
    assert done.returncode == 0, done.stderr[-3000:]  # nothing trained: records-only refuses to
    for name in RECORDED_PAGES:
        there, here = (json.loads(p.results("smoke", name).read_text()) for p in (smoke, clean))
        assert here["claims"] == there["claims"], name
        assert same({k: v for k, v in here["numbers"].items() if k not in THIS_EXECUTION | TRAINING_SPEED},
                    {k: v for k, v in there["numbers"].items() if k not in THIS_EXECUTION | TRAINING_SPEED}), name
        assert here["provenance"]["records_made_on"]["git_commit"] == [home_commit], name  # not the copy's "unknown"
    assert "cached records made on" in clean.page("exp-readout").read_text()
    done = geofact(clean.root, "run", "exp-nl-lm", "--profile", "smoke", "--records-only")
    assert done.returncode == 3 and "unfinished: exp-nl-lm (RecordMissing: the corpus LM" in done.stderr

    damaged = tmp_path / "damaged.tar.gz"
    damaged.write_bytes(next(out.iterdir()).read_bytes()[:-200])
    done = geofact(clean.root, "unpack", str(damaged))
    assert done.returncode == 1 and "geofact unpack: error" in done.stderr
    record = next(p for p in clean.runs_dir.glob("*.json"))
    record.write_text(record.read_text().replace('"steps"', '"steps" ', 1))
    done = geofact(clean.root, "unpack", *map(str, sorted(parts.iterdir())))  # every part given
    assert done.returncode == 1 and "differ from those in place" in done.stderr and "--force" in done.stderr

    # a lease's one command, tools/lease.sh, at smoke on the CPU: the CUDA tests (skipped here), compute, pack
    shutil.copytree(repo.root / "tools", node.root / "tools")
    lease_out = tmp_path / "OUT-lease"
    lease_out.mkdir()
    done = subprocess.run(["bash", "tools/lease.sh", "300", "exp-capacity"], cwd=node.root, capture_output=True, text=True,
                          env={**env, "PROFILE": "smoke", "DEVICE": "cpu", "PYTHON": str(python), "OUT": str(lease_out)}, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "skipped" in (lease_out / "tests.log").read_text() and "] exp-capacity: computed" in (lease_out / "compute.log").read_text()
    assert (lease_out / "smoke.tar.gz").stat().st_size > 0 and "done, compute status 0" in done.stdout
    done = subprocess.run(["bash", "tools/lease.sh", "300", "exp-capacity"], cwd=node.root, capture_output=True, text=True,
                          env={**env, "PROFILE": "smoke", "DEVICE": "cpu", "PYTHON": str(python), "OUT": str(lease_out)}, timeout=600)
    assert done.returncode == 0 and "CUDA tests: passed on this machine earlier" in done.stdout, done.stdout[-3000:]
    # a machine whose CUDA tests fail with geofact's Triton kernels (a kernel that does not compile there) and pass
    # without them: the lease goes on without them, for this command and every later one on the machine
    (node.root / ".geofact" / "cuda-tests-passed").unlink()
    failing = tmp_path / "python-without-kernels"
    failing.write_text(f'#!/bin/bash\nif [ "$1 $2" = "-m pytest" ] && [ "${{GEOFACT_FUSED_CE:-1}}" != 0 ]; then '
                       f'echo "1 failed: a kernel did not compile"; exit 1; fi\nexec {python} "$@"\n')
    failing.chmod(0o755)
    for expected in ("again with GEOFACT_FUSED_CE=0", "passed on this machine earlier (GEOFACT_FUSED_CE=0)"):
        done = subprocess.run(["bash", "tools/lease.sh", "50", "exp-capacity"], cwd=node.root, capture_output=True, text=True,
                              env={**env, "PROFILE": "smoke", "DEVICE": "cpu", "PYTHON": str(failing), "OUT": str(lease_out)},
                              timeout=600)
        assert done.returncode == 3 and expected in done.stdout, done.stdout[-3000:]  # 3: no time left for compute
    assert "a kernel did not compile" in (lease_out / "tests-fused.log").read_text()


GRID_PAGES = ["exp-capacity", "exp-readout", "exp-interventions", "exp-freeze-transfer"]


def test_leases_shorter_than_the_grid_compute_the_mechanism_pages_cell_by_cell_from_records_alone(smoke, repo, tmp_path):
    """The mechanism pages read every grid run's weights, which never leave a lease, while the paper's grid
    trains for longer than a lease lasts: each lease, a bare machine given the last lease's records, trains
    and analyses some d of the grid (`compute --grid-d`); a d done again retrains its runs, whose weights
    went with their lease. At home the pages on the whole grid execute from the records alone into what
    a direct run gives."""
    python = node_python(tmp_path / "venv")
    home_commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo.root, capture_output=True, text=True).stdout.strip()
    node = copy_project(repo.root, tmp_path / "node")
    shutil.copytree(repo.root / "geofact", node.root / "geofact", ignore=shutil.ignore_patterns("__pycache__"))
    env = {**os.environ, "PYTHONPATH": str(node.root), "PYTHONNOUSERSITE": "1", GIT_COMMIT_ENV: home_commit}
    archive = None

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([python, "-m", "geofact.pipeline.cli", "--root", str(node.root), *args], cwd=node.root, env=env,
                              capture_output=True, text=True, timeout=900)

    def lease(*args: str) -> subprocess.CompletedProcess:
        nonlocal archive
        shutil.rmtree(node.root / ".geofact", ignore_errors=True)  # a bare machine: weights and markers gone
        if archive is not None:
            assert cli("unpack", "--force", str(archive)).returncode == 0
        done = cli("compute", "--profile", "smoke", *args)
        archive = tmp_path / f"lease{len(list(tmp_path.glob('lease*.tar.gz')))}.tar.gz"
        assert cli("pack", str(archive), "--profile", "smoke").returncode == 0
        return done

    grid = json.loads((smoke.results_dir / "smoke" / "exp-capacity.json").read_text())["numbers"]["grid"]
    assert len(grid["d_values"]) >= 2
    for d in [*grid["d_values"], grid["d_values"][0]]:
        done = lease("--grid-d", str(d))
        assert done.returncode == 0, done.stderr[-3000:]
        assert done.stdout.count(f'computed on the grid\'s cells {{"d": [{d}]}} alone') == 3, done.stdout[-2000:]
    done = lease("exp-capacity")  # its grid cached cell by cell: it trains only its own other runs
    assert done.returncode == 0, done.stderr[-3000:]
    assert cli("compute", "--profile", "smoke", "--grid-d", "999").returncode == 1

    clean = copy_project(repo.root, tmp_path / "clean")
    assert geofact(clean.root, "unpack", str(archive)).returncode == 0
    done = geofact(clean.root, "run", *GRID_PAGES, "--profile", "smoke", "--records-only", "--jobs", "2")
    assert done.returncode == 0, done.stderr[-3000:]  # nothing trained, no weights read
    for name in GRID_PAGES:
        there, here = (json.loads(p.results("smoke", name).read_text()) for p in (smoke, clean))
        assert here["claims"] == there["claims"], name
        assert same({k: v for k, v in here["numbers"].items() if k not in THIS_EXECUTION | TRAINING_SPEED},
                    {k: v for k, v in there["numbers"].items() if k not in THIS_EXECUTION | TRAINING_SPEED}), name


def test_unknown_profile_and_notebook_are_clear_errors(mutable):
    done = geofact(mutable.root, "run", "--profile", "huge")
    assert done.returncode == 1 and "profile must be one of" in done.stderr
    done = geofact(mutable.root, "run", "no-such-notebook")
    assert done.returncode == 1 and "notebook must be one of" in done.stderr


def test_smoke_book_builds_in_strict_mode(smoke):
    done = build_book(smoke.root)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    html = smoke.book_dir / "_build" / "html"
    assert (html / "reproduction-status.html").exists()
    # the math typesets offline: every page loads MathJax from the book's own files, none from a CDN
    assert (html / "_static" / "mathjax" / "tex-chtml.js").exists()
    assert (html / "_static" / "mathjax" / "output" / "chtml" / "fonts" / "woff-v2").is_dir()
    for page in html.glob("*.html"):
        scripts = re.findall(r'<script[^>]*src="([^"]*mathjax[^"]*)"', page.read_text(), flags=re.I)
        assert all(not src.startswith(("http:", "https:", "//")) for src in scripts), (page.name, scripts)


def test_a_lease_refuses_a_commit_that_is_not_the_trees_head(repo, tmp_path):
    # a mistyped GEOFACT_GIT_COMMIT labelled every record of a lease (2026-11-26): it must stop before any work
    node = tmp_path / "node"
    (node / "tools").mkdir(parents=True)
    shutil.copy(repo.root / "tools" / "lease.sh", node / "tools")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    for args in (["init", "-q"], ["add", "tools"], ["commit", "-q", "-m", "tree"]):
        subprocess.run([*git, *args], cwd=node, check=True)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=node, capture_output=True, text=True, check=True).stdout.strip()
    typo = head[:7] + ("0" if head[7] != "0" else "1") + head[8:]
    done = subprocess.run(["bash", "tools/lease.sh", "60"], cwd=node, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "GEOFACT_GIT_COMMIT": typo, "OUT": str(tmp_path)})
    assert done.returncode == 1 and f"is not this tree's HEAD, {head}" in done.stderr and not done.stdout
    # a warm machine's second command (H200 lease, 2026-11-27): the tree is sent anew, the .git is the first
    # command's; a .git older than its tree cannot check the commit, so the lease goes on and says so
    with open(node / "tools" / "lease.sh", "a") as script:  # a tracked file as the next commit has it
        script.write("# the next commit\n")
    done = subprocess.run(["bash", "tools/lease.sh", "60"], cwd=node, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "GEOFACT_GIT_COMMIT": typo, "OUT": str(tmp_path), "DEVICE": "cpu",
                               "PYTHON": sys.executable})
    assert "is not checked" in done.stderr and "is not this tree's HEAD" not in done.stderr
    assert "CUDA tests" in done.stdout  # past the check (the tests fail here: the node holds no tests)
