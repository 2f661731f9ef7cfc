"""Safetensors: golden bytes, one test per diagnosis (code and offset), and the reference reader."""

from __future__ import annotations

import json
import struct

import ml_dtypes
import numpy as np
import pytest
import safetensors.numpy
from safetensors import safe_open

import model_explorer as mx
from model_explorer.formats.jsonpos import members

from .conftest import codes, finding, open_bytes, st_bytes, st_entry


def _golden() -> tuple[bytes, bytes]:
    header = {"__metadata__": {"format": "pt"},
              "a": st_entry("F32", [2, 2], 0, 16),
              "b": st_entry("F16", [4], 16, 24)}
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    data = np.arange(4, dtype="<f4").tobytes() + np.ones(4, dtype="<f2").tobytes()
    return st_bytes(raw, data), raw


def test_golden_file_tensors_metadata_and_spans(tmp_path):
    blob, raw = _golden()
    ckpt = open_bytes(tmp_path, blob)
    assert ckpt.format == "safetensors" and ckpt.findings == []
    assert list(ckpt.tensors) == ["a", "b"]
    data_start = 8 + len(raw)
    a, b = ckpt.tensors["a"], ckpt.tensors["b"]
    assert (a.dtype, a.shape, a.offset, a.length) == ("F32", (2, 2), data_start, 16)
    assert (b.dtype, b.shape, b.offset, b.length) == ("F16", (4,), data_start + 16, 8)
    assert blob[a.offset:a.end] == np.arange(4, dtype="<f4").tobytes()
    assert ckpt.metadata == {"format": "pt"}

    spans = ckpt.spans
    assert [s.offset for s in spans] == sorted(s.offset for s in spans)
    by_kind = {}
    for s in spans:
        by_kind.setdefault(s.kind, []).append(s)
    assert (by_kind["length"][0].offset, by_kind["length"][0].length) == (0, 8)
    assert (by_kind["json"][0].offset, by_kind["json"][0].length) == (8, len(raw))
    # each tensor entry is located inside the JSON: the span starts at the quoted name
    for name in ("a", "b"):
        entry = next(s for s in by_kind["tensor_info"] if s.tensor == name)
        text = blob[entry.offset:entry.end]
        assert text.startswith(f'"{name}":'.encode()) and text.endswith(b"}")
        assert json.loads(b"{" + text + b"}")[name]["data_offsets"] == json.loads(raw)[name]["data_offsets"]
    pad = by_kind["padding"][0]
    assert pad.end == data_start and set(blob[pad.offset:pad.end]) == {ord(" ")}
    assert [(s.offset, s.length) for s in by_kind["tensor_data"]] == [(data_start, 16), (data_start + 16, 8)]
    meta = by_kind["metadata"][0]
    assert blob[meta.offset:meta.end].startswith(b'"__metadata__"')


def test_non_ascii_names_and_unicode_escapes(tmp_path):
    # raw UTF-8 names, a \u escape that encodes a UTF-8-looking pair, and an escaped astral char
    raw = ('{"w\u00e9.\u00f1":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},'
           '"\\u00c3\\u00a9":{"dtype":"U8","shape":[1],"data_offsets":[1,2]},'
           '"e\u20ac\\ud83d\\ude00":{"dtype":"U8","shape":[1],"data_offsets":[2,3]}}').encode()
    blob = st_bytes(raw, b"xyz")
    ckpt = open_bytes(tmp_path, blob)
    assert list(ckpt.tensors) == list(json.loads(raw))
    assert list(ckpt.tensors) == ["w\u00e9.\u00f1", "\u00c3\u00a9", "e\u20ac\U0001F600"]
    assert not ckpt.errors
    for s in ckpt.spans:
        if s.kind == "key":
            assert json.loads(blob[s.offset:s.end]) == s.tensor
    assert [ckpt.read_bytes(t.offset, t.length) for t in ckpt.tensors.values()] == [b"x", b"y", b"z"]


def test_jsonpos_members_match_json_loads():
    text = json.dumps({"\u00e9": {"k\u00fc": [1, "\u00f6"]}, "b": "\\u0041", "c": None}, ensure_ascii=False)
    ms, end = members(text.encode().decode("latin-1"))
    assert {m.key: m.value for m in ms} == json.loads(text)
    assert end == len(text.encode())


def test_sub_byte_dtype_sizes(tmp_path):
    # F4 is 4 bits: 6 elements take 3 bytes; F6 takes 6 bits: 4 elements take 3 bytes
    blob = st_bytes({"f4": st_entry("F4", [2, 3], 0, 3), "f6": st_entry("F6_E2M3", [4], 3, 6)}, b"\0" * 6)
    assert open_bytes(tmp_path, blob).findings == []


