import numpy as np
import pytest

from geofact import store
from geofact.training.weights_file import read_weights


def test_uncompressed_arrays_read_in_place_as_np_load_reads_them(tmp_path):
    rng = np.random.default_rng(0)
    arrays = {"E_ent": rng.standard_normal((40, 7), dtype=np.float32), "fortran": np.asfortranarray(rng.random((3, 5))),
              "scalar": np.array(2.5), "empty": np.zeros((0, 4), dtype=np.float32), "mask": rng.random(9) > 0.5,
              "steps": np.arange(5, dtype=np.int64)}
    for compress in (False, True):  # a compressed file through store.read_arrays
        path = tmp_path / f"w{compress}.npz"
        store.write_arrays(path, arrays, compress=compress)
        back = read_weights(path)
        with np.load(path, allow_pickle=False) as z:
            assert list(back) == list(z.files) == list(arrays)
            for name in z.files:
                assert back[name].dtype == z[name].dtype and back[name].shape == z[name].shape
                assert np.array_equal(back[name], z[name]) and back[name].flags.writeable
        assert back["fortran"].flags.f_contiguous


def test_damaged_or_pickled_arrays_are_refused_with_the_member_named(tmp_path):
    path = tmp_path / "w.npz"
    store.write_arrays(path, {"a": np.arange(1000, dtype=np.float32), "b": np.ones(3)}, compress=False)
    damaged = tmp_path / "damaged.npz"  # the first member's header announces more data than the member holds
    damaged.write_bytes(path.read_bytes().replace(b"(1000,)", b"(1001,)", 1))
    with pytest.raises(ValueError, match="member a.npy is not the 4004 bytes of data its header announces"):
        read_weights(damaged)
    pickled = tmp_path / "pickled.npz"
    np.savez(pickled, a=np.array([{"x": 1}], dtype=object))
    with pytest.raises(ValueError, match="member a.npy holds Python objects"):
        read_weights(pickled)


def test_a_header_announcing_more_than_the_member_holds_is_refused_before_allocating_and_npy_3_goes_to_np_load(tmp_path):
    path = tmp_path / "w.npz"
    store.write_arrays(path, {"a": np.arange(10, dtype=np.float32)}, compress=False)
    huge = tmp_path / "huge.npz"  # 10**12 float32s announced (the header's length kept): a MemoryError if allocated first
    huge.write_bytes(path.read_bytes().replace(b"'shape': (10,), }           ", b"'shape': (1000000000000,), }", 1))
    with pytest.raises(ValueError, match="is not the 4000000000000 bytes of data its header announces"):
        read_weights(huge)
    utf8 = np.zeros(2, dtype=[("\u00e9\u0394", np.float32)])  # a field name only .npy 3.0's UTF-8 header holds
    with pytest.warns(UserWarning, match="format 3.0"):  # numpy's own note on writing one
        store.write_arrays(tmp_path / "u.npz", {"s": utf8}, compress=False)
    assert read_weights(tmp_path / "u.npz")["s"].dtype.names == ("\u00e9\u0394",)
