"""What an index promises and the shards do not hold: kept as records beside the tensors.

Missing tensors, unused second copies, unlisted tensors and names the index gives twice are
`IndexMismatch` records in `ckpt.details["index_mismatches"]`, never TensorInfo objects in
`ckpt.tensors`, so reading and statistics never see them.
"""

from __future__ import annotations

import pytest

import model_explorer as mx

from .conftest import codes, finding, shard_dir, write_index


def _marks(ckpt, kind):
    return {m.name: m for m in ckpt.index_mismatches if m.kind == kind}


def test_a_missing_shard_keeps_its_tensors_as_missing_entries(tmp_path):
    d, index, _ = shard_dir(tmp_path)
    (d / "model-00002-of-00003.safetensors").unlink()
    ckpt = mx.open(str(d))
    missing = _marks(ckpt, "missing")
    assert sorted(missing) == ["layers.2.w0", "layers.2.w1"]
    m = missing["layers.2.w0"]
    assert m.note == "missing: shard model-00002-of-00003.safetensors"
    assert m.file.endswith("model.safetensors.index.json")
    raw = open(m.file, "rb").read()
    assert raw[m.offset:m.offset + m.length].startswith(b'"layers.2.w0"')
    assert "layers.2.w0" not in ckpt.tensors
    assert ckpt.indexed_counts() == (4, 6)
    s = ckpt.summary()
    assert (s["readable_indexed_tensors"], s["indexed_tensors"], s["tensor_count"]) == (4, 6, 4)
    with pytest.raises(KeyError):
        ckpt.read("layers.2.w0")


def test_a_tensor_the_shard_lacks_is_missing_too(tmp_path):
    d, index, _ = shard_dir(tmp_path)
    index["weight_map"]["layers.9.ghost"] = "model-00001-of-00003.safetensors"
    write_index(d, index)
    ckpt = mx.open(str(d))
    m = _marks(ckpt, "missing")["layers.9.ghost"]
    assert m.note == "missing: not in shard model-00001-of-00003.safetensors"
    assert ckpt.indexed_counts() == (6, 7)


def test_unlisted_tensor_is_marked_orphan_and_stays_readable(tmp_path):
    d, index, _ = shard_dir(tmp_path)
    del index["weight_map"]["layers.3.w1"]
    write_index(d, index)
    ckpt = mx.open(str(d))
    m = _marks(ckpt, "orphan")["layers.3.w1"]
    assert m.note == "orphan: not in the index" and m.file.endswith("model-00003-of-00003.safetensors")
    assert ckpt.read("layers.3.w1").shape == (2, 2)
    assert ckpt.indexed_counts() == (5, 5)


def test_a_second_copy_is_a_duplicate_entry_not_a_tensor(tmp_path):
    import numpy as np
    import safetensors.numpy

    d, index, _ = shard_dir(tmp_path)
    # shard 3 also stores layers.1.w0, which the index maps to shard 1
    extra = {"layers.3.w0": np.full((2, 1), 3, np.float32), "layers.3.w1": np.full((2, 2), 3, np.float32),
             "layers.1.w0": np.full((2, 1), 9, np.float32)}
    safetensors.numpy.save_file(extra, str(d / "model-00003-of-00003.safetensors"))
    ckpt = mx.open(str(d))
    assert "duplicate_tensor" in codes(ckpt)
    dup = _marks(ckpt, "duplicate")["layers.1.w0"]
    assert dup.shard == "model-00003-of-00003.safetensors" and dup.info.file.endswith(dup.shard)
    assert ckpt.tensors["layers.1.w0"].file.endswith("model-00001-of-00003.safetensors")
    assert float(ckpt.read("layers.1.w0").max()) == 1.0  # the index's copy


def test_a_name_the_index_gives_twice(tmp_path):
    d, index, _ = shard_dir(tmp_path)
    text = (d / "model.safetensors.index.json")
    write_index(d, index)
    raw = text.read_text()
    # JSON allows a repeated key; json.load keeps the last one.
    raw = raw.replace('"layers.1.w0": "model-00001-of-00003.safetensors"',
                      '"layers.1.w0": "model-00002-of-00003.safetensors",\n'
                      '    "layers.1.w0": "model-00001-of-00003.safetensors"')
    text.write_text(raw)
    ckpt = mx.open(str(d))
    f = finding(ckpt, "index_names_twice")
    assert f.severity == "warning" and f.tensor == "layers.1.w0"
    assert raw.encode()[f.offset:f.offset + 13] == b'"layers.1.w0"'
    m = _marks(ckpt, "named_twice")["layers.1.w0"]
    assert m.shard == "model-00002-of-00003.safetensors"
    assert "missing_tensor" not in codes(ckpt)  # the kept mapping is the right one


def test_no_index_no_counts(tmp_path):
    d, _, _ = shard_dir(tmp_path)
    ckpt = mx.open(str(d / "model-00001-of-00003.safetensors"))
    assert ckpt.indexed_counts() is None and "indexed_tensors" not in ckpt.summary()
    assert ckpt.index_mismatches == []
