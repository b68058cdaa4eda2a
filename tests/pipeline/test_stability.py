import json
import shutil
import subprocess

import pytest

from geofact.pipeline import machine as machine_module
from geofact.pipeline import stability as st
from geofact.pipeline.claim_cards import render_claims
from geofact.pipeline.ledger import claim_anchor, load_ledger
from geofact.pipeline.ledger_view import FRAGILE_BADGE, badge
from geofact.pipeline.machine import describe_machine, machine_line, rounding_digest
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


def ledger_project(repo, tmp_path, notebook: str):
    """A project in tmp_path with the repository's ledger and no results, and the first claim of `notebook`."""
    for name in ["claims.yaml", "_toc.yml"]:
        shutil.copy(repo.root / name, tmp_path / name)
    (tmp_path / "notebooks").mkdir()
    project = Project(tmp_path)
    return project, next(c for c in load_ledger(project.ledger_path) if c.notebook == notebook)


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
    # MKL's compatible path sums a matmul in another order: the digest tells the two apart, and repeats
    assert len(machine["rounding_digest"]) == 16 and machine["rounding_digest"] != describe_machine({})["rounding_digest"]
    machine_module._probe.cache_clear()  # asked of a new interpreter again: the digest is the machine's, not the run's
    assert rounding_digest({"MKL_CBWR": "COMPATIBLE"}) == machine["rounding_digest"]
    assert "MKL_CBWR=COMPATIBLE" in machine_line(machine) and machine_line(None) == ""


def test_the_status_page_marks_a_fragile_verdict(repo, tmp_path):
    project, claim = ledger_project(repo, tmp_path, "exp-capacity")
    book = project.results("laptop", claim.notebook)
    book.parent.mkdir(parents=True)
    book.write_text(json.dumps(results({claim.id: "holds"})))
    page = render_status(project)
    assert "At laptop, 1 verdicts rest on trained models: 0 fragile and 0 stable under the rounding perturbation, 1 not compared" in page
    path = st.rounding_results(project, "laptop", claim.notebook, "mkl-compatible")
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(perturbed({claim.id: "inconclusive"})))
    page = render_status(project)
    assert "1 fragile and 0 stable under `mkl-compatible`" in page and f"{FRAGILE_BADGE} (under rounding: inconclusive)" in page
    row = next(line for line in page.splitlines() if f"<{claim_anchor(claim.id)}>" in line)
    assert f"{badge('holds')} {FRAGILE_BADGE}" in row  # the book's verdict, then the mark that the rounding moved it
    assert f"- laptop, **fragile**: inconclusive under the rounding perturbation." in render_claims(project)
    path.write_text(json.dumps(perturbed({claim.id: "holds"})))
    assert FRAGILE_BADGE not in render_status(project)
    assert "- laptop, stable under the rounding perturbation: holds in both." in render_claims(project)


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


def judged(verdict: str, tests: list[tuple[float, float, float, str]], claim=(0.9, 1.0), alternative=(0.0, 0.9)) -> dict:
    """A claim entry as geofact.evidence.judge writes it: one test per (lo, value, hi, verdict), ranges as JSON."""
    as_json = lambda r: {"lo": r[0], "hi": "inf" if r[1] == float("inf") else r[1], "label": ""}  # noqa: E731
    return {"verdict": verdict, "measured": "m", "note": "",
            "tests": [{"estimate": {"lo": lo, "value": v, "hi": hi}, "verdict": tv, "claim_range": as_json(claim),
                       "alternative_range": as_json(alternative)} for lo, v, hi, tv in tests]}


