"""bench/profile_step.py: the paper's stack profiled op by op (geofact.ops.step_profile), a row a shape."""

from geofact.ops.step_profile import rows
from tests.bench import script


def test_the_bench_prints_a_row_a_shape(capsys, monkeypatch):
    bench = script("profile_step")
    monkeypatch.setattr("sys.argv", ["profile_step.py", "--d", "8", "--runs", "2", "--N", "256", "--precision", "fp32",
                                     "--steps", "1", "--top", "3"])
    bench.main()
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("N=256 d=8 2 runs fp32 on cpu: a step") and len(out) == 4 and "aten::" in out[1]
    assert len(list(rows("cpu", ds=(8, 12), runs=1, N=256, precision="fp32", steps=1))) == 2


def test_a_leases_json_rows_read_back_as_the_text(capsys, monkeypatch, tmp_path):
    bench = script("profile_step")
    argv = ["profile_step.py", "--d", "8", "--runs", "2", "--N", "256", "--precision", "fp32", "--steps", "1", "--top", "2"]
    monkeypatch.setattr("sys.argv", [*argv, "--json"])
    bench.main()
    rows_file = tmp_path / "profile.jsonl"
    rows_file.write_text("a line the shell wrote\n" + capsys.readouterr().out)
    monkeypatch.setattr("sys.argv", ["profile_step.py", "--read", str(rows_file), "--top", "2"])
    bench.main()
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("N=256 d=8 2 runs fp32 on cpu: a step") and len(out) == 3
