"""A run's weights as the run cache keeps them, read back fast (geofact.training.sweep.load_weights).

A run's final state and every checkpoint are written as an uncompressed NPZ (`geofact.store.write_arrays`,
compress=False; sweep.save_result), and each mechanism page loads every state of the capacity grid it analyses: at the
paper profile 3,024 states, 28.6 GB a page. `read_weights` reads each member of such a file straight into its array,
one copy from the file and no CRC pass (each member's size checked against its header instead: a flipped byte
goes unseen, as it would in memory; the files are written atomically and travel in gzip archives, whose CRC checks
them): 0.6 ms against
np.load's 1.5 for a state of N = 4096, R = 16 at d = 32 (1.1 MB), 9.7 against 28.3 at d = 768 (49 MB), on a 2-core
Xeon (bench/bench_load.py, 2026-11-30). A file with a compressed member is read by `geofact.store.read_arrays`.
"""

from __future__ import annotations

import math
import re
import struct
import zipfile
from pathlib import Path
from typing import BinaryIO

import numpy as np

from geofact.store import read_arrays

_PLAIN_HEADER = re.compile(r"\{'descr': '(?P<descr>[<>|=][a-zA-Z]\d*)', 'fortran_order': (?P<fortran>True|False), "
                           r"'shape': \((?P<shape>[\d, ]*)\), \}")
_LOCAL_HEADER = struct.Struct("<4s22xHH")  # a zip member's signature, (version .. sizes), name length, extra length


def read_weights(path: Path) -> dict[str, np.ndarray]:
    """The named arrays of an NPZ written by `geofact.store.write_arrays` (as it reads them)."""
    with open(path, "rb") as f, zipfile.ZipFile(f) as archive:
        members = archive.infolist()
        if any(m.compress_type != zipfile.ZIP_STORED for m in members):
            return read_arrays(path)
        arrays = {}
        for m in members:
            array = _stored_array(f, m, path)
            if array is None:  # a header of another .npy version than numpy's plain ones
                return read_arrays(path)
            arrays[m.filename.removesuffix(".npy")] = array
        return arrays


def _stored_array(f: BinaryIO, member: zipfile.ZipInfo, path: Path) -> np.ndarray | None:
    """One uncompressed .npy member of an open NPZ, read into a fresh array; None for a .npy format other than 1.0 and
    2.0 (3.0's header is UTF-8) or a header other than a plain dtype's (a structured one), which np.load reads."""
    f.seek(member.header_offset)
    signature, name_length, extra_length = _LOCAL_HEADER.unpack(f.read(_LOCAL_HEADER.size))
    if signature != b"PK\x03\x04":
        raise ValueError(f"{path}: member {member.filename} has no local header where the zip directory puts it")
    start = member.header_offset + _LOCAL_HEADER.size + name_length + extra_length
    f.seek(start)
    version = np.lib.format.read_magic(f)
    if version not in ((1, 0), (2, 0)):
        return None
    length = struct.unpack("<H" if version == (1, 0) else "<I", f.read(2 if version == (1, 0) else 4))[0]
    # numpy parses the header with ast.literal_eval, which CPython 3.11 does not allow on two threads at once ("AST
    # constructor recursion depth mismatch", seen when a batch read the next state ahead, trajectory.Prefetch): the
    # plain header numpy writes for an array of a plain dtype is read here without it, any other by np.load
    plain = _PLAIN_HEADER.fullmatch(f.read(length).decode("latin1").rstrip())
    if plain is None:
        return None
    dtype = np.dtype(plain["descr"])
    fortran = plain["fortran"] == "True"
    shape = tuple(int(n) for n in plain["shape"].replace(",", " ").split())
    if dtype.hasobject:
        raise ValueError(f"{path}: member {member.filename} holds Python objects; geofact reads plain arrays only")
    count = math.prod(shape)
    if f.tell() - start + count * dtype.itemsize != member.file_size:  # checked before anything is allocated
        raise ValueError(f"{path}: member {member.filename} is not the {count * dtype.itemsize} bytes of data its "
                         f"header announces (a truncated or damaged file)")
    flat = np.empty(count, dtype=dtype)
    if f.readinto(flat.view(np.uint8)) != flat.nbytes:
        raise ValueError(f"{path}: member {member.filename} ends before the {flat.nbytes} bytes of data its header "
                         f"announces (a truncated file)")
    return flat.reshape(shape, order="F" if fortran else "C")
