"""Sharded indexes rebuilt from the shards' own headers."""

from __future__ import annotations

import json

import numpy as np

import model_explorer as mx
from model_explorer.codes import CATALOG

from .conftest import llama_tensors, load_transformers, safe_open_all, write_folder, write_raw

INDEX = "model.safetensors.index.json"


def _index(folder):
    return json.loads((folder / INDEX).read_text())


def _set_index(folder, index):
    (folder / INDEX).write_text(json.dumps(index, indent=2))


def codes(path):
    # a test folder has no tokenizer files: that info is about the model, not the bytes repaired
    return {f.code for f in mx.open(path).findings} - {"no_tokenizer"}


def test_wrong_entries_and_total_size(tmp_path, checked):
    tensors = llama_tensors()
    src = write_folder(tmp_path / "src", tensors, shards=3)
    index = _index(src)
    wm = index["weight_map"]
    wm["model.norm.weight"] = "model-00001-of-00003.safetensors"  # the wrong shard
    del wm["model.layers.0.mlp.up_proj.weight"]  # missing
    index["metadata"]["total_size"] = 12
    _set_index(src, index)
    assert {"missing_tensor", "orphan_tensor", "total_size_mismatch"} <= codes(src)
    report = checked(src)
    assert [f.name for f in report.applied] == ["rebuild_index"]
    fixed = tmp_path / "fixed"
    assert codes(fixed) == set()
    assert _index(fixed)["metadata"]["total_size"] == sum(a.nbytes for a in tensors.values())
    assert len(_index(fixed)["weight_map"]) == len(tensors)
    for f in src.glob("*.safetensors"):  # no shard needed rewriting
        assert (fixed / f.name).read_bytes() == f.read_bytes()
    load_transformers(fixed)


def test_renamed_shard_is_found_and_written_under_the_expected_name(tmp_path, checked):
    src = write_folder(tmp_path / "src", llama_tensors(), shards=2)
    (src / "model-00002-of-00002.safetensors").rename(src / "model-00002-of-00002 (1).safetensors")
    assert "missing_shard" in codes(src)
    plan = mx.repair_plan(src)
    assert not any(u.code == "missing_shard" for u in plan.unfixable)
    report = checked(src)
    fixed = tmp_path / "fixed"
    assert (fixed / "model-00002-of-00002.safetensors").exists()
    assert not list(fixed.glob("* (1).safetensors"))
    assert codes(fixed) == set() and any("(1)" in n for n in report.notes)
    load_transformers(fixed)


def test_duplicate_across_shards_keeps_the_indexed_copy(tmp_path, checked):
    tensors = llama_tensors()
    src = write_folder(tmp_path / "src", tensors, shards=2)
    index = _index(src)
    name = "model.norm.weight"
    owner = index["weight_map"][name]
    other = next(f for f in ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors") if f != owner)
    part = safe_open_all(src / other)
    part[name] = tensors[name] * 2  # a stale, different copy
    write_raw(src / other, part, metadata={"format": "pt"})
    assert "duplicate_tensor" in codes(src)
    report = checked(src)
    assert any("DIFFER" in n and owner in n for n in report.notes)
    out = safe_open_all(tmp_path / "fixed")
    np.testing.assert_array_equal(out[name], tensors[name])
    assert codes(tmp_path / "fixed") == set()


def test_missing_shard_with_no_source_cannot_be_fixed(tmp_path):
    src = write_folder(tmp_path / "src", llama_tensors(), shards=2)
    (src / "model-00002-of-00002.safetensors").unlink()
    plan = mx.repair_plan(src)
    lost = next(u for u in plan.unfixable if u.code == "missing_shard")
    assert lost.advice == f"{CATALOG['missing_shard'].unfixable} {CATALOG['missing_shard'].fix}"  # from the catalog


def test_fixes_chosen_by_finding_code_and_index_path_as_source(tmp_path, checked):
    src = write_folder(tmp_path / "src", {"module." + k: v for k, v in llama_tensors().items()}, shards=2)
    index = _index(src)
    index["metadata"]["total_size"] = 3
    _set_index(src, index)
    report = checked(src / INDEX, fixes=["total_size_mismatch"])
    assert [f.name for f in report.applied] == ["rebuild_index"]
    # the prefix was not asked for: still there, the index follows the shards as they are
    assert all(k.startswith("module.") for k in _index(tmp_path / "fixed")["weight_map"])