def test_zero_length_tensors_do_not_count_as_gaps_or_overlaps(tmp_path):
    header = {"empty_first": st_entry("F32", [0], 0, 0),
              "a": st_entry("F32", [2], 0, 8),
              "empty_mid": st_entry("F32", [0, 3], 8, 8),
              "b": st_entry("F32", [1], 8, 12),
              "empty_end": st_entry("I8", [0], 12, 12)}
    ckpt = open_bytes(tmp_path, st_bytes(header, b"\0" * 12))
    assert ckpt.findings == []
    assert ckpt.tensors["empty_mid"].length == 0


def test_empty_header_and_scalar_tensor(tmp_path):
    assert open_bytes(tmp_path, st_bytes("{}")).findings == []
    ckpt = open_bytes(tmp_path, st_bytes({"s": st_entry("F64", [], 0, 8)}, b"\0" * 8), "s.safetensors")
    assert ckpt.findings == [] and ckpt.tensors["s"].shape == ()


# -- diagnoses: one test each, asserting the code and the offset ---------------------------

def test_truncated_before_length(tmp_path):
    f = finding(open_bytes(tmp_path, b"\x10\0\0\0\0"), "truncated")
    assert (f.severity, f.offset) == ("error", 0)


def test_truncated_inside_data(tmp_path):
    blob = st_bytes({"a": st_entry("F32", [4], 0, 16)}, b"\0" * 16)
    ckpt = open_bytes(tmp_path, blob[:-5])
    f = finding(ckpt, "truncated")  # one finding at the end of the file (tests/foundation/test_truncated.py)
    assert (f.offset, f.tensor) == (len(blob) - 5, "a")
    assert "a" in ckpt.tensors  # still listed


def test_truncated_inside_header(tmp_path):
    blob = st_bytes({"a": st_entry("F32", [1], 0, 4)}, b"\0" * 4)
    ckpt = open_bytes(tmp_path, blob[:20])
    assert finding(ckpt, "header_past_end").offset == 0
    # the JSON breaks off inside a string: the finding points at where that string starts
    assert finding(ckpt, "header_not_json").offset == 8 + blob[8:].index(b'"dtype')


def test_header_length_past_end(tmp_path):
    blob = st_bytes(b'{"a":1}', length=1000)
    f = finding(open_bytes(tmp_path, blob), "header_past_end")
    assert (f.offset, f.length) == (0, 8)


def test_absurd_header_length(tmp_path):
    blob = struct.pack("<Q", 2**62) + b"{}"
    ckpt = open_bytes(tmp_path, blob)
    f = finding(ckpt, "header_too_large")
    assert (f.severity, f.offset, f.length) == ("error", 0, 8)
    assert ckpt.format == "safetensors"


def test_header_not_json(tmp_path):
    raw = b'{"a": {"dtype": "F32",, }}'
    f = finding(open_bytes(tmp_path, st_bytes(raw)), "header_not_json")
    assert f.offset == 8 + raw.index(b",,") + 1


def test_header_not_utf8(tmp_path):
    raw = b'{"__metadata__": {"x": "\xff\xfe"}}'
    f = finding(open_bytes(tmp_path, st_bytes(raw)), "header_not_utf8")
    assert (f.offset, f.length) == (8 + raw.index(b"\xff"), 1)


@pytest.mark.parametrize("raw", [b"[1, 2]", b'"text"', b"42"])
def test_header_not_an_object(tmp_path, raw):
    f = finding(open_bytes(tmp_path, st_bytes(raw)), "header_not_object")
    assert f.offset == 8


def test_duplicate_tensor_keys(tmp_path):
    raw = (b'{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},'
           b'"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}')
    ckpt = open_bytes(tmp_path, st_bytes(raw, b"xy"))
    f = finding(ckpt, "duplicate_key")
    assert (f.offset, f.tensor) == (8 + raw.rindex(b'"a"'), "a")
    assert ckpt.tensors["a"].length == 1


def test_duplicate_field_inside_an_entry(tmp_path):
    raw = b'{"a":{"dtype":"U8","dtype":"I8","shape":[1],"data_offsets":[0,1]}}'
    f = finding(open_bytes(tmp_path, st_bytes(raw, b"x")), "duplicate_key")
    assert f.offset == 8 + raw.index(b"{", 1) and "dtype" in f.message


def test_overlapping_data_offsets(tmp_path):
    blob = st_bytes({"a": st_entry("F32", [2], 0, 8), "b": st_entry("F32", [2], 4, 12)}, b"\0" * 12)
    ckpt = open_bytes(tmp_path, blob)
    f = finding(ckpt, "data_overlap")
    assert (f.offset, f.length, f.tensor) == (ckpt.tensors["b"].offset, 4, "b")