def test_how_far_an_interval_must_move_to_change_its_verdict():
    # holds: [0.95, 0.99] inside [0.9, 1], 0.01 from its upper end, half-width 0.02 -> 0.5 (an accuracy cannot pass 1:
    # a lower bound)
    assert st.shift_to_change(judged("holds", [(0.95, 0.97, 0.99, "holds")])) == pytest.approx(0.5)
    assert st.shift_to_change(judged("holds", [(0.905, 0.925, 0.945, "holds")])) == pytest.approx(0.25)
    # does not hold: [0.5, 0.7] must rise 0.2 to meet the claim's range, half-width 0.1 -> 2
    assert st.shift_to_change(judged("does not hold", [(0.5, 0.6, 0.7, "does not hold")])) == pytest.approx(2.0)
    # inconclusive across 0.9: 0.02 down to miss it, or 0.08 up to lie in it -> 0.02 / 0.05
    assert st.shift_to_change(judged("inconclusive", [(0.88, 0.93, 0.98, "inconclusive")])) == pytest.approx(0.4)
    # an alternative above the claim's range: mirrored (claim "not above 105%" [0, 7.665], alternative above it)
    assert st.shift_to_change(judged("holds", [(7.0, 7.2, 7.4, "holds")], claim=(0.0, 7.665),
                                     alternative=(7.665, float("inf")))) == pytest.approx((7.665 - 7.4) / 0.2)
    # does not hold beyond the claim's far end: [1.4, 1.6] is 0.15 above [0.75, 1.25] -> 1.5
    assert st.shift_to_change(judged("does not hold", [(1.4, 1.5, 1.6, "does not hold")], claim=(0.75, 1.25),
                                     alternative=(0.0, 0.75))) == pytest.approx(1.5)
    # several tests: the least; an exact count (no width), a theory page's check and a verdict not in regime: none
    assert st.shift_to_change(judged("holds", [(0.93, 0.95, 0.97, "holds"), (0.91, 0.92, 0.93, "holds")])) == pytest.approx(1.0)
    assert st.shift_to_change(judged("holds", [(7.3, 7.3, 7.3, "holds")])) is None
    assert st.shift_to_change({"verdict": "holds", "measured": "m"}) is None
    assert st.shift_to_change(judged("not in regime", [(0.95, 0.97, 0.99, "holds")])) is None


def test_a_stable_verdict_says_how_far_its_estimates_moved_and_which_parts_moved():
    book = results({})
    book["claims"] = {"a": judged("does not hold", [(0.5, 0.6, 0.7, "does not hold"), (0.2, 0.3, 0.4, "does not hold")])}
    other = perturbed({})
    other["claims"] = {"a": judged("does not hold", [(0.5, 0.65, 0.8, "does not hold"), (0.0, 0.5, 1.0, "inconclusive")])}
    (a,) = st.compare(book, other).values()
    assert a.state == st.STABLE and a.shift == pytest.approx(2.0)  # the second test's value 0.3 -> 0.5, half-width 0.1
    assert a.widening == pytest.approx(5.0)  # its interval 0.2 -> 1.0 wide
    assert a.parts_moved == ("does not hold -> inconclusive",) and a.parts == 2 and a.unpaired == 0
    assert "parts whose verdict changed, 1 of 2: does not hold -> inconclusive" in a.text()
    assert "up to 2 half-widths" in a.text() and "width changed 5-fold" in a.text()
    # tests are paired by what they measure: evidence.universal sorts them by verdict, so their order can differ
    for entry, values in ((book["claims"]["a"], (0.6, 0.3)), (other["claims"]["a"], (0.6, 0.31))):
        for test, cell in zip(entry["tests"], ("cell 1", "cell 2")):
            test["estimate"]["quantity"] = cell
    other["claims"]["a"]["tests"].reverse()
    other["claims"]["a"]["tests"][0]["estimate"].update(lo=0.2, value=0.31, hi=0.4)
    other["claims"]["a"]["tests"][0]["verdict"] = "does not hold"
    (a,) = st.compare(book, other).values()
    assert a.shift == pytest.approx(0.5) and a.parts_moved == () and "did not move" not in a.text()  # cell 1: 0.6 -> 0.65
    other["claims"]["a"]["tests"].pop()
    (a,) = st.compare(book, other).values()
    assert a.unpaired == 1 and "1 part judged in one of the runs only" in a.text() and a.shift == pytest.approx(0.1)
    (alone,) = st.compare(book, None).values()
    assert alone.state == st.NOT_COMPARED and alone.to_change == pytest.approx(2.0)
    assert "would have to move at least 2 half-widths to change a part's verdict" in alone.text()
    assert st.largest_shift({"laptop": {"a": a}, "paper": {"a": alone}}) == (pytest.approx(0.1), "a", "laptop", "mkl-compatible")


