"""geofact pack / unpack: JSON records, results and pages travel; weights and in-flight states do not."""

import io
import json
import random
import tarfile

import nbformat
import pytest

from geofact.ops.pack import MANIFEST, pack, pack_members, unpack
from geofact.pipeline.project import Project


def page(profile: str) -> str:
    nb = nbformat.v4.new_notebook()
    nb.metadata["geofact"] = {"profile": profile}
    return nbformat.writes(nb)


def machine(root, files: dict[str, str]) -> Project:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return Project(root)


NODE = {
    ".geofact/runs/abc.json": json.dumps({"steps": 3, "provenance": {"device": "cuda:0 (NVIDIA H100 80GB HBM3)"}}),
    ".geofact/runs/abc.npz": "weights",
    ".geofact/runs/abc-step10.npz": "weights",
    ".geofact/runs/groups/ff.json": "{}",
    ".geofact/runs/groups/ff.npz": "state",
    ".geofact/runs/analyses/readouts/abc-final-01.json": json.dumps({"values": {"s": 1.0}}),
    "results/paper/exp-readout.json": json.dumps({"claims": {}, "provenance": {"device": "cuda:0 (NVIDIA H100 80GB HBM3)"}}),
    "results/laptop/exp-readout.json": "{}",
    "book/exp-readout.ipynb": page("paper"),
    "book/exp-capacity.ipynb": page("laptop"),
}


def test_pack_takes_records_results_and_pages_of_the_profile_and_unpack_puts_them_in_place(tmp_path):
    node = machine(tmp_path / "node", NODE)
    assert sorted(map(str, pack_members(node, "paper"))) == [
        ".geofact/runs/abc.json", ".geofact/runs/analyses/readouts/abc-final-01.json",
        "book/exp-readout.ipynb", "results/paper/exp-readout.json"]
    done = pack(node, tmp_path / "paper.tar.gz", "paper")
    assert done.files == 4 and done.bytes_out > 0
    here = machine(tmp_path / "here", {"book/exp-readout.ipynb": page("laptop")})  # a checkout with the laptop page
    got = unpack(here, done.paths)
    assert sorted(got.written) == sorted(map(str, pack_members(node, "paper")))  # the page of another profile is replaced
    assert got.manifest["devices"] == ["cuda:0 (NVIDIA H100 80GB HBM3)"]
    for name in got.written:
        assert (here.root / name).read_bytes() == (node.root / name).read_bytes()
    assert not list(here.runs_dir.rglob("*.npz"))
    again = unpack(here, done.paths)
    assert again.written == [] and len(again.identical) == 4


def test_unpack_refuses_clashing_records_unless_forced(tmp_path):
    node = machine(tmp_path / "node", NODE)
    archive = pack(node, tmp_path / "p.tar.gz", "paper").paths[0]
    here = machine(tmp_path / "here", {".geofact/runs/abc.json": "{}"})
    with pytest.raises(ValueError, match="differ from those in place.*--force"):
        unpack(here, archive)
    assert (here.runs_dir / "abc.json").read_text() == "{}" and not (here.root / "results").exists()  # nothing written
    unpack(here, archive, force=True)
    assert (here.runs_dir / "abc.json").read_text() == NODE[".geofact/runs/abc.json"]


def forged(path, files: dict[str, bytes], manifest: dict) -> None:
    with tarfile.open(path, "w:gz") as tar:
        for name, blob in [(MANIFEST, json.dumps(manifest).encode()), *files.items()]:
            info = tarfile.TarInfo(name)
            info.size = len(blob)
            tar.addfile(info, io.BytesIO(blob))


@pytest.mark.parametrize("name,problem", [("../evil.json", "outside"), ("notebooks/x.py", "outside"),
                                          (".geofact/runs/a.json", "does not match its sha256")])
def test_unpack_refuses_paths_outside_the_project_and_damaged_files(tmp_path, name, problem):
    manifest = {"schema": "geofact.pack/1", "files": {name: "0" * 64}}
    forged(tmp_path / "bad.tar.gz", {name: b"{}"}, manifest)
    with pytest.raises(ValueError, match=problem):
        unpack(Project(tmp_path / "here"), tmp_path / "bad.tar.gz")
    assert not (tmp_path / "evil.json").exists()


