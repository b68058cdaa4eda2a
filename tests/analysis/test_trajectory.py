import json
import time
from pathlib import Path

import numpy as np
import pytest

from geofact.analysis.trajectory import Point, analyse_grid, code_without_prose, final_values, train_grid, train_grids
from geofact.pages.curves import value_at_steps
from geofact.settings import DEADLINE_ENV, RECORDS_ONLY_ENV
from geofact.store import RecordMissing
from geofact.training.grid import CapacityGrid
from geofact.training.resume import BudgetSpent

GRID = CapacityGrid(N=16, R_values=[1], d_values=[8], seeds=[0], lr=1e-2, batch_size=16, max_steps=30, checkpoints=[0, 10])


def test_every_checkpoint_and_the_final_state_are_analysed(tmp_path):
    records = train_grid(GRID, tmp_path)
    seen = []
    points = analyse_grid(GRID, records, tmp_path, lambda m: seen.append(m.step) or {"norm": float(m.weights["E_out"].norm())},
                          "norm", {})
    assert sorted(seen, key=lambda s: -1 if s is None else s) == [None, None, 0, 0, 10, 10]  # learned and frozen: 2 checkpoints + final each
    pts = points["learned", 1, 8, 0]
    assert [(p.step, p.final) for p in pts] == [(0, False), (10, False), (30, True)]
    assert pts[-1].accuracy == records["learned", 1, 8, 0]["accuracy"] and pts[0].loss == records["learned", 1, 8, 0]["checkpoints"][0]["loss"]
    assert pts[0].values["norm"] != pts[-1].values["norm"]  # the weights moved between step 0 and the stop
    assert final_values(GRID, points, "norm")["learned"].shape == (1, 1, 1)


def test_grids_trained_together_stack_their_runs_of_one_shape_and_keep_each_grids_keys(tmp_path):
    ladders = [CapacityGrid(N=16, R_values=[R], d_values=[8], seeds=[0], lr=1e-2, batch_size=16, max_steps=30, checkpoints=[0, 10])
               for R in (1, 2, 3)]
    together = train_grids(ladders, tmp_path / "together")
    assert [sorted(records) for records in together] == [sorted(g.configs()) for g in ladders]
    apart = train_grid(ladders[2], tmp_path / "apart")

    def stacks(records: list[dict]) -> int:
        return len({(r["group_seconds"], r["group_size"]) for r in records})

    # one ladder alone is as many stacks as it has runs or workers; three together share theirs
    assert stacks([r for records in together for r in records.values()]) < len(ladders) * stacks(list(apart.values()))
    assert all(apart[k]["config"] == together[2][k]["config"] and apart[k]["checkpoints"][0]["step"] == 0 for k in apart)


def test_a_run_that_stopped_keeps_its_final_value():
    pts = [Point(0, 5.0, 0.1, False, {"m": 0.1}), Point(40, 1e-5, 1.0, True, {"m": 0.9})]
    assert np.allclose(value_at_steps(pts, "m", [0, 40, 100]), [0.1, 0.9, 0.9])
    assert np.isnan(value_at_steps(pts, "m", [20])[0])  # no checkpoint there and not yet stopped
    assert value_at_steps(pts, "loss", [0]).tolist() == [5.0]


def norm(model) -> dict:
    return {"norm": float(model.weights["E_out"].norm()), "rows": model.weights["E_out"].norm(dim=0)[:3].tolist()}


def test_analyses_are_cached_as_records_and_pages_can_execute_from_them_without_weights(tmp_path, monkeypatch):
    records = train_grid(GRID, tmp_path)
    first = analyse_grid(GRID, records, tmp_path, norm, "norm", {"p": 1})
    assert len(list((tmp_path / "analyses" / "norm").glob("*.json"))) == 6  # 2 runs x (2 checkpoints + final)
    for weights in tmp_path.glob("*.npz"):  # what stays on the node: only the JSON records travel
        weights.unlink()
    monkeypatch.setenv(RECORDS_ONLY_ENV, "1")
    assert train_grid(GRID, tmp_path) == records
    again = analyse_grid(GRID, records, tmp_path, norm, "norm", {"p": 1})
    assert again == first and isinstance(again["learned", 1, 8, 0][-1].values["rows"], list)
    with pytest.raises(RecordMissing, match="weights .* not among the records"):  # other parameters: computed afresh
        analyse_grid(GRID, records, tmp_path, norm, "norm", {"p": 2})
    with pytest.raises(RecordMissing, match="run .* not among the records"):
        train_grid(GRID.__class__(**{**GRID.__dict__, "seeds": [1]}), tmp_path)
    record = json.loads(next((tmp_path / "analyses" / "norm").glob("*-final-*.json")).read_text())
    assert record["params"] == {"p": 1} and record["provenance"]["device"]


