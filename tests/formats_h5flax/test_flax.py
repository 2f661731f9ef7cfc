"""flax_model.msgpack walked by hand: every array equals flax.serialization's reading (its ext
hook, builders.flax_ext_unpack), with its data's absolute byte range; hostile variants are findings."""

from __future__ import annotations

import struct

import ml_dtypes
import msgpack
import numpy as np
import pytest
from hypothesis import given

import model_explorer as mx
from model_explorer.formats.detect import identify
from model_explorer.formats.flax_msgpack import MAX_DEPTH

from .builders import PT, flatten, flax_model_msgpack, flax_restore, flax_serialize, nest
from .hostile import SETTINGS, mutated, mutations, opens_cleanly

TREE = {
    "params": {
        "Dense_0": {"kernel": np.arange(12, dtype=np.float32).reshape(3, 4), "bias": np.zeros(4, np.float16)},
        "LayerNorm_0": {"scale": np.ones(4, ml_dtypes.bfloat16), "bias": np.full(4, -1.5, np.float64)},
        "Embed_0": {"embedding": np.arange(-6, 6, dtype=np.int8).reshape(4, 3)},
        "big": {"w": np.random.default_rng(3).standard_normal((70, 40)).astype(np.float32)},  # bin32
        "mask": np.array([True, False]),
        "u": np.arange(3, dtype=np.uint64),
        "c": np.array([1 + 2j, 3 - 1j], np.complex64),
    },
    "step": np.int32(1000),  # a numpy scalar: ext type 3
    "note": "trained",
    "lr": 0.001,
    "pair": 1 + 2j,  # a Python complex: ext type 2
    "empty": {},
}


def _write(tmp_path, tree, name="flax_model.msgpack"):
    path = tmp_path / name
    path.write_bytes(flax_serialize(tree))
    return path


def test_every_array_equals_flax_reading(tmp_path):
    path = _write(tmp_path, TREE)
    ckpt = mx.open(str(path))
    want = {k: v for k, v in flatten(flax_restore(path.read_bytes())).items() if isinstance(v, np.ndarray | np.generic)}
    assert ckpt.format == "flax" and sorted(ckpt.tensors) == sorted(want)
    raw = path.read_bytes()
    for name, value in want.items():
        t = ckpt.tensors[name]
        got = ckpt.read(name)
        assert got.shape == np.shape(value)
        np.testing.assert_array_equal(got, np.asarray(value).astype(got.dtype), err_msg=name)
        assert raw[t.offset:t.end] == np.asarray(value).tobytes(), name  # the span is the data
    assert ckpt.tensors["params/LayerNorm_0/scale"].dtype == "BF16"
    assert ckpt.tensors["step"].extra["scalar"] and ckpt.tensors["step"].shape == ()
    assert ckpt.metadata["note"] == "trained"
    assert ckpt.metadata["lr"] == "0.001"
    assert ckpt.findings == []
    kinds = {s.kind for s in ckpt.spans_for(ckpt.files[0])}
    assert {"key", "dims", "type", "tensor_data", "tensor_info"} <= kinds


def test_transformers_layout_and_identification(tmp_path):
    path = flax_model_msgpack(tmp_path / "weights.bin")  # named as nothing in particular
    assert identify(lambda o, n: path.read_bytes()[o:o + n], path.stat().st_size).reads_as == "flax_msgpack"
    ckpt = mx.open(str(path))
    assert len(ckpt.tensors) == len(PT) and "bert/encoder/layer/0/attention/self/query/kernel" in ckpt.tensors


def test_chunked_arrays_are_listed_chunk_by_chunk(tmp_path):
    """flax.serialization splits arrays over 1 GiB into flat chunks; a small one built the same way."""
    flat = np.arange(10, dtype=np.float32)
    tree = {"emb": {"__msgpack_chunked_array__": True, "shape": {"0": 2, "1": 5},
                    "chunks": {"0": flat[:6], "1": flat[6:]}}}
    ckpt = mx.open(str(_write(tmp_path, tree)))
    assert sorted(ckpt.tensors) == ["emb/chunks/0", "emb/chunks/1"]
    np.testing.assert_array_equal(ckpt.read("emb/chunks/1"), flat[6:])
    assert [f.code for f in ckpt.findings] == ["msgpack_chunked_array"]


def _codes(ckpt) -> list[str]:
    assert "internal_error" not in {f.code for f in ckpt.findings}
    return [f.code for f in ckpt.findings]


