"""GGUF: golden bytes (LE/BE, v2/v3), one test per diagnosis, and gguf-py on files it wrote."""

from __future__ import annotations

import struct

import gguf
import numpy as np
import pytest

import model_explorer as mx
from model_explorer.formats.gguf import GGUFArray, KeyValue

from .conftest import (
    ARRAY,
    F32,
    FLOAT32,
    INT32,
    Q4_0,
    STRING,
    UINT8,
    UINT32,
    UINT64,
    GGUFBuilder,
    codes,
    finding,
    open_bytes,
    small_gguf,
)


def open_gguf(tmp_path, blob: bytes, name: str = "model.gguf") -> mx.Checkpoint:
    return open_bytes(tmp_path, blob, name)


@pytest.mark.parametrize("bo", ["<", ">"])
@pytest.mark.parametrize("version", [2, 3])
def test_golden_file(tmp_path, bo, version):
    blob, b = small_gguf(bo, version)
    ckpt = open_gguf(tmp_path, blob)
    assert ckpt.format == "gguf" and not ckpt.errors and not ckpt.warnings
    assert codes(ckpt) == ({"big_endian"} if bo == ">" else set())

    a, t = ckpt.tensors["a"], ckpt.tensors["b"]
    data = b.offsets["data"]
    assert (a.dtype, a.shape, a.offset, a.length) == ("F32", (2, 4), data, 32)  # numpy order
    assert a.extra["ggml_dims"] == (4, 2)
    assert (t.dtype, t.shape, t.offset, t.length) == ("F32", (8,), data + 32, 32)
    assert np.frombuffer(blob[a.offset:a.end], bo + "f4").tolist() == list(range(8))

    md = ckpt.metadata
    assert isinstance(md["llama.block_count"], KeyValue)
    assert (md["llama.block_count"].type, md["llama.block_count"].value) == ("UINT32", 2)
    assert md["general.architecture"].value == "llama"
    tokens = md["tokenizer.ggml.tokens"]
    assert tokens.type == "ARRAY[STRING]" and isinstance(tokens.value, GGUFArray)
    assert len(tokens.value) == 3 and tokens.value[2] == "d\u00e9f" and tokens.value[-1] == "d\u00e9f"
    assert tokens.value.to_list() == ["a", "bc", "d\u00e9f"]
    for key in ("general.architecture", "llama.block_count", "tokenizer.ggml.tokens"):
        assert md[key].offset == b.offsets["kv:" + key]

    spans = ckpt.spans
    assert [s.offset for s in spans] == sorted(s.offset for s in spans)
    first = [(s.offset, s.length, s.kind) for s in spans[:4]]
    assert first == [(0, 4, "magic"), (4, 4, "version"), (8, 8, "count"), (16, 8, "count")]
    kv = [s for s in spans if s.kind == "kv"]
    assert [s.offset for s in kv] == [b.offsets["kv:" + k] for k in md]
    parts = [s.kind for s in spans if s.path.startswith("KV 1 ")]
    assert parts == ["kv", "key", "type", "value"]
    info = [s for s in spans if s.kind == "tensor_info"]
    assert [s.offset for s in info] == [b.offsets["ti:a"], b.offsets["ti:b"]]
    fields = [s.kind for s in spans if s.path.startswith("tensor 0 ")]
    assert fields == ["tensor_info", "key", "dims", "type", "offset"]
    pad = next(s for s in spans if s.kind == "padding")
    assert pad.end == data
    assert [(s.offset, s.length) for s in spans if s.kind == "tensor_data"] == [(data, 32), (data + 32, 32)]