def test_gap_between_tensors(tmp_path):
    blob = st_bytes({"a": st_entry("F32", [1], 0, 4), "b": st_entry("F32", [1], 8, 12)}, b"\0" * 12)
    ckpt = open_bytes(tmp_path, blob)
    f = finding(ckpt, "data_gap")
    assert (f.offset, f.length) == (ckpt.tensors["a"].end, 4)


def test_gap_before_first_tensor(tmp_path):
    blob = st_bytes({"a": st_entry("F32", [1], 4, 8)}, b"\0" * 8)
    ckpt = open_bytes(tmp_path, blob)
    assert finding(ckpt, "data_gap").offset == ckpt.tensors["a"].offset - 4


def test_offsets_past_end_of_file(tmp_path):
    # b's offsets leave a hole: a wrong header, not a file cut short (that is one `truncated`)
    blob = st_bytes({"a": st_entry("F32", [2], 0, 8), "b": st_entry("F32", [2], 16, 24)}, b"\0" * 8)
    ckpt = open_bytes(tmp_path, blob)
    f = finding(ckpt, "data_past_end")
    assert (f.offset, f.tensor) == (len(blob) + 8, "b")
    assert "truncated" not in codes(ckpt)


def test_offsets_far_past_end_stay_bounded(tmp_path):
    blob = st_bytes({"a": st_entry("U8", [2**40], 2**50, 2**50 + 2**40)}, b"\0" * 8)
    ckpt = open_bytes(tmp_path, blob)
    assert {"data_past_end", "data_gap"} <= codes(ckpt)
    # no span claims bytes the file does not have
    assert all(s.end <= len(blob) for s in ckpt.spans)


def test_trailing_bytes_after_last_tensor(tmp_path):
    blob = st_bytes({"a": st_entry("F32", [1], 0, 4)}, b"\0" * 10)
    f = finding(open_bytes(tmp_path, blob), "trailing_bytes")
    assert (f.severity, f.offset, f.length) == ("warning", len(blob) - 6, 6)


def test_shape_times_dtype_size_mismatch(tmp_path):
    raw = json.dumps({"a": st_entry("F32", [3], 0, 8)}).encode()
    ckpt = open_bytes(tmp_path, st_bytes(raw, b"\0" * 8))
    f = finding(ckpt, "size_mismatch")
    assert (f.offset, f.tensor) == (8 + raw.index(b'"a"'), "a")
    assert "12" in f.message and "8" in f.message


def test_negative_shape(tmp_path):
    raw = json.dumps({"a": st_entry("F32", [-1, 2], 0, 8)}).encode()
    f = finding(open_bytes(tmp_path, st_bytes(raw, b"\0" * 8)), "negative_shape")
    assert f.offset == 8 + raw.index(b'"a"')


def test_unknown_dtype(tmp_path):
    raw = json.dumps({"ok": st_entry("U8", [1], 0, 1), "a": st_entry("Q9", [2], 1, 3)}).encode()
    ckpt = open_bytes(tmp_path, st_bytes(raw, b"\0" * 3))
    f = finding(ckpt, "unknown_dtype")
    assert (f.offset, f.tensor) == (8 + raw.index(b'"a"'), "a")
    assert ckpt.tensors["a"].dtype == "Q9" and "ok" in ckpt.tensors


def test_huge_shape(tmp_path):
    raw = json.dumps({"a": st_entry("F32", [2**40, 2**40], 0, 4)}).encode()
    f = finding(open_bytes(tmp_path, st_bytes(raw, b"\0" * 4)), "shape_too_large")
    assert f.offset == 8 + raw.index(b'"a"')


@pytest.mark.parametrize("shape", [[2] * 1_000_000, [10**4000, 10**4000]])
def test_absurd_shapes_are_findings(tmp_path, shape):
    # A million dimensions took minutes to multiply out; a 8000-digit element count made the
    # message itself raise. Both must be a finding, at once.
    raw = json.dumps({"a": st_entry("F32", shape, 0, 4)}).encode()
    ckpt = open_bytes(tmp_path, st_bytes(raw, b"\0" * 4))
    f = finding(ckpt, "shape_too_large")
    assert f.offset == 8 + raw.index(b'"a"') and len(ckpt.tensors["a"].shape) <= 2


def test_integer_too_long_to_parse(tmp_path):
    raw = b'{"a": {"dtype": "F32", "shape": [' + b"1" * 5000 + b'], "data_offsets": [0, 4]}}'
    f = finding(open_bytes(tmp_path, st_bytes(raw, b"\0" * 4)), "header_not_json")
    assert f.offset == 8 + raw.index(b"{", 1)