def test_past_the_deadline_cached_states_still_read_and_an_uncached_one_stops_with_budget_spent(tmp_path, monkeypatch):
    # a GPU lease's analyses stop with its budget (a lease once ran its rank sweeps 50 s past it and lost
    # the command's records to the hard time limit, before they were packed)
    records = train_grid(GRID, tmp_path)
    analyse_grid(GRID, records, tmp_path, norm, "norm", {"p": 1})
    monkeypatch.setenv(DEADLINE_ENV, str(time.time() - 1))
    assert analyse_grid(GRID, records, tmp_path, norm, "norm", {"p": 1})["learned", 1, 8, 0][-1].final
    with pytest.raises(BudgetSpent, match="before the norm analysis of run .* at step 0; the states analysed so far"):
        analyse_grid(GRID, records, tmp_path, norm, "norm", {"p": 2})
    assert len(list((tmp_path / "analyses" / "norm").glob("*.json"))) == 6  # the p = 1 states alone


def test_the_code_hash_follows_the_helpers_and_constants_an_analysis_reads():
    from geofact.analysis import trajectory

    namespace = {"__name__": "page"}
    exec("SCALE = 2\ndef helper(x):\n    return x * SCALE\ndef analyse(model):\n    return {'v': helper(1)}\n", namespace)
    before = trajectory.analysis_code_hash(namespace["analyse"])
    namespace["SCALE"] = 3  # a notebook constant the helper reads
    assert trajectory.analysis_code_hash(namespace["analyse"]) != before
    namespace["SCALE"] = 2
    assert trajectory.analysis_code_hash(namespace["analyse"]) == before


def test_the_code_hash_follows_the_model_the_analyses_evaluate(monkeypatch, tmp_path):
    import geofact
    from geofact.analysis import trajectory

    namespace = {"__name__": "page"}
    exec("def analyse(model):\n    return {'v': 1}\n", namespace)
    before = trajectory.analysis_code_hash(namespace["analyse"])
    package = Path(geofact.__file__).parent
    copy = tmp_path / "geofact"  # the package with its head changed: the same analysis reads another model
    for name in [*(p.relative_to(package) for p in (package / "analysis").glob("*.py")), *map(Path, trajectory.ANALYSED_SOURCES)]:
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        (copy / name).write_text((package / name).read_text())
    monkeypatch.setattr(geofact, "__file__", str(copy / "__init__.py"))
    assert trajectory.analysis_code_hash(namespace["analyse"]) == before
    model = copy / "training" / "model.py"
    model.write_text(model.read_text().replace("return torch.bmm(final_state(p, h), p[\"E_out\"])",
                                               "return torch.bmm(final_state(p, h), p[\"E_out\"]) * 2"))
    assert trajectory.analysis_code_hash(namespace["analyse"]) != before


def test_attribute_names_are_not_mistaken_for_globals():
    from geofact.analysis import trajectory

    namespace = {"__name__": "page", "records": {"a": 1}}  # `records` is also an attribute the analysis reads
    exec("def analyse(model):\n    return {'v': len(model.records)}\n", namespace)
    before = trajectory.analysis_code_hash(namespace["analyse"])
    namespace["records"] = {"a": 2}
    assert trajectory.analysis_code_hash(namespace["analyse"]) == before


def test_rewording_a_docstring_or_a_comment_is_not_a_change_of_code():
    plain = 'def f(x):\n    return x + 1\n'
    worded = '"""A module."""\n\n\ndef f(x):\n    """Adds one."""\n    return x + 1  # the successor\n'
    assert code_without_prose(plain) == code_without_prose(worded)
    assert code_without_prose(plain) != code_without_prose(plain.replace("+ 1", "+ 2"))
    assert "Pass" in code_without_prose('def g():\n    """Only a docstring."""\n')


def test_a_reading_names_the_state_a_verdict_reads():
    from geofact.analysis.trajectory import reading_step

    stopped = {"stopped_early": True, "steps": 900,
               "past_stop": {"points": {"best": 700, "stop": 900, "last": 15000}}}
    never = {"stopped_early": False, "steps": 15000, "past_stop": {"points": {"best": 12000, "stop": None, "last": 15000}}}
    plain = {"stopped_early": True, "steps": 900}
    assert [reading_step(stopped, r) for r in ("stop", "best", "last")] == [None, 700, 15000]
    assert [reading_step(never, r) for r in ("stop", "best", "last")] == [None, 12000, None]  # its stop is its end
    assert [reading_step(plain, r) for r in ("stop", "best", "last")] == [None, False, False]  # not read past its stop
    unfinite = {"stopped_early": False, "steps": 10, "past_stop": {"points": {"best": None, "stop": None, "last": 10}}}
    assert reading_step(unfinite, "best") is False
    with pytest.raises(ValueError, match="reading must be one of"):
        reading_step(stopped, "peak")


def test_the_code_is_written_the_same_by_every_python(monkeypatch):
    """Analyses are keyed by their code's syntax tree. ast.dump wrote it differently on Python 3.12, whose every
    definition has `type_params=[]` (PEP 695): the GPU leases' analyses (3.12) were keyed apart from home's (3.11).
    Empty fields are left out, so a field a later Python adds, empty in code that does not use it, changes nothing."""
    import ast

    from geofact.analysis.trajectory import _without_docstrings, _written

    assert code_without_prose('def f(x):\n    "Prose."\n    return x  # prose\n') == (
        "Module(body=[FunctionDef(name='f', args=arguments(args=[arg(arg='x')]), body=[Return(value=Name(id='x', ctx=Load()))])])")
    source = (Path(__file__).resolve().parents[2] / "geofact" / "analysis" / "readout.py").read_text()
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