def test_nested_and_numeric_arrays(tmp_path):
    b = GGUFBuilder(byteorder=">")
    inner = struct.pack(">IQ", UINT32, 2) + struct.pack(">II", 1, 2)
    inner2 = struct.pack(">IQ", STRING, 1) + struct.pack(">Q", 2) + b"hi"
    b.raw_kv("nested", struct.pack(">I", ARRAY) + struct.pack(">IQ", ARRAY, 2) + inner + inner2)
    b.kv("floats", ARRAY, [0.5, -1.0], FLOAT32).kv("ints", ARRAY, [-3, 7], INT32)
    ckpt = open_gguf(tmp_path, b.build())
    assert not ckpt.errors
    md = ckpt.metadata
    assert md["nested"].type == "ARRAY[ARRAY]" and md["nested"].value.to_list() == [[1, 2], ["hi"]]
    assert md["floats"].value.to_list() == [0.5, -1.0] and md["floats"].value[1] == -1.0
    ints = md["ints"].value.to_numpy()
    assert ints.dtype == np.int32 and ints.tolist() == [-3, 7]


# -- diagnoses ------------------------------------------------------------------------------

def test_bad_magic(tmp_path):
    blob, _ = small_gguf()
    ckpt = open_gguf(tmp_path, b"GGUX" + blob[4:])
    f = finding(ckpt, "bad_magic")
    assert (f.offset, f.length) == (0, 4)


@pytest.mark.parametrize("version", [1, 4, 0xFFFF])
def test_unsupported_version(tmp_path, version):
    blob, _ = small_gguf()
    f = finding(open_gguf(tmp_path, blob[:4] + struct.pack("<I", version) + blob[8:]), "unsupported_version")
    assert (f.offset, f.length) == (4, 4)


@pytest.mark.parametrize("cut", [6, 12, 30])
def test_truncated_header(tmp_path, cut):
    blob, _ = small_gguf()
    f = finding(open_gguf(tmp_path, blob[:cut]), "truncated")
    assert f.offset <= cut and f.severity == "error"


def test_truncated_inside_tensor_infos_keeps_what_was_read(tmp_path):
    blob, b = small_gguf()
    cut = b.offsets["ti:b"] + 8  # the name's length is there, the name is not
    ckpt = open_gguf(tmp_path, blob[:cut])
    f = finding(ckpt, "string_past_end")  # the name of tensor "b" is cut
    assert f.offset == b.offsets["ti:b"]
    assert list(ckpt.tensors) == ["a"] and ckpt.tensors["a"].shape == (2, 4)
    assert finding(ckpt, "tensors_unplaced").offset == b.offsets["ti:a"]
    assert ckpt.metadata["llama.block_count"].value == 2


def test_truncated_inside_key_values_keeps_earlier_ones(tmp_path):
    blob, b = small_gguf()
    ckpt = open_gguf(tmp_path, blob[:b.offsets["kv:tokenizer.ggml.tokens"] + 3])
    assert finding(ckpt, "truncated").offset == b.offsets["kv:tokenizer.ggml.tokens"]
    assert set(ckpt.metadata) == {"general.architecture", "llama.block_count"}


def test_string_length_past_end(tmp_path):
    b = GGUFBuilder().kv("general.name", STRING, "x")
    blob = bytearray(b.build())
    at = b.offsets["kv:general.name"] + 8 + len("general.name") + 4  # the value's length field
    blob[at:at + 8] = struct.pack("<Q", 2**60)
    f = finding(open_gguf(tmp_path, bytes(blob)), "string_past_end")
    assert (f.offset, f.length) == (at, 8)


def test_key_length_past_end(tmp_path):
    b = GGUFBuilder().kv("k", UINT8, 1)
    blob = bytearray(b.build())
    blob[24:32] = struct.pack("<Q", 2**63)
    assert finding(open_gguf(tmp_path, bytes(blob)), "string_past_end").offset == 24


def test_array_length_past_end(tmp_path):
    b = GGUFBuilder().kv("scores", ARRAY, [1.0, 2.0], FLOAT32)
    blob = bytearray(b.build())
    at = b.offsets["kv:scores"] + 8 + len("scores") + 4 + 4  # after key, type, element type
    blob[at:at + 8] = struct.pack("<Q", 2**61)
    f = finding(open_gguf(tmp_path, bytes(blob)), "array_past_end")
    assert (f.offset, f.length) == (at, 8)