def test_pack_with_nothing_to_pack_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="nothing to pack"):
        pack(Project(tmp_path), tmp_path / "p.tar.gz", "paper")


def test_a_truncated_archive_is_a_clear_error(tmp_path):
    archive = pack(machine(tmp_path / "node", NODE), tmp_path / "p.tar.gz", "paper").paths[0]
    (tmp_path / "cut.tar.gz").write_bytes(archive.read_bytes()[:-100])
    with pytest.raises(ValueError, match="not a readable .tar.gz"):
        unpack(Project(tmp_path / "here"), tmp_path / "cut.tar.gz")


def bulky(root, n: int = 40) -> Project:
    """A node whose records compress badly (random hex), so that a few KiB of part size makes several parts."""
    rng = random.Random(0)
    return machine(root, {f".geofact/runs/r{i:02d}.json": json.dumps({"w": f"{rng.getrandbits(256):064x}"})
                          for i in range(n)})


def test_an_archive_larger_than_a_part_is_written_in_parts_that_unpack_from_any_of_their_forms(tmp_path):
    node = bulky(tmp_path / "node")
    whole = pack(node, tmp_path / "whole" / "a.tar.gz", "paper")
    assert len(whole.paths) == 1 and whole.paths[0].name == "a.tar.gz"
    done = pack(node, tmp_path / "out" / "a.tar.gz", "paper", part_bytes=1500)
    count = len(done.paths)
    assert 2 <= count <= 8 and [p.name for p in done.paths] == [f"a.tar.gz.part{i}of{count}" for i in range(1, count + 1)]
    assert all(p.stat().st_size <= 1500 for p in done.paths) and sum(p.stat().st_size for p in done.paths) == done.bytes_out
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(p.name for p in done.paths)
    for given in ([done.paths[0]], [done.paths[-1]], list(reversed(done.paths)), [tmp_path / "out" / "a.tar.gz"]):
        here = Project(tmp_path / f"here{len(given)}-{given[0].name}")
        got = unpack(here, given)
        assert len(got.written) == 40 and (here.runs_dir / "r07.json").read_bytes() == (node.runs_dir / "r07.json").read_bytes()


def test_a_missing_part_is_a_clear_error_naming_it(tmp_path):
    done = pack(bulky(tmp_path / "node"), tmp_path / "out" / "a.tar.gz", "paper", part_bytes=1500)
    count = len(done.paths)
    done.paths[1].unlink()
    with pytest.raises(ValueError, match=f"in {count} parts; missing: a.tar.gz.part2of{count}"):
        unpack(Project(tmp_path / "here"), done.paths[0])
    with pytest.raises(ValueError, match=f"missing: a.tar.gz.part2of{count}"):
        unpack(Project(tmp_path / "here"), [done.paths[0], *done.paths[2:]])
    with pytest.raises(ValueError, match="parts of one archive"):
        unpack(Project(tmp_path / "here"), [done.paths[0], tmp_path / "other.tar.gz"])
    with pytest.raises(ValueError, match="no such archive"):
        unpack(Project(tmp_path / "here"), tmp_path / "nowhere.tar.gz")
    assert not (tmp_path / "here").exists()


def test_more_than_eight_parts_is_a_clear_error_and_a_repack_replaces_the_parts_before_it(tmp_path):
    node = bulky(tmp_path / "node")
    with pytest.raises(ValueError, match="more than 8 parts of 200 bytes"):
        pack(node, tmp_path / "out" / "a.tar.gz", "paper", part_bytes=200)
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())
    parts = pack(node, tmp_path / "out" / "a.tar.gz", "paper", part_bytes=1500).paths
    assert len(parts) > 1
    again = pack(node, tmp_path / "out" / "a.tar.gz", "paper")  # fits in one file now: the parts go
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["a.tar.gz"] == [p.name for p in again.paths]
    with pytest.raises(ValueError, match="part_bytes must be an integer >= 1, got 0"):
        pack(node, tmp_path / "out" / "a.tar.gz", "paper", part_bytes=0)


