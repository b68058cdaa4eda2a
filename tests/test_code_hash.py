"""geofact.code_hash: what a cached analysis depends on, as one hash, the same on every Python."""

from pathlib import Path

import pytest

from geofact import code_hash
from geofact.code_hash import code_without_prose


def test_the_code_hash_follows_the_helpers_and_constants_an_analysis_reads():
    
    namespace = {"__name__": "page"}
    exec("SCALE = 2\ndef helper(x):\n    return x * SCALE\ndef analyse(model):\n    return {'v': helper(1)}\n", namespace)
    before = code_hash.analysis_code_hash(namespace["analyse"])
    namespace["SCALE"] = 3  # a notebook constant the helper reads
    assert code_hash.analysis_code_hash(namespace["analyse"]) != before
    namespace["SCALE"] = 2
    assert code_hash.analysis_code_hash(namespace["analyse"]) == before


def test_the_code_hash_follows_the_model_the_analyses_evaluate(monkeypatch, tmp_path):
    namespace = {"__name__": "page"}
    exec("def analyse(model):\n    return {'v': 1}\n", namespace)
    before = code_hash.analysis_code_hash(namespace["analyse"])
    copy = _package_copy(tmp_path, monkeypatch)  # the package with its head changed: the same analysis reads another model
    assert code_hash.analysis_code_hash(namespace["analyse"]) == before
    model = copy / "training" / "model.py"
    model.write_text(model.read_text().replace("return torch.bmm(final_state(p, h), p[\"E_out\"])",
                                               "return torch.bmm(final_state(p, h), p[\"E_out\"]) * 2"))
    assert code_hash.analysis_code_hash(namespace["analyse"]) != before


def _package_copy(tmp_path, monkeypatch) -> Path:
    """The modules that key analyses, copied, and geofact pointed at the copy."""
    import geofact

    package = Path(geofact.__file__).parent
    copy = tmp_path / "geofact"
    for name in code_hash.module_hashes(package):
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        (copy / name).write_text((package / name).read_text())
    monkeypatch.setattr(geofact, "__file__", str(copy / "__init__.py"))
    return copy


def test_an_analysis_is_keyed_by_the_modules_it_reads_and_theirs_alone(monkeypatch, tmp_path):
    """Until 2026-11-30 every analysis hashed all of geofact/analysis: a change to how verdicts are judged computed
    every analysis again, which at the paper's scale needs weights only a GPU lease has."""
    namespace = {"__name__": "page"}
    exec("from geofact.analysis.interventions import rank_grid\nfrom geofact.analysis import readout\n"
         "def sweep(model):\n    return {'k': rank_grid(model.d, 3)}\n"
         "def fit(model):\n    return {'w': readout.linear_readout}\n"
         "def plain(model):\n    return {'v': 1}\n", namespace)
    sweep, fit, plain = namespace["sweep"], namespace["fit"], namespace["plain"]
    # which way an analysis computes (TF32, the decisions' kernel) keys none: tuned from a lease, it keeps every record
    assert "fast_paths.py" not in code_hash.module_hashes(Path(code_hash.__file__).parent)
    model_and_task = ["analysis/__init__.py", "analysis/fused_decide.py", "analysis/rechecked.py", "analysis/trained.py",
                      "precision.py", "task.py", "training/model.py"]
    assert code_hash.analysis_modules(plain) == model_and_task
    assert code_hash.analysis_modules(fit) == sorted(["analysis/readout.py", *model_and_task])
    assert code_hash.analysis_modules(sweep) == sorted(["analysis/interventions.py", "analysis/readout.py", *model_and_task])
    copy = _package_copy(tmp_path, monkeypatch)
    before = {f: code_hash.analysis_code_hash(f) for f in (sweep, fit, plain)}

    def changed(path: str) -> set[str]:
        text = (copy / path).read_text()
        (copy / path).write_text(text + "\nSHIFT = 1\n")
        moved = {f.__name__ for f in before if code_hash.analysis_code_hash(f) != before[f]}
        (copy / path).write_text(text)
        return moved

    assert changed("analysis/judging.py") == set()  # no analysis reads the verdicts' code
    assert changed("analysis/trajectory.py") == set()  # nor the cache's
    assert changed("analysis/interventions.py") == {"sweep"}
    assert changed("analysis/readout.py") == {"sweep", "fit"}  # the sweep fits readouts too
    assert changed("training/model.py") == {"sweep", "fit", "plain"}
    assert {f: code_hash.analysis_code_hash(f) for f in before} == before