def test_string_array_length_past_end(tmp_path):
    b = GGUFBuilder().kv("tokens", ARRAY, ["a", "b"], STRING)
    blob = bytearray(b.build())
    at = b.offsets["kv:tokens"] + 8 + len("tokens") + 8
    blob[at:at + 8] = struct.pack("<Q", 2**62)
    assert finding(open_gguf(tmp_path, bytes(blob)), "array_past_end").offset == at


def test_string_inside_array_past_end(tmp_path):
    b = GGUFBuilder().kv("tokens", ARRAY, ["a", "b"], STRING)
    blob = bytearray(b.build())
    second = b.offsets["kv:tokens"] + 8 + len("tokens") + 4 + 12 + 9  # second string's length
    blob[second:second + 8] = struct.pack("<Q", 2**40)
    f = finding(open_gguf(tmp_path, bytes(blob)), "string_past_end")
    assert (f.offset, f.length) == (second, 8)


def test_nested_array_count_past_end(tmp_path):
    b = GGUFBuilder().raw_kv("n", struct.pack("<IIQ", ARRAY, ARRAY, 2**50))
    assert finding(open_gguf(tmp_path, b.build()), "array_past_end").offset == b.offsets["kv:n"] + 9 + 8


def test_arrays_nested_too_deep(tmp_path):
    body = struct.pack("<I", ARRAY) + struct.pack("<IQ", ARRAY, 1) * 20 + struct.pack("<IQ", UINT8, 0)
    ckpt = open_gguf(tmp_path, GGUFBuilder().raw_kv("deep", body).build())
    assert "array_too_deep" in codes(ckpt)


def test_unknown_value_type(tmp_path):
    b = GGUFBuilder().kv("ok", UINT8, 1).raw_kv("bad", struct.pack("<I", 13) + b"\0" * 8)
    b.tensor("t", [4], F32, 0)
    ckpt = open_gguf(tmp_path, b.build(b"\0" * 16))
    f = finding(ckpt, "unknown_value_type")
    assert f.offset == b.offsets["kv:bad"] + 8 + 3
    assert ckpt.metadata["ok"].value == 1


def test_unknown_ggml_type_keeps_other_tensors(tmp_path):
    b = GGUFBuilder().kv("general.architecture", STRING, "x")
    b.tensor("a", [4], F32, 0).tensor("odd", [4], 77, 32).tensor("c", [4], F32, 64)
    ckpt = open_gguf(tmp_path, b.build(b"\0" * 80))
    f = finding(ckpt, "unknown_tensor_type")
    assert (f.offset, f.tensor) == (b.offsets["ti:odd"], "odd")
    assert list(ckpt.tensors) == ["a", "odd", "c"]
    assert ckpt.tensors["odd"].dtype == "GGML_TYPE_77" and ckpt.tensors["c"].length == 16


def test_more_than_four_dims(tmp_path):
    b = GGUFBuilder().tensor("t", [1, 1, 1, 1, 2], F32, 0)
    ckpt = open_gguf(tmp_path, b.build(b"\0" * 8))
    f = finding(ckpt, "too_many_dims")
    assert f.offset == b.offsets["ti:t"] + 8 + 1
    assert ckpt.tensors["t"].shape == (2, 1, 1, 1, 1)


def test_absurd_dimension_count_stops_the_header(tmp_path):
    # A million u64 dims fit in 8 MB; multiplying them out would take hours.
    b = GGUFBuilder().tensor("a", [4], F32, 0).tensor("t", [3] * 1_000_000, F32, 32)
    ckpt = open_gguf(tmp_path, b.build(b"\0" * 64))
    f = finding(ckpt, "too_many_dims")
    assert f.offset == b.offsets["ti:t"] + 8 + 1 and "not read" in f.message
    assert list(ckpt.tensors) == ["a"]


def test_misaligned_tensor(tmp_path):
    b = GGUFBuilder().tensor("a", [1], F32, 0).tensor("b", [1], F32, 4)
    ckpt = open_gguf(tmp_path, b.build(b"\0" * 8))
    f = finding(ckpt, "misaligned")
    assert (f.offset, f.tensor) == (b.offsets["data"] + 4, "b")


