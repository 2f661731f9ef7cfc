"""safetensors headers wrong while the data is intact: each repaired and reopened clean."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest

import model_explorer as mx

from .conftest import header_bytes, llama_tensors, load_transformers, safe_open_all, write_folder, write_raw

SMALL = {"a": np.arange(12, dtype=np.float32).reshape(3, 4), "b": np.ones(5, np.float32),
         "c": np.arange(6, dtype=np.float16).reshape(2, 3)}


def codes(path):
    # a test folder has no tokenizer files: that info is about the model, not the bytes repaired
    return {f.code for f in mx.open(path).findings} - {"no_tokenizer"}


def test_unaligned_header_is_repadded(tmp_path, checked):
    src = tmp_path / "m.safetensors"
    write_raw(src, SMALL, pad=False, edit=lambda h: h.update({"__metadata__": {"k": "vv"}}))
    assert [f.name for f in mx.repair_plan(src).fixes] == ["repad_header"]
    report = checked(src, tmp_path / "out" / "m.safetensors")
    out = tmp_path / "out" / "m.safetensors"
    (n,) = struct.unpack("<Q", out.read_bytes()[:8])
    assert (8 + n) % 8 == 0
    assert mx.repair_plan(out).fixes == [] and [f.name for f in report.applied] == ["repad_header"]
    assert all(t.identical for t in report.tensors)


def test_non_string_metadata_is_stringified(tmp_path, checked):
    src = tmp_path / "m.safetensors"
    write_raw(src, SMALL, metadata={"format": "pt", "step": 1200, "cfg": {"lr": 0.1}})
    assert "metadata_not_string" in codes(src)
    report = checked(src, tmp_path / "out")
    from safetensors import safe_open

    with safe_open(str(tmp_path / "out" / "m.safetensors"), "np") as r:
        assert r.metadata() == {"format": "pt", "step": "1200", "cfg": '{"lr": 0.1}'}
    assert any("step" in n for n in report.notes)


def test_gap_after_a_short_range_is_the_tensor_s_own(tmp_path, checked):
    """The notebook's case 2: data_offsets end 8 bytes short; the bytes up to the next tensor fit."""
    good = tmp_path / "good.safetensors"
    write_raw(good, SMALL)
    raw = good.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    header["a"]["data_offsets"][1] -= 8
    src = tmp_path / "bad.safetensors"
    src.write_bytes(header_bytes(header) + raw[8 + n:])
    assert {"size_mismatch", "data_gap"} <= codes(src)
    report = checked(src, tmp_path / "out")
    out = safe_open_all(tmp_path / "out")
    for k, v in SMALL.items():
        np.testing.assert_array_equal(out[k], v)
    assert {t.name for t in report.tensors if not t.identical} == {"a"}
    assert [f.name for f in report.applied] == ["fix_entry"]  # the gap was a's own bytes


def test_wrong_dtype_where_one_reading_fits(tmp_path, checked):
    src = tmp_path / "m.safetensors"
    write_raw(src, SMALL, edit=lambda h: h["a"].update(dtype="F16"))  # 48 bytes: F32 [3,4] only
    report = checked(src, tmp_path / "out")
    assert "F16 -> F32" in report.applied[0].summary
    np.testing.assert_array_equal(safe_open_all(tmp_path / "out")["a"], SMALL["a"])


def test_wrong_shape_where_a_sibling_says_which(tmp_path, checked):
    tensors = llama_tensors()
    src = write_folder(tmp_path / "src", tensors)
    write_raw(src / "model.safetensors", tensors, metadata={"format": "pt"},
              edit=lambda h: h["model.layers.1.mlp.up_proj.weight"].update(shape=[16, 16]))
    report = checked(src)
    assert "as its siblings" in report.applied[0].summary
    out = safe_open_all(tmp_path / "fixed")
    np.testing.assert_array_equal(out["model.layers.1.mlp.up_proj.weight"],
                                  tensors["model.layers.1.mlp.up_proj.weight"])
    load_transformers(tmp_path / "fixed")


def test_ambiguous_size_mismatch_is_not_fixed(tmp_path):
    src = tmp_path / "m.safetensors"
    # F32 [3, 4] declared as [3, 2]: F64 fits the bytes but nothing else uses it; no sibling
    write_raw(src, SMALL, edit=lambda h: h["a"].update(shape=[3, 2]))
    plan = mx.repair_plan(src)
    assert not [f for f in plan.fixes if f.name == "fix_entry"]
    assert [u for u in plan.unfixable if u.code == "size_mismatch"]


def test_gaps_and_trailing_bytes_rewritten_contiguous(tmp_path, checked):
    src = tmp_path / "m.safetensors"
    write_raw(src, SMALL, gap_after="a")
    src.write_bytes(src.read_bytes() + b"junk")
    assert {"data_gap", "trailing_bytes"} <= codes(src)
    report = checked(src, tmp_path / "out")
    assert codes(tmp_path / "out" / "m.safetensors") == set()
    assert all(t.identical for t in report.tensors)


def test_entries_out_of_order_in_the_header(tmp_path, checked):
    src = tmp_path / "m.safetensors"

    def shuffle(h):
        items = list(h.items())
        h.clear()
        h.update(dict(reversed(items)))

    write_raw(src, SMALL, edit=shuffle, gap_after="b")
    checked(src, tmp_path / "out")
    out = safe_open_all(tmp_path / "out")
    for k, v in SMALL.items():
        np.testing.assert_array_equal(out[k], v)


def test_truncated_last_tensor_is_dropped_with_an_error(tmp_path, checked):
    src = tmp_path / "m.safetensors"
    write_raw(src, SMALL)
    src.write_bytes(src.read_bytes()[:-4])
    report = checked(src, tmp_path / "out")
    assert [f.name for f in report.applied] == ["drop_truncated"]
    assert len(report.errors) == 1 and "'c'" in report.errors[0]
    dropped = [t for t in report.tensors if t.changes == ["dropped"]]
    assert [t.source_name for t in dropped] == ["c"]
    assert set(safe_open_all(tmp_path / "out")) == {"a", "b"}


def test_overlap_is_listed_as_not_fixable(tmp_path):
    src = tmp_path / "m.safetensors"
    write_raw(src, {"a": SMALL["a"], "b": SMALL["b"]},
              edit=lambda h: h["b"].update(data_offsets=[40, 60]))
    plan = mx.repair_plan(src)
    assert any(u.code == "data_overlap" for u in plan.unfixable)


@pytest.mark.parametrize("fault", ["gap", "metadata"])
def test_llama_folder_with_a_header_fault_loads_in_transformers(tmp_path, checked, fault):
    kw = {"gap_after": "model.norm.weight"} if fault == "gap" else {}
    src = write_folder(tmp_path / "src", llama_tensors(), **kw)
    if fault == "metadata":
        write_raw(src / "model.safetensors", llama_tensors(), metadata={"format": "pt", "epoch": 3})
    checked(src)
    load_transformers(tmp_path / "fixed")