def test_the_status_page_sets_what_was_not_compared_against_what_the_perturbation_moved(repo, tmp_path):
    project, claim = ledger_project(repo, tmp_path, "exp-nl-lm")
    entry = judged("holds", [(0.95, 0.97, 0.99, "holds")])
    for profile, moved_to in (("laptop", 0.98), ("paper", None)):
        book = results({})
        book["claims"] = {claim.id: entry}
        project.results(profile, claim.notebook).parent.mkdir(parents=True)
        project.results(profile, claim.notebook).write_text(json.dumps(book))
        if moved_to is not None:
            other = perturbed({})
            other["claims"] = {claim.id: judged("holds", [(0.96, moved_to, 1.0, "holds")])}
            path = st.rounding_results(project, profile, claim.notebook, "mkl-compatible")
            path.parent.mkdir(parents=True)
            path.write_text(json.dumps(other))
    page = render_status(project)
    assert f"moved their estimates by at most 0.5 half-widths of their intervals ({claim.id}, `mkl-compatible`; a shift of the value" in page
    assert (f"Not compared, the least shift of an interval that changes a part's verdict: {claim.id} 0.5 half-widths; "
            f"at laptop, on its own runs and intervals, the perturbation moved a compared estimate by up to 0.5 ({claim.id})") in page
    assert f"- paper, not compared under the rounding perturbation (no perturbed run); its interval would have to move " \
           f"at least 0.5 half-widths to change a part's verdict." in render_claims(project)


INTEL = {"cpu": "Intel(R) Xeon(R) Processor", "cores": 2, "kernel_path": "AVX512", "blas": "MKL", "kernel_env": {}}
AMD = {**INTEL, "cpu": "AMD EPYC"}


def test_another_cpu_compares_the_native_runs_of_two_kinds_of_cpu(tmp_path, monkeypatch):
    another = {"perturbation": st.ANOTHER_CPU, "environ": {}}
    book = results({}, machine=INTEL)
    book["claims"] = {"a": judged("holds", [(0.95, 0.97, 0.99, "holds")])}
    moved = results({}, machine=AMD, rounding=another)
    moved["claims"] = {"a": judged("inconclusive", [(0.85, 0.91, 0.97, "inconclusive")])}
    (a,) = st.compare(book, moved).values()
    assert a.state == st.FRAGILE and a.text() == "**fragile**: inconclusive natively on another kind of CPU"
    same_cpu = {**moved, "provenance": {**moved["provenance"], "machine": INTEL}}
    assert "one kind of CPU" in st.compare(book, same_cpu)["a"].why
    forced = {**moved, "provenance": {**moved["provenance"], "machine": {**AMD, "kernel_env": {"MKL_CBWR": "AVX2"}}}}
    assert "set by the environment" in st.compare(book, forced)["a"].why
    same = {**moved, "claims": book["claims"]}  # trained otherwise, estimated alike: the verdict is stable
    (a,) = st.compare(book, same).values()
    assert a.state == st.STABLE and a.shift == 0 and "that the two CPUs round otherwise is not shown" in a.text()
    with_digests = lambda results, digest: {**results, "provenance": {  # noqa: E731
        **results["provenance"], "machine": {**results["provenance"]["machine"], "rounding_digest": digest}}}
    shown = st.compare(with_digests(book, "0" * 16), with_digests(same, "1" * 16))["a"]
    assert shown.state == st.STABLE and "not shown" not in shown.text()
    alike = st.compare(with_digests(book, "0" * 16), with_digests(moved, "0" * 16))["a"]
    assert alike.state == st.NOT_COMPARED and "round alike" in alike.why
    st.check_effective(st.ANOTHER_CPU)  # no GEMM of this machine changes: the check is against the book's CPU

    project = Project(tmp_path)
    monkeypatch.setattr(st, "describe_machine", lambda environ=None: dict(INTEL))
    with pytest.raises(ValueError, match="does not exist: execute it there first"):
        st.check_another_cpu(project, "paper", ["exp-nl-lm"])
    path = project.results("paper", "exp-nl-lm")
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(book))
    with pytest.raises(ValueError, match="needs a CPU other than the one exp-nl-lm's results at paper ran on"):
        st.check_another_cpu(project, "paper", ["exp-nl-lm"])
    monkeypatch.setattr(st, "describe_machine", lambda environ=None: dict(AMD))
    st.check_another_cpu(project, "paper", ["exp-nl-lm"])
    path.write_text(json.dumps(with_digests(book, "0" * 16)))
    monkeypatch.setattr(st, "describe_machine", lambda environ=None: {**AMD, "rounding_digest": "0" * 16})
    with pytest.raises(ValueError, match="one that rounds otherwise"):
        st.check_another_cpu(project, "paper", ["exp-nl-lm"])
    monkeypatch.setattr(st, "describe_machine", lambda environ=None: {**AMD, "rounding_digest": "1" * 16})
    st.check_another_cpu(project, "paper", ["exp-nl-lm"])
    monkeypatch.setenv("MKL_CBWR", "COMPATIBLE")
    with pytest.raises(ValueError, match="this shell sets MKL_CBWR: unset it"):
        st.check_another_cpu(project, "paper", ["exp-nl-lm"])


