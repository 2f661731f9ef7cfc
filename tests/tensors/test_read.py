"""Checkpoint.read: plain dtypes, GGUF files, MLX affine groups, slices, truncation."""

from __future__ import annotations

import os

import ml_dtypes
import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from gguf import quants

from model_explorer.samples import sample_path

from .conftest import pack_mlx, write_gguf, write_safetensors

RNG = np.random.default_rng(0)

PLAIN = {
    "F64": np.float64, "F32": np.float32, "F16": np.float16, "BF16": ml_dtypes.bfloat16,
    "F8_E4M3": ml_dtypes.float8_e4m3fn, "F8_E5M2": ml_dtypes.float8_e5m2,
    "I8": np.int8, "I16": np.int16, "I32": np.int32, "I64": np.int64,
    "U8": np.uint8, "U16": np.uint16, "U32": np.uint32, "U64": np.uint64, "BOOL": np.bool_,
}


@pytest.mark.parametrize("dtype", PLAIN)
def test_plain_safetensors_dtypes(tmp_path, opened, dtype):
    npdt = np.dtype(PLAIN[dtype])
    if npdt.kind in "iu":
        data = RNG.integers(np.iinfo(npdt).min // 2, np.iinfo(npdt).max // 2, size=(5, 7)).astype(npdt)
    elif npdt.kind == "b":
        data = RNG.integers(0, 2, size=(5, 7)).astype(bool)
    else:
        data = (RNG.normal(size=(5, 7)) * 4).astype(npdt)
    path = write_safetensors(tmp_path / "m.safetensors", {"t": data})
    got = opened(path).read("t")
    if npdt.kind in "iub":
        assert got.dtype == npdt and np.array_equal(got, data)
    else:
        assert got.dtype == np.float32
        assert np.array_equal(got, data.astype(np.float32))


def test_safetensors_matches_the_reference_loader(tmp_path, opened):
    from safetensors.numpy import load_file

    tensors = {"a": RNG.normal(size=(3, 4)).astype(np.float16), "b": np.arange(6, dtype=np.int64)}
    path = write_safetensors(tmp_path / "m.safetensors", tensors)
    ref = load_file(path)
    ckpt = opened(path)
    for name in tensors:
        assert np.array_equal(ckpt.read(name), ref[name].astype(ckpt.read(name).dtype))


def test_complex64_keeps_complex(tmp_path, opened):
    data = (RNG.normal(size=6) + 1j * RNG.normal(size=6)).astype(np.complex64)
    path = write_safetensors(tmp_path / "m.safetensors", {"c": data})
    assert np.array_equal(opened(path).read("c"), data)


def test_scalar_and_empty_tensors(tmp_path, opened):
    path = write_safetensors(tmp_path / "m.safetensors", {"s": np.array(3.5, np.float32),
                                                          "e": np.zeros((0, 4), np.float32)})
    ckpt = opened(path)
    assert ckpt.read("s").shape == () and ckpt.read("s") == 3.5
    assert ckpt.read("e").shape == (0, 4)


# -- sub-byte and exotic safetensors dtypes --------------------------------------------------

def _raw_safetensors(path, dtype: str, shape: list[int], data: bytes) -> str:
    import json
    import struct

    header = json.dumps({"t": {"dtype": dtype, "shape": shape, "data_offsets": [0, len(data)]}}).encode()
    header += b" " * (-len(header) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header + data)
    return str(path)


@pytest.mark.parametrize("dtype, ml, bits", [("F4", "float4_e2m1fn", 4), ("F6_E2M3", "float6_e2m3fn", 6),
                                             ("F6_E3M2", "float6_e3m2fn", 6)])
def test_subbyte_floats_unpack_lsb_first(tmp_path, opened, dtype, ml, bits):
    n = 13  # not a multiple of 8: the last byte is partly padding
    codes = RNG.integers(0, 1 << bits, size=n)
    value = sum(int(c) << (bits * i) for i, c in enumerate(codes))
    data = value.to_bytes((n * bits + 7) // 8, "little")
    path = _raw_safetensors(tmp_path / "m.safetensors", dtype, [n], data)
    expected = codes.astype(np.uint8).view(getattr(ml_dtypes, ml)).astype(np.float32)
    assert np.array_equal(opened(path).read("t"), expected)


def test_f8_e8m0_scales(tmp_path, opened):
    data = bytes([127, 128, 120, 0])
    path = _raw_safetensors(tmp_path / "m.safetensors", "F8_E8M0", [4], data)
    assert opened(path).read("t").tolist() == [1.0, 2.0, 2.0 ** -7, 2.0 ** -127]


def test_unknown_dtype_is_a_clear_error(tmp_path, opened):
    path = _raw_safetensors(tmp_path / "m.safetensors", "F8_E4M3", [2], b"\x00\x00")
    ckpt = opened(path)
    ckpt.tensors["t"].dtype = "Q9_WEIRD"
    with pytest.raises(ValueError, match="Q9_WEIRD"):
        ckpt.read("t")
    with pytest.raises(ValueError, match="Q9_WEIRD"):
        ckpt.stats("t")
    found = [f for f in ckpt.findings if f.code == "undecodable"]
    assert len(found) == 1 and found[0].tensor == "t" and "Q9_WEIRD" in found[0].message


# -- GGUF ------------------------------------------------------------------------------------

def test_sample_gguf_is_identical_to_gguf_py(opened):
    """The SmolLM2 sample: every Q8_0 and Q4_1 tensor and some F32 ones, vs gguf-py's decoder.

    gguf-py decodes the same bytes (located by our reader, which the foundation tests check
    against GGUFReader; its 6 s parse of the vocabulary is not repeated here).
    """
    ckpt = opened(sample_path())
    kinds = set()
    names = [n for n, t in ckpt.tensors.items() if t.dtype != "F32"][:40] + ["output_norm.weight"]
    for name in names + [n for n, t in ckpt.tensors.items() if t.dtype == "Q8_0"]:
        info = ckpt.tensors[name]
        raw = np.frombuffer(ckpt.read_bytes(info.offset, info.length), np.uint8)
        ref = quants.dequantize(raw.reshape(info.shape[0] if len(info.shape) > 1 else 1, -1), Q[info.dtype])
        ours = ckpt.read(name)
        assert ours.dtype == np.float32 and ours.size == ref.size
        assert np.array_equal(ours.reshape(-1).view(np.uint32), ref.astype(np.float32).reshape(-1).view(np.uint32)), name
        kinds.add(info.dtype)
    assert {"Q4_1", "Q8_0", "F32"} <= kinds


QTYPES = ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_NL",
          "IQ4_XS", "TQ1_0", "TQ2_0", "MXFP4", "IQ2_XXS", "IQ3_S", "IQ1_M"]


def test_every_quant_type_through_a_gguf_file(tmp_path, opened):
    from .test_dequant import random_blocks

    tensors, refs = {}, {}
    for i, name in enumerate(QTYPES):
        blocks = random_blocks(name, 6, np.random.default_rng(i))
        qt = Q[name]
        elems = quants.GGML_QUANT_SIZES[qt][0]
        raw = blocks.reshape(2, -1)  # two rows of 3 blocks
        tensors[f"t.{name}"] = (raw, qt)
        refs[f"t.{name}"] = quants.dequantize(raw, qt)
        assert refs[f"t.{name}"].shape == (2, 3 * elems)
    plain = {"f16": np.arange(12, dtype=np.float16).reshape(3, 4),
             "bf16": (quants.quantize(np.linspace(-2, 2, 8, dtype=np.float32), Q.BF16), Q.BF16)}
    path = write_gguf(tmp_path / "q.gguf", {**tensors, **plain})
    ckpt = opened(path)
    for name, ref in refs.items():
        got = ckpt.read(name)
        assert np.array_equal(np.nan_to_num(got), np.nan_to_num(ref)), name
        assert np.array_equal(got.view(np.uint32)[np.isfinite(got)], ref.view(np.uint32)[np.isfinite(ref)])
    assert np.array_equal(ckpt.read("f16"), np.arange(12, dtype=np.float32).reshape(3, 4))
    bf16 = np.linspace(-2, 2, 8, dtype=np.float32).astype(ml_dtypes.bfloat16).astype(np.float32)
    assert np.array_equal(ckpt.read("bf16"), bf16)


def test_big_endian_gguf_plain_and_quantized(tmp_path, opened):
    data = RNG.normal(size=(4, 64)).astype(np.float32)
    q8 = quants.quantize(data, Q.Q8_0)
    path = write_gguf(tmp_path / "be.gguf", {"f": data, "q": (q8, Q.Q8_0),
                                             "i": np.arange(5, dtype=np.int32)}, endianess="big")
    ckpt = opened(path)
    assert np.array_equal(ckpt.read("f"), data)
    assert np.array_equal(ckpt.read("i"), np.arange(5, dtype=np.int32))
    assert np.array_equal(ckpt.read("q"), quants.dequantize(q8, Q.Q8_0))


def test_big_endian_bf16(tmp_path, opened):
    x = np.linspace(-2, 2, 16, dtype=np.float32)
    swapped = quants.quantize(x, Q.BF16).view("<u2").byteswap().view(np.uint8)  # as a BE writer stores it
    ckpt = opened(write_gguf(tmp_path / "be.gguf", {"b": (swapped, Q.BF16)}, endianess="big"))
    assert np.array_equal(ckpt.read("b"), x.astype(ml_dtypes.bfloat16).astype(np.float32))
    assert ckpt.stats("b", exact=True, max_elements=2).min == -2.0


def test_row_slices_match_the_whole_tensor(tmp_path, opened):
    data = RNG.normal(size=(64, 512)).astype(np.float32)
    raw = quants.quantize(data, Q.Q4_0)
    path = write_gguf(tmp_path / "s.gguf", {"w": (raw, Q.Q4_0), "v": np.arange(100, dtype=np.float32)})
    ckpt = opened(path)
    full = ckpt.read("w")
    assert np.array_equal(ckpt.read("w", rows=slice(10, 13)), full[10:13])
    assert np.array_equal(ckpt.read("w", rows=slice(None, None, 7)), full[::7])
    assert np.array_equal(ckpt.read("w", rows=slice(50, 3, -5)), full[50:3:-5])
    assert np.array_equal(ckpt.read("v", rows=slice(None, None, 3)), np.arange(0, 100, 3, dtype=np.float32))
    assert np.array_equal(ckpt.read("w", rows=-1), full[-1])
    assert np.array_equal(ckpt.read("v", rows=slice(33, 37)), np.arange(33, 37, dtype=np.float32))


def test_truncated_file_raises_with_where_it_ends(tmp_path, opened):
    data = RNG.normal(size=(8, 64)).astype(np.float32)
    path = write_gguf(tmp_path / "t.gguf", {"w": data})
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.truncate(size - 100)
    ckpt = opened(path)
    with pytest.raises(ValueError, match=f"ends at byte {size - 100}"):
        ckpt.read("w")
    assert np.array_equal(ckpt.read("w", rows=slice(0, 2)), data[:2])  # the intact part still reads


# -- MLX -------------------------------------------------------------------------------------

@pytest.mark.parametrize("bits", [2, 3, 4, 5, 6, 8])
@pytest.mark.parametrize("group", [32, 64])
def test_mlx_affine_all_bits(tmp_path, opened, bits, group):
    rows, cols = 6, 192
    codes = RNG.integers(0, 1 << bits, size=(rows, cols))
    scales = RNG.normal(size=(rows, cols // group)).astype(np.float16)
    biases = RNG.normal(size=(rows, cols // group)).astype(np.float16)
    write_safetensors(tmp_path / "model.safetensors", {
        "l.weight": pack_mlx(codes, bits), "l.scales": scales, "l.biases": biases},
        config={"quantization": {"bits": bits, "group_size": group}})
    ckpt = opened(str(tmp_path))
    info = ckpt.tensors["l.weight"]
    assert info.label == f"MLX_Q{bits}" and info.shape == (rows, cols)
    s = np.repeat(scales.astype(np.float32), group, axis=1)
    b = np.repeat(biases.astype(np.float32), group, axis=1)
    expected = s * codes.astype(np.float32) + b
    got = ckpt.read("l.weight")
    assert np.array_equal(got, expected)
    assert np.array_equal(ckpt.read("l.weight", rows=slice(2, 4)), expected[2:4])


def test_mlx_bf16_scales_3d(tmp_path, opened):
    codes = RNG.integers(0, 16, size=(2 * 3, 128))
    scales = RNG.normal(size=(6, 2)).astype(ml_dtypes.bfloat16)
    biases = RNG.normal(size=(6, 2)).astype(ml_dtypes.bfloat16)
    import json
    import struct

    # written by hand: safetensors.numpy cannot store ml_dtypes bfloat16
    parts, header, off = [], {}, 0
    for name, arr, dt in [("m.weight", pack_mlx(codes, 4).reshape(2, 3, 16), "U32"),
                          ("m.scales", scales.reshape(2, 3, 2), "BF16"),
                          ("m.biases", biases.reshape(2, 3, 2), "BF16")]:
        b = arr.tobytes()
        header[name] = {"dtype": dt, "shape": list(arr.shape), "data_offsets": [off, off + len(b)]}
        parts.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    (tmp_path / "model.safetensors").write_bytes(struct.pack("<Q", len(h)) + h + b"".join(parts))
    (tmp_path / "config.json").write_text(json.dumps({"quantization": {"bits": 4, "group_size": 64}}))
    ckpt = opened(str(tmp_path))
    expected = (np.repeat(scales.astype(np.float32), 64, 1) * codes
                + np.repeat(biases.astype(np.float32), 64, 1)).reshape(2, 3, 128)
    assert np.array_equal(ckpt.read("m.weight"), expected)


def test_remote_source_reads_by_range(tmp_path):
    """A RemoteSource (no mmap buffer): reads, slices and samples go through range reads."""
    import fsspec

    import model_explorer as mx

    from .test_dequant import random_blocks

    data = RNG.normal(size=(128, 256)).astype(np.float32)  # 128 KiB: past the cached prefix
    raw = random_blocks("Q4_K", 64, RNG).reshape(8, -1)  # gguf-py cannot quantize Q4_K
    path = write_gguf(tmp_path / "r.gguf", {"f": data, "w": (raw, Q.Q4_K)})  # w past the prefix too
    fs = fsspec.filesystem("memory")
    fs.pipe("/bench/r.gguf", open(path, "rb").read())
    ckpt = mx.open("memory://bench/r.gguf")
    try:
        src = ckpt.byte_source()
        assert getattr(src, "buffer", None) is None
        assert np.array_equal(ckpt.read("w"), quants.dequantize(raw, Q.Q4_K))
        before = src.bytes_read
        assert np.array_equal(ckpt.read("f", rows=slice(100, 102)), data[100:102])
        assert src.bytes_read - before == 2 * 256 * 4
        before = src.bytes_read  # a quantized row: only its own 8 blocks of 144 bytes
        assert np.array_equal(ckpt.read("w", rows=3), quants.dequantize(raw, Q.Q4_K)[3])
        assert src.bytes_read - before == 8 * 144
        before = src.bytes_read
        s = ckpt.stats("w", max_elements=2048)
        assert not s.exact and s.count == 2048 and "blocks of 256" in s.sample
        assert src.bytes_read - before == 8 * 144  # each sampled block read once
    finally:
        ckpt.close()
        fs.rm("/bench", recursive=True)


def test_reading_rows_into_a_buffer_gives_what_read_returns(tmp_path, opened):
    """`read(name, rows=, out=)` (the streamed pass's block reads into one reused buffer) equals
    `read(name)[rows]` for quantized, bf16 and plain tensors, and refuses a wrong buffer."""
    from .test_dequant import random_blocks

    blocks = random_blocks("Q4_K", 8, np.random.default_rng(3)).reshape(4, -1)  # 4 rows of 2 blocks
    bf16 = np.linspace(-3, 3, 4 * 96, dtype=np.float32).reshape(4, 96)
    path = write_gguf(tmp_path / "rows.gguf", {"q": (blocks, Q.Q4_K), "f": bf16,
                                                "b": (quants.quantize(bf16, Q.BF16), Q.BF16)})
    ckpt = opened(path)
    for name in ("q", "f", "b"):
        whole = ckpt.read(name)
        buf = np.full((2, whole.shape[1]), np.nan, np.float32)
        assert ckpt.read(name, rows=slice(1, 3), out=buf) is buf
        assert np.array_equal(buf, whole[1:3]), name
        everything = np.empty_like(whole)
        assert np.array_equal(ckpt.read(name, out=everything), whole)
    with pytest.raises(ValueError, match="buffer"):
        ckpt.read("q", rows=slice(0, 2), out=np.empty((3, 512), np.float32))
    with pytest.raises(ValueError, match="consecutive"):
        ckpt.read("q", rows=slice(0, 4, 2), out=np.empty((2, 512), np.float32))
