"""Sharded safetensors (index + shards) and directories, opened as one model."""

from __future__ import annotations

import json

import numpy as np
import pytest
import safetensors.numpy

import model_explorer as mx

from .conftest import codes, finding, shard_dir, write_index


def _index_entry(index_path: str, name: str) -> int:
    """Byte offset of `"name":` inside the index file."""
    return open(index_path, "rb").read().index(json.dumps(name, ensure_ascii=False).encode() + b":")


def test_sharded_directory_and_index_open_as_one_model(tmp_path):
    d, index, arrays = shard_dir(tmp_path)
    for source in (str(d), str(d / "model.safetensors.index.json")):
        ckpt = mx.open(source)
        assert ckpt.format == "safetensors" and ckpt.findings == [], [str(f) for f in ckpt.findings]
        assert len(ckpt.files) == 3 and sorted(ckpt.tensors) == sorted(arrays)
        for name, arr in arrays.items():
            t = ckpt.tensors[name]
            assert t.file.endswith(index["weight_map"][name]) and t.shape == arr.shape
            assert ckpt.read_bytes(t.offset, t.length, t.file) == arr.tobytes()
        assert ckpt.total_size == sum((d / f).stat().st_size for f in set(index["weight_map"].values()))
        assert [r["expected"] for r in ckpt.details["shards"]] == [2, 2, 2]
        # spans are kept per file
        assert {s.file for s in ckpt.spans} == set(ckpt.files)


def test_side_files_go_into_metadata(tmp_path):
    d, _, _ = shard_dir(tmp_path)
    (d / "config.json").write_text('{"model_type": "llama"}')
    (d / "generation_config.json").write_text('{"temperature": 0.5}')
    ckpt = mx.open(str(d))
    assert ckpt.metadata["config.json"] == {"model_type": "llama"}
    assert ckpt.metadata["generation_config.json"] == {"temperature": 0.5}


def test_bad_config_json_is_a_warning(tmp_path):
    d, _, _ = shard_dir(tmp_path)
    (d / "config.json").write_text("{nope")
    f = finding(mx.open(str(d)), "bad_config")
    assert f.severity == "warning" and f.file.endswith("config.json")


def test_missing_shard_file(tmp_path):
    d, index, _ = shard_dir(tmp_path)
    (d / "model-00002-of-00003.safetensors").unlink()
    ckpt = mx.open(str(d))
    f = finding(ckpt, "missing_shard")
    idx = str(d / "model.safetensors.index.json")
    assert (f.file, f.tensor) == (idx, "layers.2.w0")
    assert f.offset == _index_entry(idx, "layers.2.w0")
    assert len(ckpt.tensors) == 4 and "total_size_mismatch" not in codes(ckpt)


def test_tensor_listed_in_index_but_absent_from_shard(tmp_path):
    d, index, _ = shard_dir(tmp_path)
    index["weight_map"]["layers.9.ghost"] = "model-00001-of-00003.safetensors"
    idx = write_index(d, index)
    f = finding(mx.open(str(d)), "missing_tensor")
    assert (f.tensor, f.file, f.offset) == ("layers.9.ghost", idx, _index_entry(idx, "layers.9.ghost"))


def test_tensor_in_shard_but_not_in_index(tmp_path):
    d, index, _ = shard_dir(tmp_path)
    del index["weight_map"]["layers.3.w1"]
    write_index(d, index)
    ckpt = mx.open(str(d))
    f = finding(ckpt, "orphan_tensor")
    shard = str(d / "model-00003-of-00003.safetensors")
    assert (f.severity, f.tensor, f.file) == ("warning", "layers.3.w1", shard)
    header = open(shard, "rb").read()
    assert header[f.offset:f.offset + f.length].startswith(b'"layers.3.w1":{')


def test_same_tensor_in_two_shards(tmp_path):
    d, index, _ = shard_dir(tmp_path)
    extra = {"layers.1.w0": np.zeros((2, 1), np.float32), "layers.2.w0": np.zeros((2, 1), np.float32),
             "layers.2.w1": np.zeros((2, 2), np.float32)}
    safetensors.numpy.save_file(extra, str(d / "model-00002-of-00003.safetensors"))
    ckpt = mx.open(str(d))
    f = finding(ckpt, "duplicate_tensor")
    shard = str(d / "model-00002-of-00003.safetensors")
    assert (f.tensor, f.file) == ("layers.1.w0", shard)
    assert open(shard, "rb").read()[f.offset:].startswith(b'"layers.1.w0"')
    # the copy the index names wins
    assert ckpt.tensors["layers.1.w0"].file.endswith("model-00001-of-00003.safetensors")


def test_the_copy_the_index_names_wins(tmp_path):
    d, index, arrays = shard_dir(tmp_path)
    first = {"layers.1.w0": arrays["layers.1.w0"], "layers.1.w1": arrays["layers.1.w1"],
             "layers.3.w0": np.zeros((2, 1), np.float32)}
    safetensors.numpy.save_file(first, str(d / "model-00001-of-00003.safetensors"))
    ckpt = mx.open(str(d))
    assert {"duplicate_tensor", "orphan_tensor"} <= codes(ckpt)
    t = ckpt.tensors["layers.3.w0"]
    assert t.file.endswith("model-00003-of-00003.safetensors")
    assert ckpt.read_bytes(t.offset, t.length, t.file) == arrays["layers.3.w0"].tobytes()