@pytest.mark.parametrize("entry, code", [
    ({"dtype": "F32", "shape": [1]}, "bad_tensor_entry"),
    ("not an object", "bad_tensor_entry"),
    ({"dtype": 7, "shape": [1], "data_offsets": [0, 4]}, "bad_dtype"),
    ({"dtype": "F32", "shape": "1", "data_offsets": [0, 4]}, "bad_shape"),
    ({"dtype": "F32", "shape": [1.5], "data_offsets": [0, 4]}, "bad_shape"),
    ({"dtype": "F32", "shape": [1], "data_offsets": [4]}, "bad_offsets"),
    ({"dtype": "F32", "shape": [1], "data_offsets": [4, 0]}, "bad_offsets"),
])
def test_malformed_entries(tmp_path, entry, code):
    raw = json.dumps({"a": entry}).encode()
    f = finding(open_bytes(tmp_path, st_bytes(raw, b"\0" * 4)), code)
    assert f.offset == 8 + raw.index(b'"a"')


def test_trailing_garbage_after_json(tmp_path):
    raw = b'{}  x '
    f = finding(open_bytes(tmp_path, st_bytes(raw)), "header_trailing_garbage")
    assert f.offset == 8 + 2


def test_metadata_not_strings(tmp_path):
    raw = json.dumps({"__metadata__": {"n": 3}}).encode()
    f = finding(open_bytes(tmp_path, st_bytes(raw)), "metadata_not_string")
    assert f.severity == "error" and f.offset == 8 + raw.index(b"{", 1)


def test_misnamed_file_reads_with_info_finding(tmp_path):
    blob, _ = _golden()
    ckpt = open_bytes(tmp_path, blob, "weights.gguf")
    assert ckpt.format == "safetensors" and len(ckpt.tensors) == 2
    f = finding(ckpt, "extension_mismatch")
    assert (f.severity, f.offset) == ("info", 0)


# -- differential: the safetensors reference on files it wrote ------------------------------

def test_matches_reference_reader(tmp_path):
    rng = np.random.default_rng(0)
    arrays = {f"layer.{i}.{dt}": rng.integers(0, 100, size=(i + 1, 3)).astype(dt)
              for i, dt in enumerate(["bool", "uint8", "int8", "int16", "uint16", "float16", "int32",
                                      "uint32", "float32", "int64", "uint64", "float64", "complex64"])}
    arrays["bf16"] = np.arange(5, dtype=np.float32).astype(ml_dtypes.bfloat16)
    arrays["scalar"] = np.array(3.5, dtype=np.float32)
    arrays["empty"] = np.zeros((0, 4), dtype=np.float32)
    arrays["caf\u00e9 \u2603"] = np.ones(3, dtype=np.float32)
    meta = {"format": "np", "\u00fc": "\u00f6 \U0001F600"}
    path = str(tmp_path / "ref.safetensors")
    safetensors.numpy.save_file(arrays, path, metadata=meta)

    ckpt = mx.open(path)
    assert ckpt.findings == []
    with safe_open(path, framework="numpy") as ref:
        assert ckpt.metadata == ref.metadata()
        assert sorted(ckpt.tensors) == sorted(ref.keys())
        blob = open(path, "rb").read()
        for name in ref.keys():
            t, r = ckpt.tensors[name], ref.get_slice(name)
            assert (t.dtype, list(t.shape)) == (r.get_dtype(), r.get_shape()), name
            expected = ref.get_tensor(name)
            assert blob[t.offset:t.end] == np.ascontiguousarray(expected).tobytes(), name


def test_any_json_whitespace_pads_the_header(tmp_path):
    # the reference reader accepts trailing JSON whitespace, not only spaces
    ckpt = open_bytes(tmp_path, st_bytes(b'{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}\n\t ', b"x"))
    assert ckpt.findings == [] and [s.kind for s in ckpt.spans].count("padding") == 1


def test_metadata_not_an_object(tmp_path):
    raw = b'{"__metadata__":["x"]}'
    f = finding(open_bytes(tmp_path, st_bytes(raw)), "metadata_not_object")
    assert f.offset == 8 + raw.index(b"[")


def test_zero_length_tensor_inside_another_is_an_overlap(tmp_path):
    # the reference reader sorts by data_offsets and rejects [8, 8] after [0, 16]
    blob = st_bytes({"a": st_entry("F32", [4], 0, 16), "z": st_entry("F32", [0], 8, 8)}, b"\0" * 16)
    ckpt = open_bytes(tmp_path, blob)
    f = finding(ckpt, "data_overlap")
    assert (f.tensor, f.offset) == ("z", ckpt.tensors["z"].offset)
