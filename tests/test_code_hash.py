"""geofact.code_hash: what a cached analysis depends on, as one hash, the same on every Python."""

from pathlib import Path

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
    import geofact
    
    namespace = {"__name__": "page"}
    exec("def analyse(model):\n    return {'v': 1}\n", namespace)
    before = code_hash.analysis_code_hash(namespace["analyse"])
    package = Path(geofact.__file__).parent
    copy = tmp_path / "geofact"  # the package with its head changed: the same analysis reads another model
    for name in [*(p.relative_to(package) for p in (package / "analysis").glob("*.py")), *map(Path, code_hash.ANALYSED_SOURCES)]:
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        (copy / name).write_text((package / name).read_text())
    monkeypatch.setattr(geofact, "__file__", str(copy / "__init__.py"))
    assert code_hash.analysis_code_hash(namespace["analyse"]) == before
    model = copy / "training" / "model.py"
    model.write_text(model.read_text().replace("return torch.bmm(final_state(p, h), p[\"E_out\"])",
                                               "return torch.bmm(final_state(p, h), p[\"E_out\"]) * 2"))
    assert code_hash.analysis_code_hash(namespace["analyse"]) != before


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