def test_wrong_total_size(tmp_path):
    d, index, _ = shard_dir(tmp_path)
    index["metadata"]["total_size"] += 4
    idx = write_index(d, index)
    f = finding(mx.open(str(d)), "total_size_mismatch")
    assert (f.file, f.offset) == (idx, open(idx, "rb").read().index(b'"total_size"'))


def test_index_not_json_or_without_weight_map(tmp_path):
    d, _, _ = shard_dir(tmp_path)
    idx = d / "model.safetensors.index.json"
    idx.write_text('{"weight_map": {"a": "x.safetensors",}}')
    f = finding(mx.open(str(idx)), "bad_index")
    assert f.offset == idx.read_bytes().index(b",}") + 1
    idx.write_text('{"metadata": {}}')
    assert finding(mx.open(str(idx)), "bad_index").file == str(idx)
    idx.write_text('{"metadata": {"total_size": ' + "1" * 5000 + '}, "weight_map": {}}')
    assert finding(mx.open(str(idx)), "bad_index").file == str(idx)


@pytest.mark.parametrize("value", [["x.safetensors"], {"a": 1}, None])
def test_shard_names_that_are_not_strings(tmp_path, value):
    d, index, _ = shard_dir(tmp_path)
    index["weight_map"]["layers.1.w0"] = value
    f = finding(mx.open(write_index(d, index)), "bad_shard_name")
    assert f.tensor == "layers.1.w0" and f.severity == "error"


@pytest.mark.parametrize("total", [float("inf"), float("nan"), 1e300])
def test_total_size_that_is_no_integer(tmp_path, total):
    d, index, _ = shard_dir(tmp_path)
    index["metadata"]["total_size"] = total
    assert finding(mx.open(write_index(d, index)), "total_size_mismatch").severity == "warning"


def test_shard_names_escaping_the_folder_are_refused(tmp_path):
    d, index, _ = shard_dir(tmp_path)
    (tmp_path / "outside.safetensors").write_bytes((d / "model-00001-of-00003.safetensors").read_bytes())
    index["weight_map"]["layers.1.w0"] = "../outside.safetensors"
    index["weight_map"]["layers.1.w1"] = "/etc/passwd"
    idx = write_index(d, index)
    ckpt = mx.open(idx)
    bad = [f for f in ckpt.findings if f.code == "bad_shard_name"]
    assert {f.tensor for f in bad} == {"layers.1.w0", "layers.1.w1"}
    assert all(f.file == idx for f in ckpt.findings if f.code == "bad_shard_name")
    assert not any(t.file.endswith("outside.safetensors") for t in ckpt.tensors.values())


def test_shards_in_sub_folders_and_odd_names(tmp_path):
    names = {1: "part one/model #1.safetensors", 2: "w\u00e9ights/m%20?.safetensors", 3: "sub/dir/x.safetensors"}
    d, index, arrays = shard_dir(tmp_path, shard_name=lambda i, n: names[i])
    ckpt = mx.open(str(d))
    assert ckpt.findings == [], [str(f) for f in ckpt.findings]
    assert sorted(ckpt.tensors) == sorted(arrays)
    assert ckpt.tensors["layers.2.w1"].file == str(d / "w\u00e9ights" / "m%20?.safetensors")


def test_unicode_tensor_names_in_index(tmp_path):
    d = tmp_path / "u"
    d.mkdir()
    safetensors.numpy.save_file({"caf\u00e9": np.zeros(2, np.float32)}, str(d / "a.safetensors"))
    idx = write_index(d, {"weight_map": {"caf\u00e9": "a.safetensors", "th\u00e9": "a.safetensors"}})
    f = finding(mx.open(idx), "missing_tensor")
    assert f.offset == _index_entry(idx, "th\u00e9")


def test_directory_of_plain_safetensors_files(tmp_path):
    d = tmp_path / "plain"
    d.mkdir()
    safetensors.numpy.save_file({"a": np.zeros(2, np.float32)}, str(d / "a.safetensors"))
    safetensors.numpy.save_file({"b": np.zeros(3, np.float32)}, str(d / "b.safetensors"))
    ckpt = mx.open(str(d))
    assert list(ckpt.tensors) == ["a", "b"] and ckpt.findings == []


def test_empty_directory(tmp_path):
    ckpt = mx.open(str(tmp_path))
    assert finding(ckpt, "no_weights").severity == "error"


def test_missing_path_raises(tmp_path):
    import pytest

    with pytest.raises(FileNotFoundError):
        mx.open(str(tmp_path / "nope.safetensors"))


def test_deeply_nested_json_side_files_do_not_raise(tmp_path):
    d, _, _ = shard_dir(tmp_path)
    (d / "config.json").write_text("[" * 200_000)
    assert finding(mx.open(str(d)), "bad_config").severity == "warning"
    idx = d / "model.safetensors.index.json"
    idx.write_text('{"weight_map": ' + "[" * 200_000)
    assert finding(mx.open(str(idx)), "bad_index").severity == "error"


def test_several_indexes_reads_the_safetensors_one(tmp_path):
    d, index, _ = shard_dir(tmp_path)
    write_index(d, {"weight_map": {"x": "pytorch_model.bin"}}, "pytorch_model.bin.index.json")
    write_index(d, index, "other.safetensors.index.json")
    ckpt = mx.open(str(d))
    assert finding(ckpt, "several_indexes").severity == "info"
    assert ckpt.details["index_file"].endswith(".safetensors.index.json") and len(ckpt.tensors) == 6
