import json
import shutil
import subprocess

import pytest

from geofact.pipeline import stability as st
from geofact.pipeline.claim_cards import render_claims
from geofact.pipeline.ledger import claim_anchor, load_ledger
from geofact.pipeline.ledger_view import FRAGILE_BADGE, badge
from geofact.pipeline.machine import describe_machine, machine_line
from geofact.pipeline.project import Project
from geofact.pipeline.status import render_status

TRAINING_MODULES = {"geofact.training.config": "h1"}


ROUNDING = {"perturbation": "mkl-compatible", "environ": {"MKL_CBWR": "COMPATIBLE"}}


def results(verdicts: dict[str, str], **provenance) -> dict:
    base = {"notebook_sha256": "n1", "parameters": {"seed": 0}, "modules": dict(TRAINING_MODULES), "device": "cpu",
            "environment": {"torch": "2.13.0+cpu", "numpy": "2.4.6", "python": "3.11.7"}}
    return {"claims": {c: {"verdict": v, "measured": "m", "note": ""} for c, v in verdicts.items()},
            "provenance": {**base, **provenance}}


def perturbed(verdicts: dict[str, str], **provenance) -> dict:
    return results(verdicts, rounding=ROUNDING, **provenance)


def test_compare_finds_a_flip_and_refuses_runs_of_other_code():
    book = results({"a": "holds", "b": "does not hold", "c": "not run"})
    same = st.compare(book, perturbed({"a": "holds", "b": "does not hold", "c": "not run"}, parameters={"seed": 0, "cache_dir": "/x"}))
    assert {c: s.state for c, s in same.items()} == {"a": st.STABLE, "b": st.STABLE, "c": st.NOT_COMPARED}
    flipped = st.compare(book, perturbed({"a": "inconclusive", "b": "does not hold", "c": "not run"}))
    assert flipped["a"].state == st.FRAGILE and flipped["a"].perturbed == "inconclusive" and "**fragile**" in flipped["a"].text()
    assert flipped["b"].state == st.STABLE
    for other, why in ((perturbed({"a": "holds"}, notebook_sha256="n2"), "another version of the notebook"),
                       (perturbed({"a": "holds"}, parameters={"seed": 1}), "other parameters"),
                       (perturbed({"a": "holds"}, modules={"geofact.training.config": "h2"}), "other code"),
                       (perturbed({"a": "holds"}, device="cuda (H100)"), "another device"),
                       (perturbed({"a": "holds"}, environment={"torch": "2.14.1", "numpy": "2.4.6", "python": "3.11.7"}),
                        "other versions"),
                       (results({"a": "holds"}), "not the book's and a perturbed one"),
                       (None, "no perturbed run")):
        assert st.compare(book, other)["a"].state == st.NOT_COMPARED and why in st.compare(book, other)["a"].why
    assert st.trains(book) and not st.trains(results({}, modules={"geofact.evidence": "h"}))
    native = results({"a": "holds"}, machine={"kernel_env": {"MKL_CBWR": "COMPATIBLE"}})  # the book's run, perturbed itself
    assert "itself executed under the perturbation" in st.compare(native, perturbed({"a": "holds"}))["a"].why


def test_a_perturbation_must_exist_and_change_the_rounding(monkeypatch):
    with pytest.raises(ValueError, match="rounding must be one of"):
        st.perturbation_environ("avx2")
    st.check_effective("mkl-compatible")  # torch's CPU wheels carry MKL: its compatible path sums otherwise
    monkeypatch.setitem(st.PERTURBATIONS, "nothing", {"GEOFACT_UNUSED_SETTING": "1"})
    with pytest.raises(ValueError, match="changes no bit of a float32 GEMM"):
        st.check_effective("nothing")


def test_the_machine_is_described_for_provenance():
    machine = describe_machine({"MKL_CBWR": "COMPATIBLE", "HOME": "/root"})
    assert machine["cpu"] and machine["kernel_path"] and machine["kernel_env"] == {"MKL_CBWR": "COMPATIBLE"}
    assert "MKL_CBWR=COMPATIBLE" in machine_line(machine) and machine_line(None) == ""


