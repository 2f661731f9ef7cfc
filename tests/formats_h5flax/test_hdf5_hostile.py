"""Damaged and hostile HDF5 files: addresses past the end, cycles in the group graph, deep
nesting, huge counts and sizes, random mutations. Each is a finding at the bytes, never a
traceback, a hang or an allocation sized by the file."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import model_explorer as mx
from model_explorer.formats.hdf5.groups import MAX_DEPTH

from .builders import h5py, kinds_h5, tf_model_h5
from .hostile import SETTINGS, mutated, mutations, opens_cleanly


def _codes(ckpt) -> set[str]:
    assert "internal_error" not in {f.code for f in ckpt.findings}, [str(f) for f in ckpt.findings]
    return {f.code for f in ckpt.findings}


def _offset_of(path, name: str) -> int:
    with h5py.File(path, "r") as f:
        return f[name].id.get_offset()


def test_data_address_past_the_end(tmp_path):
    path = tf_model_h5(tmp_path / "tf_model.h5")
    name = "bert/tf_bert_model/bert/embeddings/LayerNorm/gamma:0"
    raw = bytearray(path.read_bytes())
    at = raw.find(struct.pack("<Q", _offset_of(path, name)))
    raw[at:at + 8] = struct.pack("<Q", 2**40)
    path.write_bytes(bytes(raw))
    ckpt = mx.open(str(path))
    f = next(f for f in ckpt.findings if f.code == "h5_address_past_end")
    assert f.severity == "error" and f.offset <= at < f.offset + f.length and "gamma" in f.message
    with pytest.raises(ValueError):
        ckpt.read("tf_bert_model/bert/embeddings/LayerNorm/gamma:0")


def test_truncated_file_is_one_finding_per_problem(tmp_path):
    path = tf_model_h5(tmp_path / "tf_model.h5")
    raw = path.read_bytes()
    for cut in (10, 60, len(raw) // 3, len(raw) - 100):
        path.write_bytes(raw[:cut])
        ckpt = opens_cleanly(str(path))
        assert _codes(ckpt) & {"h5_truncated", "h5_address_past_end", "h5_bad_structure"}, cut


def test_a_link_back_to_an_ancestor_is_a_cycle_read_once(tmp_path):
    path = tmp_path / "cycle.h5"
    with h5py.File(path, "w") as f:
        f["a/b/w"] = np.ones(3, np.float32)
        f["a/b/loop"] = f["a"]  # a hard link from a group to its own ancestor
        f["again"] = f["a/b/w"]  # a second name for a dataset
    ckpt = mx.open(str(path))
    codes = _codes(ckpt)
    assert "h5_cycle" in codes and "h5_link_repeat" in codes
    assert list(ckpt.tensors) == ["a/b/w"]


def test_nesting_past_the_limit(tmp_path):
    path = tmp_path / "deep.h5"
    with h5py.File(path, "w") as f:
        f["/".join(["g"] * (MAX_DEPTH + 5)) + "/w"] = np.ones(2, np.float32)
        f["top"] = np.zeros(2, np.float32)
    ckpt = mx.open(str(path))
    assert "h5_too_deep" in _codes(ckpt) and list(ckpt.tensors) == ["top"]


@pytest.mark.parametrize("what", ["snod_count", "btree_entries", "header_size", "heap_size"])
def test_huge_counts_are_refused_before_allocating(tmp_path, what):
    path = tf_model_h5(tmp_path / "tf_model.h5")
    raw = bytearray(path.read_bytes())
    if what == "snod_count":
        at = raw.find(b"SNOD") + 6
        raw[at:at + 2] = b"\xff\xff"
    elif what == "btree_entries":
        at = raw.find(b"TREE") + 6
        raw[at:at + 2] = b"\xff\xff"
    elif what == "header_size":
        root = struct.unpack_from("<Q", raw, 64)[0]  # the root object header (superblock v0)
        at = root + 8
        raw[at:at + 4] = b"\xff\xff\xff\xff"
    else:
        at = raw.find(b"HEAP") + 8
        raw[at:at + 8] = struct.pack("<Q", 2**62)
    path.write_bytes(bytes(raw))
    ckpt = opens_cleanly(str(path))
    assert _codes(ckpt) & {"h5_address_past_end", "h5_too_large", "h5_bad_structure"}, what


def test_superblock_of_an_unknown_version(tmp_path):
    path = tf_model_h5(tmp_path / "tf_model.h5")
    raw = bytearray(path.read_bytes())
    raw[8] = 9
    path.write_bytes(bytes(raw))
    ckpt = mx.open(str(path))
    f = next(f for f in ckpt.findings if f.code == "h5_unsupported")
    assert f.offset == 8 and ckpt.tensors == {}


def test_a_continuation_that_loops(tmp_path):
    """An object header continuation pointing back at its own header is a cycle, not a hang."""
    path = tmp_path / "loop.h5"
    with h5py.File(path, "w") as f:
        d = f.create_dataset("w", data=np.ones(2, np.float32))
        for i in range(40):  # enough attributes to need a continuation block
            d.attrs[f"attribute_number_{i}"] = np.arange(8)
    with h5py.File(path, "r") as f:
        header = h5py.h5o.get_info(f["w"].id).addr
    raw = bytearray(path.read_bytes())
    at = raw.find(b"\x10\x00\x10\x00", header)  # v1 message: type 16 (continuation), 16 bytes
    assert at > 0
    raw[at + 8:at + 16] = struct.pack("<Q", header)
    path.write_bytes(bytes(raw))
    ckpt = opens_cleanly(str(path))
    assert _codes(ckpt) & {"h5_cycle", "h5_bad_structure"}


@SETTINGS
@given(muts=mutations, latest=st.booleans())
def test_mutated_hdf5_opens(tmp_path_factory, muts, latest):
    work = tmp_path_factory.getbasetemp()
    blob = _blob(work, latest)
    path = work / f"m{latest}.h5"
    path.write_bytes(mutated(blob, muts))
    opens_cleanly(str(path))


_BLOBS: dict[bool, bytes] = {}


def _blob(work, latest: bool) -> bytes:
    if latest not in _BLOBS:
        _BLOBS[latest] = kinds_h5(work / f"kinds{latest}.h5", **({"libver": "latest"} if latest else {})).read_bytes()
    return _BLOBS[latest]


def test_checksums_of_version_2_structures(tmp_path):
    """libver='latest' checksums the superblock and object headers (lookup3): a changed byte that
    still parses is a warning at the checksum, and the file is still read."""
    path = tmp_path / "latest.h5"
    with h5py.File(path, "w", libver="latest") as f:
        f.create_dataset("w", data=np.arange(4, dtype=np.float32), track_times=True)
    with h5py.File(path, "r") as f:
        header = h5py.h5o.get_info(f["w"].id).addr
    raw = bytearray(path.read_bytes())
    assert raw[header:header + 4] == b"OHDR" and raw[header + 5] & 0x20  # times are stored
    raw[header + 6] ^= 0x01  # the access time: still a valid header, no longer its checksum
    path.write_bytes(bytes(raw))
    ckpt = mx.open(str(path))
    (f,) = ckpt.findings
    assert f.code == "h5_bad_checksum" and f.severity == "warning" and f.length == 4
    np.testing.assert_array_equal(ckpt.read("w"), np.arange(4, dtype=np.float32))