def test_attribute_names_are_not_mistaken_for_globals():
    
    namespace = {"__name__": "page", "records": {"a": 1}}  # `records` is also an attribute the analysis reads
    exec("def analyse(model):\n    return {'v': len(model.records)}\n", namespace)
    before = code_hash.analysis_code_hash(namespace["analyse"])
    namespace["records"] = {"a": 2}
    assert code_hash.analysis_code_hash(namespace["analyse"]) == before


def test_rewording_a_docstring_or_a_comment_is_not_a_change_of_code():
    plain = 'def f(x):\n    return x + 1\n'
    worded = '"""A module."""\n\n\ndef f(x):\n    """Adds one."""\n    return x + 1  # the successor\n'
    assert code_without_prose(plain) == code_without_prose(worded)
    assert code_without_prose(plain) != code_without_prose(plain.replace("+ 1", "+ 2"))
    assert "Pass" in code_without_prose('def g():\n    """Only a docstring."""\n')


def test_the_code_is_written_the_same_by_every_python(monkeypatch):
    """Analyses are keyed by their code's syntax tree. ast.dump wrote it differently on Python 3.12, whose every
    definition has `type_params=[]` (PEP 695): the GPU leases' analyses (3.12) were keyed apart from home's (3.11).
    Empty fields are left out, so a field a later Python adds, empty in code that does not use it, changes nothing."""
    import ast

    from geofact.code_hash import _without_docstrings, _written

    assert code_without_prose('def f(x):\n    "Prose."\n    return x  # prose\n') == (
        "Module(body=[FunctionDef(name='f', args=arguments(args=[arg(arg='x')]), body=[Return(value=Name(id='x', ctx=Load()))])])")
    source = (Path(__file__).resolve().parents[1] / "geofact" / "analysis" / "readout.py").read_text()
    written = code_without_prose(source)
    assert "type_params" not in written and "=[]" not in written and "=None" not in written
    if "type_params" not in ast.FunctionDef._fields:  # Python 3.11: give its definitions 3.12's field
        for kind in (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef):
            monkeypatch.setattr(kind, "_fields", (*kind._fields, "type_params"))
        tree = _without_docstrings(source)
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                node.type_params = []
        assert "type_params=[]" in ast.dump(tree) and _written(tree) == written


def _other_pythons() -> list[str]:
    """Interpreters of other minor versions on this machine (PATH, pyenv's), one a version."""
    import glob
    import os
    import shutil
    import subprocess
    import sys

    found = {}
    for candidate in [*(shutil.which(f"python3.{minor}") for minor in range(11, 15)),
                      *sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.1[1-4]*/bin/python3")))]:
        if not candidate:
            continue
        done = subprocess.run([candidate, "-c", "import sys; print(sys.version_info[:2])"], capture_output=True, text=True)
        version = done.stdout.strip()
        if done.returncode == 0 and version and version != str(sys.version_info[:2]):
            found.setdefault(version, candidate)
    return sorted(found.values())


def test_an_analysis_hashes_the_same_under_every_python_on_this_machine(tmp_path):
    """What broke the leases' analyses (Python 3.12 on the nodes, 3.11 at home), checked end to end where another
    Python is installed: geofact.code_hash needs no package beyond the standard library."""
    import subprocess
    import sys

    pythons = _other_pythons()
    if not pythons:
        pytest.skip("no Python of another minor version on this machine to compare with")
    (tmp_path / "page.py").write_text(
        "SCALE = {'a': 2.5, 'b': (1, 'é')}\n\ndef helper(x):\n    return [v * SCALE['a'] for v in x]\n\n"
        "def analyse(model):\n    '''Prose.'''\n    return {'v': helper(range(3)), 'w': f\"{SCALE['b']!r:>8}\"}\n")
    script = (f"import sys; sys.path[:0] = [{str(code_hash.__file__.rsplit('/geofact/', 1)[0])!r}, {str(tmp_path)!r}]\n"
              "from geofact.code_hash import analysis_code_hash\nimport page\nprint(analysis_code_hash(page.analyse))")
    here = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    for python in pythons:
        done = subprocess.run([python, "-I", "-c", script], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-2000:]
        assert done.stdout == here, python
