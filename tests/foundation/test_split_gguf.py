"""Split GGUF (`NAME-0000k-of-0000N.gguf` with `split.*` keys) opened as one model."""

from __future__ import annotations

import os

import gguf
import numpy as np
import pytest

import model_explorer as mx

from .conftest import F32, UINT16, GGUFBuilder, codes, finding


def _write_split(d, n_tensors: int = 5, per_split: int = 2) -> list[str]:
    w = gguf.GGUFWriter(os.path.join(d, "m.gguf"), "llama", split_max_tensors=per_split)
    w.add_uint32("llama.block_count", 1)
    for i in range(n_tensors):
        w.add_tensor(f"t{i}", np.full((4, i + 1), i, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return [os.path.join(d, f) for f in sorted(os.listdir(d))]


@pytest.mark.parametrize("which", [0, 1, 2])
def test_split_opened_from_any_part(tmp_path, which):
    parts = _write_split(tmp_path)
    assert len(parts) == 3
    ckpt = mx.open(parts[which])
    assert ckpt.findings == [], [str(f) for f in ckpt.findings]
    assert ckpt.files == parts
    assert list(ckpt.tensors) == [f"t{i}" for i in range(5)]
    assert ckpt.metadata["split.count"].value == 3 and ckpt.metadata["llama.block_count"].value == 1
    for name, t in ckpt.tensors.items():
        ref = {rt.name: rt for rt in gguf.GGUFReader(t.file).tensors}[name]
        assert (t.offset, t.length, t.shape) == (ref.data_offset, ref.n_bytes, tuple(reversed(ref.shape)))
    assert {s.file for s in ckpt.spans} == set(parts)
    for key, kv in ckpt.metadata.items():  # every key/value knows which split holds its bytes
        assert ckpt.read_bytes(kv.offset + 8, len(key.encode()), kv.file) == key.encode(), key


def test_split_directory(tmp_path):
    parts = _write_split(tmp_path)
    ckpt = mx.open(str(tmp_path))
    assert ckpt.files == parts and len(ckpt.tensors) == 5 and not ckpt.errors


def test_missing_middle_split(tmp_path):
    parts = _write_split(tmp_path)
    os.unlink(parts[1])
    ckpt = mx.open(parts[0])
    f = finding(ckpt, "missing_split")
    count_kv = ckpt.metadata["split.count"]
    assert (f.offset, f.length, f.file) == (count_kv.offset, count_kv.length, parts[0])
    assert "00002-of-00003" in f.message
    assert list(ckpt.tensors) == ["t0", "t1", "t4"]
    assert "split_tensor_count" in codes(ckpt)


def test_missing_first_split_opened_from_a_later_one(tmp_path):
    parts = _write_split(tmp_path)
    os.unlink(parts[0])
    ckpt = mx.open(parts[2])
    f = finding(ckpt, "missing_split")
    assert f.file == parts[2] and "00001-of-00003" in f.message
    assert ckpt.files == [parts[2], parts[1]]
    assert set(ckpt.tensors) == {"t2", "t3", "t4"}


def _hand_split(tmp_path, names_and_nos, dup=False) -> list[str]:
    paths = []
    for i, (name, no) in enumerate(names_and_nos):
        b = GGUFBuilder().kv("split.no", UINT16, no).kv("split.count", UINT16, len(names_and_nos))
        b.tensor("shared" if dup else f"x{i}", [4], F32, 0)
        p = tmp_path / name
        p.write_bytes(b.build(b"\0" * 16))
        paths.append(str(p))
    return paths


def test_split_number_mismatch(tmp_path):
    paths = _hand_split(tmp_path, [("s-00001-of-00002.gguf", 0), ("s-00002-of-00002.gguf", 5)])
    ckpt = mx.open(paths[0])
    f = finding(ckpt, "split_number")
    assert f.file == paths[1] and f.offset == 24  # the split.no key/value of the second file


def test_same_tensor_in_two_splits(tmp_path):
    paths = _hand_split(tmp_path, [("s-00001-of-00002.gguf", 0), ("s-00002-of-00002.gguf", 1)], dup=True)
    ckpt = mx.open(paths[0])
    f = finding(ckpt, "duplicate_tensor")
    info_start = ckpt.spans_for(paths[1])
    tensor_info = next(s for s in info_start if s.kind == "tensor_info")
    assert (f.file, f.offset, f.tensor) == (paths[1], tensor_info.offset, "shared")
    assert ckpt.tensors["shared"].file == paths[0]


def test_split_keys_with_an_unsplit_name(tmp_path):
    (p := tmp_path / "plain.gguf").write_bytes(
        GGUFBuilder().kv("split.count", UINT16, 2).tensor("a", [4], F32, 0).build(b"\0" * 16))
    f = finding(mx.open(str(p)), "split_name")
    assert (f.severity, f.offset) == ("warning", 24)


def test_directory_with_unrelated_ggufs_reads_one_and_says_so(tmp_path):
    for name in ("a-q4.gguf", "a-q8.gguf"):
        (tmp_path / name).write_bytes(GGUFBuilder().tensor("t", [4], F32, 0).build(b"\0" * 16))
    ckpt = mx.open(str(tmp_path))
    assert len(ckpt.files) == 1 and finding(ckpt, "several_models").severity == "info"