def test_overlapping_tensors(tmp_path):
    b = GGUFBuilder().tensor("a", [16], F32, 0).tensor("b", [8], F32, 32)
    ckpt = open_gguf(tmp_path, b.build(b"\0" * 64))
    f = finding(ckpt, "data_overlap")
    assert (f.offset, f.length, f.tensor) == (b.offsets["data"] + 32, 32, "b")


def test_tensor_past_end(tmp_path):
    # b's offset leaves a hole after a: a wrong header, not a file cut short (one `truncated`)
    b = GGUFBuilder().tensor("a", [8], F32, 0).tensor("b", [8], F32, 64)
    ckpt = open_gguf(tmp_path, b.build(b"\0" * 72))
    f = finding(ckpt, "data_past_end")
    assert (f.offset, f.tensor) == (b.offsets["data"] + 64, "b")
    assert "truncated" not in codes(ckpt)


def test_bad_block_shape(tmp_path):
    b = GGUFBuilder().tensor("q", [48], Q4_0, 0)
    f = finding(open_gguf(tmp_path, b.build(b"\0" * 64)), "bad_block_shape")
    assert f.offset == b.offsets["ti:q"]


@pytest.mark.parametrize("alignment", [0, 3, 48])
def test_bad_alignment(tmp_path, alignment):
    b = GGUFBuilder().kv("general.alignment", UINT32, alignment).tensor("a", [8], F32, 0)
    ckpt = open_gguf(tmp_path, b.build(b"\0" * 32))
    f = finding(ckpt, "bad_alignment")
    assert (f.offset, f.length) == (b.offsets["kv:general.alignment"], 8 + 17 + 4 + 4)
    assert ckpt.tensors["a"].offset == b.offsets["data"]  # the default 32 is used


def test_custom_alignment(tmp_path):
    b = GGUFBuilder().kv("general.alignment", UINT32, 64).tensor("a", [8], F32, 0).tensor("b", [8], F32, 64)
    blob = b.build(alignment=64) + b"\0" * 96
    ckpt = open_gguf(tmp_path, blob)
    assert not ckpt.errors and ckpt.tensors["b"].offset == b.offsets["data"] + 64


def test_alignment_of_wrong_type_is_a_warning(tmp_path):
    b = GGUFBuilder().kv("general.alignment", UINT64, 32).tensor("a", [8], F32, 0)
    assert finding(open_gguf(tmp_path, b.build(b"\0" * 32)), "alignment_type").severity == "warning"


def test_duplicate_tensor_name(tmp_path):
    b = GGUFBuilder().tensor("a", [8], F32, 0).tensor("a", [8], F32, 32)
    f = finding(open_gguf(tmp_path, b.build(b"\0" * 64)), "duplicate_tensor")
    assert f.offset == b.offsets["ti:a"]  # the builder remembers the second


def test_duplicate_key(tmp_path):
    b = GGUFBuilder().kv("k", UINT8, 1)
    b.kvs.append(b.kvs[0])
    ckpt = open_gguf(tmp_path, b.build())
    assert finding(ckpt, "duplicate_key").offset == 24 + len(b.kvs[0][1])


def test_invalid_utf8_key_is_shown_with_a_warning(tmp_path):
    b = GGUFBuilder()
    b.kvs.append(("bad", struct.pack("<Q", 2) + b"\xff\xfe" + struct.pack("<IB", UINT8, 5)))
    ckpt = open_gguf(tmp_path, b.build())
    assert finding(ckpt, "bad_utf8").offset == 24
    assert [kv.value for kv in ckpt.metadata.values()] == [5]


def test_huge_counts_do_not_hang(tmp_path):
    b = GGUFBuilder(n_tensors=2**62, n_kv=2**62).kv("k", UINT8, 1)
    ckpt = open_gguf(tmp_path, b.build())
    assert ckpt.errors and ckpt.metadata["k"].value == 1


def test_misnamed_gguf_is_read_with_an_info_finding(tmp_path):
    blob, _ = small_gguf()
    ckpt = open_gguf(tmp_path, blob, "model.safetensors")
    assert ckpt.format == "gguf" and len(ckpt.tensors) == 2
    assert finding(ckpt, "extension_mismatch").severity == "info"


