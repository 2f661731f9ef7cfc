"""Legacy GGML/GGMF/GGJT files (built from the layout llama.cpp's converter reads): header,
vocabulary and tensor table placed to the byte, ggml blocks decoded as gguf-py decodes them."""

from __future__ import annotations

import struct

import numpy as np
import pytest

import model_explorer as mx
from model_explorer.formats.detect import identify

from .ggml_files import legacy_file, quantized

pytest.importorskip("gguf")

RNG = np.random.default_rng(0)
W = RNG.standard_normal((4, 64)).astype(np.float32)
TENSORS = [("tok_embeddings.weight", (4, 64), 2, "Q4_0"), ("norm.weight", (64,), 0, "F32"),
           ("output.weight", (4, 64), 8, "Q8_0"), ("layers.0.attention.wq.weight", (4, 64), 1, "F16"),
           ("layers.0.feed_forward.w1.weight", (4, 64), 7, "Q5_1"), ("layers.0.attention.wk.weight", (4, 64), 6, "Q5_0")]


def _tensors():
    return [(n, shape, t, quantized(W if len(shape) == 2 else W[0], q)) for n, shape, t, q in TENSORS]


def _open(tmp_path, data: bytes, name: str = "model.bin"):
    p = tmp_path / name
    p.write_bytes(data)
    return mx.open(str(p))


def test_ggjt_v3_tensors_equal_gguf_py(tmp_path):
    from gguf import GGMLQuantizationType, quants

    data = legacy_file(tensors=_tensors(), ftype=2)
    ckpt = _open(tmp_path, data)
    assert ckpt.format == "ggml" and ckpt.errors == []
    assert [f.code for f in ckpt.findings] == ["ggml_legacy"]
    assert "convert_llama_ggml_to_gguf.py" in ckpt.findings[0].fix
    assert ckpt.meta("ggml.format") == "GGJTv3" and ckpt.meta("ggml.n_vocab") == 3
    for (name, shape, _, qname), (_, _, _, raw) in zip(TENSORS, _tensors(), strict=True):
        info = ckpt.tensors[name]
        assert info.dtype == qname and info.shape == shape and info.offset % 32 == 0
        assert data[info.offset:info.end] == raw
        want = quants.dequantize(np.frombuffer(raw, np.uint8), GGMLQuantizationType[qname]) \
            if qname != "F32" else np.frombuffer(raw, np.float32)
        np.testing.assert_array_equal(ckpt.read(name).reshape(-1), np.asarray(want, np.float32).reshape(-1))
    paths = {s.path for s in ckpt.spans_for()}
    assert {"magic", "version", "hparams > n_vocab", "hparams > ftype", "vocab", "vocab > token 1",
            "tensor 0 > n_dims", "tensor 0 > tok_embeddings.weight > name"} <= paths


@pytest.mark.parametrize("variant", ["GGML", "GGMF"])
def test_older_variants_have_no_padding_and_ggml_no_scores(tmp_path, variant):
    data = legacy_file(variant, 1, tensors=[("norm.weight", (64,), 0, quantized(W[0], "F32"))])
    ckpt = _open(tmp_path, data)
    info = ckpt.tensors["norm.weight"]
    header = 4 + 4 * (variant != "GGML") + 28
    vocab = sum(4 + len(t) + 4 * (variant != "GGML") for t in (b"<unk>", b"a", b"b"))
    assert info.offset == header + vocab + 12 + 4 + len("norm.weight")  # no padding
    np.testing.assert_array_equal(ckpt.read("norm.weight"), W[0])
    assert ckpt.meta("ggml.format") == f"{variant}v1"


def test_quantized_layouts_that_changed_are_listed_not_decoded(tmp_path):
    """GGJT v2 Q4_0 blocks held a float32 scale (20 bytes): listed with that size, refused."""
    old = bytes(range(20)) * 8  # 4 x 64 elements = 8 blocks
    data = legacy_file("GGJT", 2, ftype=2, tensors=[("a", (4, 64), 2, old),
                                                     ("b", (64,), 0, quantized(W[0], "F32"))])
    ckpt = _open(tmp_path, data)
    assert ckpt.tensors["a"].dtype == "Q4_0_GGJTv2" and ckpt.tensors["a"].length == 160
    np.testing.assert_array_equal(ckpt.read("b"), W[0])  # the walk stayed in step
    with pytest.raises(ValueError, match="cannot decode"):
        ckpt.read("a")
    f = next(f for f in ckpt.findings if f.code == "ggml_legacy_requantize")
    assert "refuses" in f.message and f.fix and f.offset == 8 + 24


def test_identified_by_magic(tmp_path):
    data = legacy_file(tensors=_tensors())
    for magic, kind in ((b"tjgg", "ggml"), (b"algg", "ggml")):
        what = identify(lambda o, n, d=magic + data[4:]: d[o:o + n], len(data))
        assert what.kind == kind
    assert identify(lambda o, n: data[o:o + n], len(data)).reads_as == "ggml"
    # a LoRA adapter ('ggla') is named, not read
    lora = b"algg" + data[4:]
    assert identify(lambda o, n: lora[o:o + n], len(lora)).reads_as == ""


def _hp(n_vocab=3):
    return (n_vocab, 32, 256, 4, 1, 8, 0)


@pytest.mark.parametrize("data, code", [
    (legacy_file(hparams=_hp(10**9)), "ggml_legacy_vocab_past_end"),
    (legacy_file(tokens=(), hparams=_hp(1)) + struct.pack("<I", 2**31) + b"abc" + bytes(4), "string_past_end"),
    (legacy_file() + struct.pack("<3I", 9, 1, 0), "too_many_dims"),
    (legacy_file() + struct.pack("<3I", 1, 10**6, 0), "string_past_end"),
    (legacy_file() + struct.pack("<3I", 1, 1, 77) + struct.pack("<I", 4) + b"x", "unknown_tensor_type"),
    (legacy_file(tensors=[("a", (4, 64), 0, quantized(W, "F32"))])[:-100], "data_past_end"),
    (legacy_file(tensors=[("a", (4, 64), 0, quantized(W, "F32"))] * 2), "duplicate_tensor"),
    (legacy_file()[:20], "truncated"),
    (b"tjgg" + struct.pack("<I", 9) + bytes(40), "ggml_legacy_version"),
], ids=["n_vocab", "token_length", "n_dims", "name_length", "type", "cut", "duplicate", "header", "version"])
def test_hostile_files_are_findings_at_bytes(tmp_path, data, code):
    ckpt = _open(tmp_path, data)
    assert code in {f.code for f in ckpt.findings}, [str(f) for f in ckpt.findings]
    for f in ckpt.findings:
        assert f.offset is not None and 0 <= f.offset <= len(data)


def test_every_cut_and_flipped_byte_opens(tmp_path):
    data = legacy_file(tensors=_tensors()[:3])
    rng = np.random.default_rng(2)
    for cut in range(0, len(data), 7):
        _open(tmp_path, data[:cut])
    for _ in range(150):
        b = bytearray(data)
        b[rng.integers(len(b))] = rng.integers(256)
        ckpt = _open(tmp_path, bytes(b))
        for name in ckpt.tensors:
            try:
                ckpt.stats(name)
            except ValueError:
                pass