def test_the_status_page_marks_a_fragile_verdict(repo, tmp_path):
    for name in ["claims.yaml", "_toc.yml"]:
        shutil.copy(repo.root / name, tmp_path / name)
    (tmp_path / "notebooks").mkdir()
    project = Project(tmp_path)
    claim = next(c for c in load_ledger(project.ledger_path) if c.notebook == "exp-capacity")
    book = project.results("laptop", claim.notebook)
    book.parent.mkdir(parents=True)
    book.write_text(json.dumps(results({claim.id: "holds"})))
    page = render_status(project)
    assert "At laptop, 1 verdicts rest on trained models: 0 fragile and 0 stable under the rounding perturbation, 1 not compared" in page
    path = st.rounding_results(project, "laptop", claim.notebook)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(perturbed({claim.id: "inconclusive"})))
    page = render_status(project)
    assert "1 fragile and 0 stable" in page and f"{FRAGILE_BADGE} (under rounding: inconclusive)" in page
    row = next(line for line in page.splitlines() if f"<{claim_anchor(claim.id)}>" in line)
    assert f"{badge('holds')} {FRAGILE_BADGE}" in row  # the book's verdict, then the mark that the rounding moved it
    assert f"- laptop, **fragile**: inconclusive under the rounding perturbation." in render_claims(project)
    path.write_text(json.dumps(perturbed({claim.id: "holds"})))
    assert FRAGILE_BADGE not in render_status(project)
    assert "- laptop, stable under the rounding perturbation (holds in both)." in render_claims(project)


def test_moved_since_lists_the_verdicts_a_re_execution_changed(tmp_path):
    project = Project(tmp_path)
    path = project.results("laptop", "exp-capacity")
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(results({"a": "holds", "b": "inconclusive"}, machine={"cpu": "CPU one", "kernel_path": "AVX512",
                                                                                  "blas": "MKL", "cores": 2})))
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    for args in (["init", "-q"], ["add", "results"], ["commit", "-q", "-m", "results"]):
        subprocess.run([*git, *args], cwd=tmp_path, check=True)
    assert st.moved_since(project) == []
    path.write_text(json.dumps(results({"a": "does not hold", "b": "inconclusive"},
                                       machine={"cpu": "CPU two", "kernel_path": "AVX2", "blas": "MKL", "cores": 2})))
    (moved,) = st.moved_since(project)
    assert (moved.claim, moved.before, moved.after) == ("a", "holds", "does not hold")
    assert "CPU one" in moved.line() and "CPU two (2 cores; kernels AVX2" in moved.line()


def test_a_verdict_that_moves_with_where_training_is_read_is_marked(repo, tmp_path):
    from geofact.pipeline.ledger_view import reading_badge

    for name in ["claims.yaml", "_toc.yml"]:
        shutil.copy(repo.root / name, tmp_path / name)
    (tmp_path / "notebooks").mkdir()
    project = Project(tmp_path)
    first, second = [c for c in load_ledger(project.ledger_path) if c.notebook == "exp-readout"][:2]
    data = results({first.id: "holds", second.id: "does not hold"})
    estimate = {"value": 0.5, "lo": 0.4, "hi": 0.6, "confidence": 0.95, "method": "t", "n": 3, "quantity": "q"}
    data["claims"][first.id]["readings"] = {"best": {"verdict": "holds", "estimate": estimate},
                                            "last": {"verdict": "inconclusive", "estimate": estimate}}
    data["claims"][first.id]["reading_sensitive"] = True
    data["claims"][second.id]["readings"] = {"best": {"verdict": "does not hold", "estimate": None}, "last": None}
    data["claims"][second.id]["reading_sensitive"] = False
    path = project.results("laptop", "exp-readout")
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(data))
    page = render_status(project)
    row = next(line for line in page.splitlines() if f"<{claim_anchor(first.id)}>" in line)
    assert f"{reading_badge()} (at the end of the budget: inconclusive)" in row
    other = next(line for line in page.splitlines() if f"<{claim_anchor(second.id)}>" in line)
    assert reading_badge() not in other
    assert reading_badge(1) in page and "2 verdicts were also read" in page and "1 moves with where training is read" in page
    cards = render_claims(project)
    assert f"- laptop, read elsewhere along training: {reading_badge()} best state before any spike: the same" in cards
    assert "end of the budget: inconclusive, 0.5" in cards and "end of the budget: not read" in cards