def test_truncated_file(tmp_path):
    raw = flax_serialize(TREE)
    path = tmp_path / "flax_model.msgpack"
    for cut in (3, 40, len(raw) // 2, len(raw) - 5):
        path.write_bytes(raw[:cut])
        ckpt = opens_cleanly(str(path))
        assert "msgpack_bad_structure" in _codes(ckpt) or "msgpack_too_large" in _codes(ckpt), cut


def test_deep_nesting_is_cut_off(tmp_path):
    tree: dict = {"w": np.ones(2, np.float32)}
    for _ in range(MAX_DEPTH + 10):
        tree = {"g": tree}
    ckpt = mx.open(str(_write(tmp_path, {"top": np.zeros(1, np.float32), "deep": tree})))
    assert "msgpack_too_deep" in _codes(ckpt) and "top" in ckpt.tensors


def test_deeper_than_python_recursion(tmp_path):
    """A map of maps 100,000 deep (300 KB): cut at MAX_DEPTH, never a RecursionError."""
    path = tmp_path / "deep.msgpack"
    path.write_bytes(b"\x81\xa1g" * 100_000 + b"\xc0")
    assert _codes(mx.open(str(path))) == ["msgpack_too_deep"]


@pytest.mark.parametrize("header", [b"\xdf\xff\xff\xff\xff", b"\xdd\xff\xff\xff\xff", b"\xdb\xff\xff\xff\xff",
                                    b"\xc6\x7f\xff\xff\xff", b"\xc9\x7f\xff\xff\xff\x01"])
def test_huge_counts_and_lengths(tmp_path, header):
    """A map, array, string, bin or ext claiming 4 GiB in a small file: refused before allocating."""
    path = tmp_path / "huge.msgpack"
    body = header if header[0] in (0xDF, 0xDD) else b"\x81\xa1k" + header
    path.write_bytes(body + b"\x00" * 16)
    codes = _codes(opens_cleanly(str(path)))
    assert set(codes) & {"msgpack_too_large", "msgpack_bad_structure"}


def test_ndarray_payloads_that_lie(tmp_path):
    def ext(payload):
        return msgpack.ExtType(1, msgpack.packb(payload, use_bin_type=True))

    cases = {
        "short": ext(((4, 4), "float32", b"\0" * 12)),
        "not_triple": ext(((2,), "float32")),
        "bad_shape": ext((("a",), "float32", b"\0" * 4)),
        "unknown_dtype": ext(((2,), "float128", b"\0" * 32)),
        "huge_shape": ext(((2**40, 2**40), "float32", b"")),
        "other_ext": msgpack.ExtType(42, b"xyz"),
    }
    path = tmp_path / "lies.msgpack"
    path.write_bytes(msgpack.packb(cases))
    ckpt = opens_cleanly(str(path))
    codes = _codes(ckpt)
    assert ckpt.tensors == {} or list(ckpt.tensors) == []
    assert codes.count("msgpack_bad_array") == 4 and codes.count("msgpack_dtype_not_read") == 1
    for f in ckpt.findings:
        assert f.offset is not None and f.tensor in cases


def test_trailing_bytes(tmp_path):
    path = tmp_path / "t.msgpack"
    path.write_bytes(flax_serialize({"w": np.ones(2, np.float32)}) + b"junk")
    ckpt = mx.open(str(path))
    (f,) = ckpt.findings
    assert f.code == "msgpack_trailing_bytes" and f.length == 4 and "w" in ckpt.tensors


@SETTINGS
@given(muts=mutations)
def test_mutated_msgpack_opens(tmp_path_factory, muts):
    path = tmp_path_factory.getbasetemp() / "m.msgpack"
    path.write_bytes(mutated(flax_serialize(nest({"a/b/kernel": np.ones((3, 2), np.float32),
                                                  "a/b/bias": np.zeros(2, np.float16), "step": 3})), muts))
    opens_cleanly(str(path))


def test_u64_shape_entries(tmp_path):
    """Sizes written as uint64 (0xcf) read the same as small ones."""
    data = struct.pack(">BQ", 0xCF, 2)
    payload = b"\x93" + b"\x91" + data + msgpack.packb("float32") + msgpack.packb(b"\0" * 8, use_bin_type=True)
    path = tmp_path / "u64.msgpack"
    path.write_bytes(b"\x81\xa1w" + msgpack.packb(msgpack.ExtType(1, payload)))
    ckpt = mx.open(str(path))
    assert ckpt.tensors["w"].shape == (2,) and ckpt.findings == []


def test_plain_values_past_the_caps_are_walked_not_labelled(tmp_path, monkeypatch):
    """An array of nils longer than the walk's cap (lowered here to keep the test fast): bounded
    time and spans, one finding."""
    from model_explorer.formats import flax_msgpack

    monkeypatch.setattr(flax_msgpack, "MAX_VALUES", 30_000)
    monkeypatch.setattr(flax_msgpack, "MAX_SCALARS", 1_000)
    path = tmp_path / "nils.msgpack"
    n = 30_010
    path.write_bytes(b"\x81\xa1k\xdd" + n.to_bytes(4, "big") + b"\xc0" * n)
    ckpt = mx.open(str(path))
    assert _codes(ckpt) == ["msgpack_too_large"]
    assert len(ckpt.spans_for(ckpt.files[0])) <= 1_000 + 10
