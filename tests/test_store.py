import hashlib
import json

import numpy as np
import pytest

from geofact import store


def test_record_key_is_sha256_of_the_canonical_json_cut_at_16():
    content = {"b": [1, 2.5], "a": {"z": None, "y": "x"}}
    assert store.record_key(content) == hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()[:16]
    assert store.record_key({"a": 1, "b": 2}) == store.record_key({"b": 2, "a": 1})  # key order does not matter
    assert store.record_key({"a": 1}) != store.record_key({"a": 2})


def test_keyed_renames_a_record_cached_under_a_legacy_cut_of_its_key(tmp_path):
    content = {"probe": 1}
    digest = hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()
    key = store.record_key(content)
    for length in store.LEGACY_KEY_LENGTHS:  # 12 digits (probes, corpus LMs), 24 (group states)
        legacy = tmp_path / f"cat.rel.{digest[:length]}.json"
        legacy.write_text("{}")
        path = store.keyed(tmp_path / f"cat.rel.{key}.json", content)
        assert path.exists() and not legacy.exists() and path.name == f"cat.rel.{key}.json"
        path.unlink()
    assert not store.keyed(tmp_path / f"other.{key}.npz", content).exists()  # nothing to adopt: stays absent
    with pytest.raises(ValueError, match="not named by its record key"):
        store.keyed(tmp_path / "wrong-name.json", content)


def test_arrays_round_trip_without_pickles(tmp_path):
    arrays = {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "meta": np.frombuffer(b"{}", dtype=np.uint8)}
    for compress in (True, False):
        store.write_arrays(tmp_path / "x.npz", arrays, compress=compress)
        back = store.read_arrays(tmp_path / "x.npz")
        assert back.keys() == arrays.keys() and all(np.array_equal(back[k], arrays[k]) for k in arrays)
    assert not list(tmp_path.glob("*.tmp"))  # the temporary was renamed, not left behind


def test_read_record_checks_schema_and_config_and_notes_where_it_was_made(tmp_path):
    path = tmp_path / "r.json"
    assert store.read_record(path, "s/1", {"a": 1}) is None
    store.write_json(path, {"schema": "s/1", "config": {"a": 1}, "provenance": {"device": "cpu-test", "git_commit": "abc"}})
    assert store.read_record(path, "s/1", {"a": 1})["config"] == {"a": 1}
    assert "cpu-test" in store.SEEN["device"] and "abc" in store.SEEN["git_commit"]
    with pytest.raises(ValueError, match="does not hold a s/2 record"):
        store.read_record(path, "s/2", {"a": 1})
    with pytest.raises(ValueError, match="does not hold"):
        store.read_record(path, "s/1", {"a": 2})


def test_records_only_refuses_to_compute(monkeypatch):
    monkeypatch.setenv(store.RECORDS_ONLY_ENV, "1")
    with pytest.raises(store.RecordMissing, match="the weights x is not among the records"):
        store.refuse_in_records_only("the weights x")
    monkeypatch.setenv(store.RECORDS_ONLY_ENV, "0")
    store.refuse_in_records_only("the weights x")  # computing is allowed: no error