def test_each_perturbation_keeps_its_results_and_either_can_make_a_verdict_fragile(repo, tmp_path):
    project, claim = ledger_project(repo, tmp_path, "exp-nl-lm")
    book = results({}, machine={**INTEL, "rounding_digest": "0" * 16})
    book["claims"] = {claim.id: judged("holds", [(0.95, 0.97, 0.99, "holds")])}
    project.results("laptop", claim.notebook).parent.mkdir(parents=True)
    project.results("laptop", claim.notebook).write_text(json.dumps(book))
    mkl = st.rounding_results(project, "laptop", claim.notebook, "mkl-compatible")
    other = st.rounding_results(project, "laptop", claim.notebook, st.ANOTHER_CPU)
    mkl.parent.mkdir(parents=True)
    other.parent.mkdir(parents=True)
    stable = perturbed({}, machine={**INTEL, "rounding_digest": "2" * 16})
    stable["claims"] = {claim.id: judged("holds", [(0.955, 0.975, 0.995, "holds")])}
    mkl.write_text(json.dumps(stable))
    moved = results({}, machine={**AMD, "rounding_digest": "1" * 16}, rounding={"perturbation": st.ANOTHER_CPU, "environ": {}})
    moved["claims"] = {claim.id: judged("inconclusive", [(0.85, 0.91, 0.97, "inconclusive")])}
    other.write_text(json.dumps(moved))
    s = st.page_stability(project, "laptop", claim.notebook)[claim.id]
    assert s.state == st.FRAGILE and s.perturbation == st.ANOTHER_CPU and [k.perturbation for k in s.each] == [
        st.ANOTHER_CPU, "mkl-compatible"]
    assert s.text() == ("**fragile**: inconclusive natively on another kind of CPU; and stable under the rounding "
                        "perturbation: holds in both; its estimate moved 0.25 half-widths of its interval")
    assert "1 fragile and 0 stable under `another-cpu` or `mkl-compatible`" in render_status(project)
    moved["claims"] = stable["claims"]
    other.write_text(json.dumps(moved))
    s = st.page_stability(project, "laptop", claim.notebook)[claim.id]
    assert s.state == st.STABLE and len(s.each) == 2
    stale = {**moved, "provenance": {**moved["provenance"], "notebook_sha256": "n2"}}  # a run of another notebook
    other.write_text(json.dumps(stale))
    s = st.page_stability(project, "laptop", claim.notebook)[claim.id]
    assert s.state == st.STABLE and s.text().endswith(  # the comparison that could not be made says why
        "; and not compared natively on another kind of CPU (the perturbed run executed another version of the notebook)")
    both = {**moved, "claims": {claim.id: judged("does not hold", [(0.1, 0.2, 0.3, "does not hold")])}}
    other.write_text(json.dumps(both))
    mkl.write_text(json.dumps({**stable, "claims": {claim.id: judged("inconclusive", [(0.85, 0.91, 0.97, "inconclusive")])}}))
    s = st.page_stability(project, "laptop", claim.notebook)[claim.id]
    assert s.state == st.FRAGILE and s.moved_to == "does not hold (another-cpu), inconclusive (mkl-compatible)"
    assert st.largest_shift({"laptop": {claim.id: s}})[3] == st.ANOTHER_CPU  # the furthest, whichever moved it
    assert st.misfiled(project) == []
    other.rename(mkl)  # another-cpu's run in mkl-compatible's folder
    (moved_up := mkl.parent.parent / mkl.name).write_text(mkl.read_text())
    (nowhere := mkl.parent.parent / "avx2" / mkl.name).parent.mkdir()
    nowhere.write_text(mkl.read_text())
    rel = f"results/rounding/laptop"
    assert st.misfiled(project) == [
        f"{rel}/{mkl.name}: perturbed results go under results/rounding/<profile>/<perturbation>/ (git mv it to "
        f"{rel}/another-cpu/{mkl.name})",
        f"{rel}/avx2/{mkl.name}: 'avx2' is not a perturbation (mkl-compatible, another-cpu)",
        f"{rel}/mkl-compatible/{mkl.name}: its provenance says it ran under 'another-cpu', not 'mkl-compatible'"]
    for path in (mkl, moved_up, nowhere):
        path.unlink()
    assert st.page_stability(project, "laptop", claim.notebook)[claim.id].each == (
        st.compare(book, None)[claim.id],)
