"""Hostile ONNX bytes: lengths past the end, varints that never end, deep nesting, huge dims,
unknown types, files cut short. Each is a finding at its bytes, never a traceback, and nothing
is allocated by a length the file states."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import model_explorer as mx
from model_explorer.formats.onnx import read_onnx
from model_explorer.formats.onnx import reader as onnx_reader
from model_explorer.sources import open_source

from . import models

onnx = pytest.importorskip("onnx")
from onnx import helper, numpy_helper  # noqa: E402


def _key(number: int, wire: int) -> bytes:
    return _varint(number << 3 | wire)


def _varint(v: int) -> bytes:
    out = bytearray()
    while True:
        b, v = v & 0x7F, v >> 7
        out.append(b | (0x80 if v else 0))
        if not v:
            return bytes(out)


def _len(number: int, payload: bytes) -> bytes:
    return _key(number, 2) + _varint(len(payload)) + payload


def _model_bytes(graph: bytes) -> bytes:
    return _key(1, 0) + _varint(9) + _len(2, b"hostile") + _len(7, graph)


def _read(tmp_path, raw: bytes, name="h.onnx"):
    path = tmp_path / name
    path.write_bytes(raw)
    src = open_source(str(path))
    try:
        result = read_onnx(src)
    finally:
        src.close()
    return result, [(f.code, f.offset) for f in result.report.findings]


def _codes(found):
    return [c for c, _ in found]


def test_length_past_the_end_of_its_message(tmp_path):
    tensor = _len(8, b"w") + _key(2, 0) + _varint(1) + _key(9, 2) + _varint(10**9) + b"\0" * 8
    graph = _len(5, tensor)
    result, found = _read(tmp_path, _model_bytes(graph))
    assert _codes(found) == ["onnx_malformed"]
    raw_at = _model_bytes(graph).index(_key(9, 2) + _varint(10**9))
    assert found[0][1] == raw_at


def test_file_cut_inside_raw_data_is_one_truncation(tmp_path):
    path = models.plain_model(tmp_path / "p.onnx")
    raw = path.read_bytes()
    w_at = raw.index(numpy_helper.from_array(np.zeros(1, np.float32)).SerializeToString()[:0] + b"linear.weight")
    cut = raw[:w_at + 40]
    result, found = _read(tmp_path, cut)
    assert _codes(found) == ["truncated"] and found[0][1] == len(cut)
    ckpt = mx.open(str(tmp_path / "h.onnx"))
    assert "truncated" in {f.code for f in ckpt.findings}


@pytest.mark.parametrize("raw, code", [
    (b"\x08\xff\xff", "truncated"),                           # varint cut by the end of the file
    (b"\x08" + b"\xff" * 11 + b"\x01", "onnx_malformed"),     # varint past 10 bytes
    (b"\x08\x09\x00\x01", "onnx_malformed"),                  # field number 0
    (b"\x08\x09\x3b", "onnx_malformed"),                      # wire type 3 (group)
    (b"\x08\x09\x12\x01a", "onnx_no_graph"),
])
def test_broken_wire_format(tmp_path, raw, code):
    _, found = _read(tmp_path, raw)
    assert code in _codes(found)


def test_huge_dims_and_unknown_types_allocate_nothing(tmp_path):
    dims = b"".join(_key(1, 0) + _varint(1 << 40) for _ in range(2))
    t1 = _len(5, _len(8, b"huge") + dims + _key(2, 0) + _varint(1) + _len(9, b"\0" * 4))
    t2 = _len(5, _len(8, b"odd") + _key(1, 0) + _varint(2) + _key(2, 0) + _varint(99) + _len(9, b"\0" * 4))
    t3 = _len(5, _len(8, b"neg") + _key(1, 0) + _varint((1 << 64) - 3) + _key(2, 0) + _varint(1))
    t4 = _len(5, _len(8, b"rank") + _len(1, _varint(1) * 100) + _key(2, 0) + _varint(1))
    # int32_data of 3 varints under dims of 2**40 values: refused before anything is allocated
    t5 = _len(5, _len(8, b"varints") + _key(1, 0) + _varint(1 << 40) + _key(2, 0) + _varint(6)
              + _len(5, b"\x01\x02\x03"))
    result, found = _read(tmp_path, _model_bytes(t1 + t2 + t3 + t4 + t5))
    codes = _codes(found)
    assert {"onnx_bad_dims", "onnx_bad_dtype", "onnx_malformed"} <= set(codes)
    path = tmp_path / "h.onnx"
    ckpt = mx.open(str(path))
    assert "varints" in ckpt.tensors
    for name in ckpt.tensors:
        with pytest.raises(ValueError):
            ckpt.read(name)
        with pytest.raises(ValueError):
            ckpt.stats(name)


def test_nesting_past_the_cap_is_a_finding(tmp_path):
    leaf = body = helper.make_graph([], "leaf", [], [])
    for i in range(onnx_reader.MAX_GRAPH_DEPTH + 3):
        node = helper.make_node("If", ["c"], [f"o{i}"], then_branch=body, else_branch=leaf)
        body = helper.make_graph([node], f"g{i}", [], [])
    raw = models._model(list(body.node), [], [], []).SerializeToString()
    _, found = _read(tmp_path, raw)
    assert "onnx_nesting_too_deep" in _codes(found)


def test_millions_of_fields_stop_at_the_budget(tmp_path, monkeypatch):
    monkeypatch.setattr(onnx_reader, "MAX_FIELDS", 1000)
    graph = _len(2, b"g") * 2000
    _, found = _read(tmp_path, _model_bytes(graph))
    assert _codes(found) == ["onnx_too_many_fields"]


def test_wrong_typed_field_and_size_mismatch(tmp_path):
    t1 = numpy_helper.from_array(np.zeros(4, np.float32), "short")
    t1.raw_data = b"\0" * 12
    t2 = helper.make_tensor("wrong", onnx.TensorProto.FLOAT, [2], [1.0, 2.0])
    t2.data_type = onnx.TensorProto.INT64  # its floats sit in float_data, not int64_data
    raw = models._model([], [t1, t2], [], []).SerializeToString()
    result, found = _read(tmp_path, raw)
    assert _codes(found).count("onnx_size_mismatch") == 2


_VALID: dict[str, bytes] = {}


def _valid(tmp_path_factory, which: str) -> bytes:
    if not _VALID:
        d = tmp_path_factory.mktemp("valid")
        _VALID["plain"] = models.plain_model(d / "p.onnx").read_bytes()
        _VALID["qdq"] = models.qdq_model(d / "q.onnx", onnx.TensorProto.INT4, 0, 4)[0].read_bytes()
        _VALID["varint qdq"] = models.qdq_model(d / "v.onnx", onnx.TensorProto.UINT8, 1, raw=False)[0].read_bytes()
    return _VALID[which]


@settings(max_examples=90, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_mutations_never_raise(tmp_path_factory, data):
    raw = bytearray(_valid(tmp_path_factory, data.draw(st.sampled_from(["plain", "qdq", "varint qdq"]))))
    for _ in range(data.draw(st.integers(1, 6))):
        at = data.draw(st.integers(0, len(raw) - 1))
        raw[at] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(1, len(raw)))
    d = tmp_path_factory.mktemp("mut")
    path = d / "m.onnx"
    path.write_bytes(bytes(raw[:cut]))
    src = open_source(str(path))
    try:
        read_onnx(src)  # the reader itself, whatever detect says of the bytes
    finally:
        src.close()
    ckpt = mx.open(str(path))
    assert not [f for f in ckpt.findings if f.code == "internal_error"]
    for name in list(ckpt.tensors)[:20]:
        try:
            ckpt.read(name)
        except ValueError:
            pass


def test_odd_tensor_layouts_are_named(tmp_path):
    """Values in two places, unpacked typed values, segments, no values, a name twice, a
    non-numeric external offset, a sparse initializer: each its finding, at the tensor."""
    TP = onnx.TensorProto
    twice = numpy_helper.from_array(np.ones(2, np.float32), "twice")
    twice.float_data.extend([1.0, 1.0])
    segment = numpy_helper.from_array(np.ones(2, np.float32), "segment")
    segment.segment.begin, segment.segment.end = 0, 2
    empty = TP(name="no_values", data_type=TP.FLOAT, dims=[3])
    dup = [numpy_helper.from_array(np.ones(1, np.float32), "dup") for _ in range(2)]
    ext = numpy_helper.from_array(np.ones(2, np.float32), "ext")
    ext.ClearField("raw_data")
    ext.data_location = TP.EXTERNAL
    for k, v in (("location", "d.bin"), ("offset", "-4")):
        e = ext.external_data.add()
        e.key, e.value = k, v
    sparse = helper.make_sparse_tensor(numpy_helper.from_array(np.ones(1, np.float32), "sv"),
                                       numpy_helper.from_array(np.zeros(1, np.int64), "si"), [4])
    graph = helper.make_graph([], "g", [], [], [twice, segment, empty, *dup, ext],
                              sparse_initializer=[sparse])
    raw = helper.make_model(graph).SerializeToString()
    # float_data written unpacked: tag 0x25 (field 4, fixed32) per value, as a proto2 writer may
    unpacked = _len(5, _len(8, b"unpacked") + _key(1, 0) + _varint(2) + _key(2, 0) + _varint(1)
                    + (_key(4, 5) + b"\0\0\x80?") * 2)
    raw += _len(7, unpacked)  # a second graph field: protobuf merges it into the first
    _, found = _read(tmp_path, raw)
    codes = set(_codes(found))
    assert {"onnx_data_twice", "onnx_segment", "onnx_no_data", "onnx_duplicate_name",
            "onnx_external_bad", "onnx_sparse", "onnx_unpacked_values"} <= codes