# -- differential: gguf-py on files it wrote ------------------------------------------------

def _write_reference(path, endian) -> None:
    w = gguf.GGUFWriter(str(path), "llama", endianess=endian)
    w.add_uint8("t.u8", 200)
    w.add_int8("t.i8", -100)
    w.add_uint16("t.u16", 60000)
    w.add_int16("t.i16", -30000)
    w.add_uint32("t.u32", 4_000_000_000)
    w.add_int32("t.i32", -2_000_000_000)
    w.add_float32("t.f32", 0.25)
    w.add_uint64("t.u64", 2**63 + 5)
    w.add_int64("t.i64", -(2**62))
    w.add_float64("t.f64", 1e-300)
    w.add_bool("t.bool", True)
    w.add_string("t.str", "h\u00e9llo \U0001F600")
    w.add_string("t.empty", "")
    w.add_array("t.arr_str", ["x", "", "\u00fc\u00f1\u00ee"])
    w.add_array("t.arr_i32", [1, -2, 3])
    w.add_array("t.arr_f32", [0.5, 1.5])
    w.add_array("t.arr_bool", [True, False, True])
    w.add_key_value("t.arr_u8", [1, 2, 255], gguf.GGUFValueType.ARRAY, sub_type=gguf.GGUFValueType.UINT8)
    w.add_key_value("t.arr_i64", [-1, 2**40], gguf.GGUFValueType.ARRAY, sub_type=gguf.GGUFValueType.INT64)
    w.add_key_value("t.arr_f64", [2.5], gguf.GGUFValueType.ARRAY, sub_type=gguf.GGUFValueType.FLOAT64)
    w.add_array("t.arr_empty", [])
    rng = np.random.default_rng(1)
    w.add_tensor("f32", rng.standard_normal((3, 5)).astype(np.float32))
    w.add_tensor("f16", rng.standard_normal((7,)).astype(np.float16))
    w.add_tensor("i32", np.arange(24, dtype=np.int32).reshape(2, 3, 4))
    w.add_tensor("q8", rng.integers(0, 255, (2, 34 * 2), dtype=np.uint8),
                 raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    w.add_tensor("q4k", rng.integers(0, 255, (4, 144), dtype=np.uint8),
                 raw_dtype=gguf.GGMLQuantizationType.Q4_K)
    w.add_tensor("bf16", rng.integers(0, 2**16, (2, 2, 2, 3), dtype=np.uint16).view(np.uint16),
                 raw_dtype=gguf.GGMLQuantizationType.BF16)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def _compare_with_reader(ckpt: mx.Checkpoint, ref: gguf.GGUFReader) -> None:
    assert [t.name for t in ref.tensors] == list(ckpt.tensors)
    for rt in ref.tensors:
        t = ckpt.tensors[rt.name]
        assert t.dtype == rt.tensor_type.name, rt.name
        assert t.shape == tuple(int(d) for d in reversed(rt.shape)), rt.name
        assert (t.offset, t.length) == (rt.data_offset, rt.n_bytes), rt.name
    fields = {k: f for k, f in ref.fields.items() if not k.startswith("GGUF.")}
    assert list(fields) == list(ckpt.metadata)
    for key, f in fields.items():
        kv = ckpt.metadata[key]
        assert kv.offset == f.offset, key
        assert kv.length == sum(int(p.nbytes) for p in f.parts), key
        ours = kv.value.to_list() if isinstance(kv.value, GGUFArray) else kv.value
        theirs = f.contents()
        if f.types[0] == gguf.GGUFValueType.ARRAY:
            assert kv.type == f"ARRAY[{f.types[-1].name}]", key
        else:
            assert kv.type == f.types[0].name, key
        if isinstance(theirs, float) or (isinstance(theirs, list) and theirs and isinstance(theirs[0], float)):
            assert np.allclose(ours, theirs), key
        else:
            assert ours == theirs, key


@pytest.mark.parametrize("endian", [gguf.GGUFEndian.LITTLE, gguf.GGUFEndian.BIG])
def test_matches_gguf_py(tmp_path, endian):
    path = tmp_path / "ref.gguf"
    _write_reference(path, endian)
    ckpt = mx.open(str(path))
    assert not ckpt.errors and not ckpt.warnings, [str(f) for f in ckpt.findings]
    ref = gguf.GGUFReader(str(path))
    _compare_with_reader(ckpt, ref)
    order = ">" if endian == gguf.GGUFEndian.BIG else "<"
    assert ckpt.details["files"][str(path)]["byteorder"] == order
    assert {t.byteorder for t in ckpt.tensors.values()} == {order}
    # the bytes at our offsets are the tensors gguf-py decodes
    for rt in ref.tensors:
        t = ckpt.tensors[rt.name]
        assert ckpt.read_bytes(t.offset, t.length) == rt.data.tobytes(), rt.name


def test_smollm2_sample_matches_gguf_py():
    path = mx.sample_path()
    ckpt = mx.open(path)
    assert ckpt.format == "gguf" and ckpt.findings == []
    assert len(ckpt.tensors) == 272
    _compare_with_reader(ckpt, gguf.GGUFReader(path))
    tokens = ckpt.metadata["tokenizer.ggml.tokens"].value
    assert len(tokens) == 49152 and tokens[0] == "<|endoftext|>"
    assert ckpt.dtype_mix()["Q4_1"] > 100


def _offsets_by_hand(blob: bytes, first: int, count: int, bo: str) -> list[int]:
    out, pos = [], first
    for _ in range(count):
        out.append(pos)
        pos += 8 + struct.unpack_from(bo + "Q", blob, pos)[0]
    return out


@pytest.mark.parametrize("bo", ["<", ">"])
def test_string_arrays_walked_with_numpy_keep_every_offset(tmp_path, bo):
    """The vocabulary walk finds runs of short strings with numpy: empty strings, strings of 256
    bytes and more, NUL bytes inside text (seven in a row look like a short length) and
    thousands of ordinary tokens give the same offsets as a walk string by string."""
    rng = np.random.default_rng(0)
    tokens = [f"\u0120tok{i}" for i in range(5000)]
    for i in rng.choice(5000, 300, replace=False):
        tokens[i] = rng.choice(["", "x" * 256, "y" * 1000, "a\0\0\0\0\0\0\0\0b", "\0" * 7,
                                "\0" * 9 + "z", "é" * 200])
    b = GGUFBuilder(byteorder=bo).kv("general.architecture", STRING, "llama")
    b.kv("tokenizer.ggml.tokens", ARRAY, tokens, STRING).kv("tokenizer.ggml.merges", ARRAY, ["a b"] * 3000, STRING)
    blob = b.build()
    ckpt = open_gguf(tmp_path, blob)
    assert not ckpt.errors
    arr = ckpt.metadata["tokenizer.ggml.tokens"].value
    first = b.offsets["kv:tokenizer.ggml.tokens"] + 8 + len("tokenizer.ggml.tokens") + 4 + 4 + 8
    assert list(arr._string_offsets) == _offsets_by_hand(blob, first, len(tokens), bo)
    assert arr.to_list() == tokens and arr[4999] == tokens[4999]
    assert ckpt.metadata["tokenizer.ggml.merges"].value.to_list() == ["a b"] * 3000


def test_a_string_cut_short_inside_a_run_of_short_ones(tmp_path):
    """A length that runs past the end, met in the middle of short strings, is the same finding
    at the same byte as before the walk used numpy."""
    b = GGUFBuilder().kv("tokenizer.ggml.tokens", ARRAY, [f"t{i}" for i in range(2000)], STRING)
    blob = bytearray(b.build())
    first = b.offsets["kv:tokenizer.ggml.tokens"] + 8 + len("tokenizer.ggml.tokens") + 4 + 4 + 8
    at = _offsets_by_hand(bytes(blob), first, 1500, "<")[-1]
    blob[at:at + 8] = struct.pack("<Q", 10**9)  # string 1499 claims a gigabyte
    ckpt = open_gguf(tmp_path, bytes(blob))
    f = next(f for f in ckpt.errors if f.code == "string_past_end")
    assert (f.offset, f.length) == (at, 8)