def test_unpack_keeps_results_executed_later_than_the_archives(tmp_path):
    def results(at: str) -> str:
        return json.dumps({"claims": {}, "provenance": {"executed_at": at, "device": "cpu"}})

    node = machine(tmp_path / "node", {"results/paper/thm-a.json": results("2026-11-26 10:17 UTC"),
                                       "results/paper/thm-b.json": results("2026-11-28 09:00 UTC"),
                                       "results/paper/thm-c.json": json.dumps({"claims": {}}),
                                       "book/thm-a.ipynb": page("paper")})
    archive = pack(node, tmp_path / "p.tar.gz", "paper").paths[0]
    newer, older = results("2026-11-27 15:14 UTC"), results("2026-11-27 15:14 UTC")
    here = machine(tmp_path / "here", {"results/paper/thm-a.json": newer, "results/paper/thm-b.json": older,
                                       "results/paper/thm-c.json": newer, "book/thm-a.ipynb": page("laptop")})
    got = unpack(here, archive, force=True)
    assert sorted(got.kept_newer) == ["book/thm-a.ipynb", "results/paper/thm-a.json"]  # the page stays with its results
    assert sorted(got.written) == ["results/paper/thm-b.json", "results/paper/thm-c.json"]  # no time to compare: forced
    assert (here.root / "results/paper/thm-a.json").read_text() == newer
    assert (here.root / "book/thm-a.ipynb").read_text() == page("laptop")
    assert json.loads((here.root / "results/paper/thm-b.json").read_text())["provenance"]["executed_at"].startswith("2026-11-28")


def test_unpack_says_which_of_the_archives_analyses_were_keyed_by_other_analysis_code(tmp_path):
    """An analysis record's key hashes the modules the analysis reads (geofact.code_hash.analysis_modules), which the
    record names: records whose modules hash otherwise here are never read. The pack records each module's hash;
    unpack counts the records that read a module that differs, and those that name none (keyed before the keys were
    per analysis), which are read by none."""
    from pathlib import Path

    import geofact
    from geofact.code_hash import module_hashes

    package = Path(geofact.__file__).parent
    records = {".geofact/runs/analyses/readouts/abc-final-01.json": ["analysis/readout.py", "analysis/trained.py"],
               ".geofact/runs/analyses/interventions/abc-final-02.json": ["analysis/interventions.py", "analysis/readout.py"],
               ".geofact/runs/variants/v-1/analyses/interventions/abc-step3-02.json": ["analysis/interventions.py"]}

    def with_package(root, changed: str = "", named: bool = True) -> Project:
        files = {**NODE, **{name: json.dumps({"values": {}, **({"modules": modules} if named else {})})
                            for name, modules in records.items()}}
        project = machine(root, files)
        for name in module_hashes(package):
            (root / "geofact" / name).parent.mkdir(parents=True, exist_ok=True)
            (root / "geofact" / name).write_text((package / name).read_text() + ("\nSHIFT = 1\n" if name == changed else ""))
        return project

    done = pack(with_package(tmp_path / "node"), tmp_path / "paper.tar.gz", "paper")
    got = unpack(with_package(tmp_path / "same"), done.paths, force=True)
    assert got.manifest["analysis_modules"] == module_hashes(package) and got.warnings == []
    (warning,) = unpack(with_package(tmp_path / "other", changed="analysis/interventions.py"), done.paths, force=True).warnings
    assert warning.startswith("2 of its 3 analysis records (2 of interventions) read code that differs here, in "
                              "analysis/interventions.py")
    assert unpack(with_package(tmp_path / "judged", changed="analysis/judging.py"), done.paths, force=True).warnings == []
    (warning,) = unpack(with_package(tmp_path / "read", changed="analysis/readout.py"), done.paths, force=True).warnings
    assert warning.startswith("2 of its 3 analysis records (1 of interventions, 1 of readouts)")
    older = pack(with_package(tmp_path / "older-node", named=False), tmp_path / "older.tar.gz", "paper")
    (warning,) = unpack(with_package(tmp_path / "older"), older.paths, force=True).warnings
    assert warning.startswith("3 of its 3 analysis records name no modules that keyed them")
