"""CTranslate2 model.bin, against ctranslate2's own converter: every variable it writes reads back
with its values, int8/int16 weights decoded as code / scale."""

from __future__ import annotations

import struct

import numpy as np
import pytest

import model_explorer as mx
from model_explorer.formats.detect import identify

from . import ct2_files as C

pytest.importorskip("ctranslate2")


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    d = tmp_path_factory.mktemp("ct2")
    src = C.tiny_gpt2(d / "hf")
    return {q: (d / q / "model.bin", C.convert(src, d / q, q)) for q in ("int8", "float16", "int16")}


@pytest.mark.parametrize("quantization", ["int8", "float16", "int16"])
def test_every_variable_equals_the_converters(converted, quantization):
    path, spec = converted[quantization]
    ckpt = mx.open(str(path))
    assert ckpt.format == "ctranslate2" and ckpt.errors == []
    assert ckpt.meta("ctranslate2.spec") == "TransformerDecoderSpec"
    arrays = {k: v for k, v in spec.items() if not isinstance(v, str)}
    assert set(ckpt.tensors) == set(arrays)
    assert ckpt.meta("ctranslate2.aliases") == {k: v for k, v in spec.items() if isinstance(v, str)}
    quantized = 0
    for name, want in arrays.items():
        info = ckpt.tensors[name]
        assert info.shape == want.shape
        got = ckpt.read(name)
        scale = arrays.get(name + "_scale")
        if want.dtype in (np.int8, np.int16) and scale is not None:
            quantized += 1
            assert info.label == f"CT2_INT{want.itemsize * 8}"
            per_row = (-1,) + (1,) * (want.ndim - 1) if scale.size > 1 else ()
            expect = want.astype(np.float32) / scale.astype(np.float32).reshape(per_row)
            np.testing.assert_array_equal(got, expect)
        else:
            np.testing.assert_array_equal(got, want.astype(got.dtype))
    scaled = [k for k in arrays if k.endswith("_scale") and arrays.get(k[:-6], np.empty(0)).dtype.kind == "i"]
    assert quantized == len(scaled) and (quantized > 0) == quantization.startswith("int")


def test_int8_weights_stay_close_to_the_source(converted):
    import torch
    from safetensors.torch import load_file

    path, _ = converted["int8"]
    src = load_file(str(path.parent.parent / "hf" / "model.safetensors"))
    w = src["transformer.h.0.mlp.c_fc.weight"].T.float().numpy()  # GPT-2 Conv1D is [in, out]
    got = mx.open(str(path)).read("decoder/layer_0/ffn/linear_0/weight")
    step = np.abs(w).max(axis=1, keepdims=True) / 127
    assert np.all(np.abs(got - w) <= step / 2 + 1e-7)
    assert torch is not None


def test_stats_blocks_and_scale_histogram(converted):
    ckpt = mx.open(str(converted["int8"][0]))
    name = "decoder/layer_0/ffn/linear_0/weight"
    st = ckpt.stats(name)
    assert st.exact and st.scales["count"] == ckpt.tensors[name].shape[0]
    b = ckpt.blocks(name, start=0, count=3)
    assert b.codes.shape == (3, 32) and b.codes.dtype == np.int8
    np.testing.assert_array_equal(b.values, ckpt.read(name, rows=slice(0, 3)))


def test_identified_by_content_not_name(converted, tmp_path):
    path, _ = converted["int8"]
    other = tmp_path / "weights.dat"
    other.write_bytes(path.read_bytes())
    what = identify(lambda o, n: other.read_bytes()[o:o + n], other.stat().st_size)
    assert (what.kind, what.reads_as) == ("ctranslate2", "ctranslate2")
    assert mx.open(str(other)).format == "ctranslate2"


def test_old_binary_versions_read_item_sizes():
    """Versions 1-3 give an item size and an element count instead of a type and bytes."""
    arr = np.arange(6, dtype=np.float32).reshape(2, 3)
    body = C.header(version=3) + struct.pack("<I", 1) + C.string(b"w") + struct.pack("<B2I", 2, 2, 3)
    body += struct.pack("<BI", 4, 6) + arr.tobytes() + struct.pack("<I", 0)
    ckpt = _open_bytes(body)
    assert ckpt.errors == [] and ckpt.tensors["w"].dtype == "F32"
    np.testing.assert_array_equal(ckpt.read("w"), arr)


def _open_bytes(data: bytes, tmp=[]):  # noqa: B006 - one temp dir for the module
    import tempfile
    from pathlib import Path

    if not tmp:
        tmp.append(Path(tempfile.mkdtemp()))
    p = tmp[0] / f"m{len(list(tmp[0].iterdir()))}.bin"
    p.write_bytes(data)
    return mx.open(str(p))


def _valid() -> bytes:
    w = np.ones((2, 4), np.int8)
    s = np.full(2, 127.0, np.float32)
    return (C.header() + struct.pack("<I", 2) + C.variable(b"w", w, 1) + C.variable(b"w_scale", s, 0)
            + struct.pack("<I", 1) + C.string(b"tied") + C.string(b"w"))


def test_valid_hand_built_file():
    ckpt = _open_bytes(_valid())
    assert ckpt.errors == [] and ckpt.tensors["w"].label == "CT2_INT8"
    np.testing.assert_allclose(ckpt.read("w"), np.full((2, 4), 1 / 127, np.float32))
    assert {s.path for s in ckpt.spans_for()} >= {"binary version", "spec name", "spec revision",
                                                   "variable count", "variable 0 > w > shape",
                                                   "variable 0 > w > dtype", "alias count"}


@pytest.mark.parametrize("mutate, code", [
    (lambda b: b[:30] + struct.pack("<H", 60000) + b[32:], "string_past_end"),  # a variable name
    (lambda b: b[:26] + struct.pack("<I", 10**9) + b[30:], "ct2_count_past_end"),
    (lambda b: b[:-30], "truncated"),
    (lambda b: struct.pack("<I", 7) + b[4:], "ct2_unsupported_version"),
    (lambda b: b + b"junk", "ct2_trailing_bytes"),
])
def test_hostile_headers_are_findings(mutate, code):
    data = mutate(_valid())
    ckpt = _open_bytes(data)
    assert code in {f.code for f in ckpt.findings}, [str(f) for f in ckpt.findings]
    for f in ckpt.findings:
        assert f.offset is not None and 0 <= f.offset <= len(data)


def test_size_and_dtype_lies():
    w = np.ones((2, 4), np.float32)
    bad_size = C.header() + struct.pack("<I", 1) + C.variable(b"w", w, 0, nbytes=16) + w.tobytes()[16:]
    bad_type = C.header() + struct.pack("<I", 1) + C.variable(b"w", w, 9)
    assert "ct2_size_mismatch" in {f.code for f in _open_bytes(bad_size + struct.pack("<I", 0)).findings}
    assert "ct2_unknown_dtype" in {f.code for f in _open_bytes(bad_type + struct.pack("<I", 0)).findings}


def test_every_cut_and_flipped_byte_opens(converted):
    data = _valid()
    rng = np.random.default_rng(1)
    for cut in range(len(data)):
        _open_bytes(data[:cut]).tensors  # noqa: B018 - never raises
    for _ in range(100):
        b = bytearray(data)
        b[rng.integers(len(b))] = rng.integers(256)
        ckpt = _open_bytes(bytes(b))
        for name in ckpt.tensors:
            try:
                ckpt.read(name)
            except ValueError:
                pass
