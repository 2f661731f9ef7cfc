"""read() of every Hub scheme equals the scheme's own dequantization: bit for bit against the
libraries that run on the CPU (bitsandbytes, compressed-tensors), and by a round trip from a
known float weight for the layouts packed by hand (GPTQ, AWQ, fine-grained FP8, MXFP4)."""

from __future__ import annotations

import dataclasses

import ml_dtypes
import numpy as np
import pytest

from . import layouts as L

BASE = "model.layers.0.mlp.down_proj"
NAME = BASE + ".weight"


def build(tmp_path, tensors, quant, name="m"):
    return L.open_grouped(L.write_folder(tmp_path / name, tensors, quant))


def check(ckpt, expected, name=NAME):
    got = ckpt.read(name)
    assert got.dtype == np.float32 and got.shape == expected.shape
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(ckpt.read(name, rows=slice(5, 9)), expected[5:9])
    np.testing.assert_array_equal(ckpt.read(name, rows=slice(1, 60, 7)), expected[1:60:7])
    np.testing.assert_array_equal(ckpt.read(name, rows=-1), expected[-1])


@pytest.mark.parametrize("bits", [2, 3, 4, 8])
@pytest.mark.parametrize("sym,desc_act,fmt", [(False, False, "gptq"), (True, True, "gptq"),
                                              (False, True, "gptq_v2"), (True, False, "gptq_v2")])
def test_gptq_round_trip(tmp_path, bits, sym, desc_act, fmt):
    w = L.weight(96, 64)
    t, expected = L.gptq_layer(BASE, w, bits, 32, sym, desc_act, fmt)
    ckpt = build(tmp_path, t, L.gptq_config(bits, 32, sym, desc_act, fmt))
    check(ckpt, expected)
    step = np.abs(w).max() / (2 ** bits - 1)
    assert np.abs(ckpt.read(NAME) - w).max() <= 1.01 * step  # within one quantization step


def test_gptq_3bit_stream_is_autogptq_pack():
    codes = np.random.default_rng(3).integers(0, 8, (64, 5))
    np.testing.assert_array_equal(L.pack_stream(codes, 3, axis=0), L.autogptq_pack_3bit(codes))


@pytest.mark.parametrize("version", ["gemm", "gemv"])
def test_awq_round_trip(tmp_path, version):
    w = L.weight(96, 128)
    t, expected = L.awq_layer(BASE, w, 32, version)
    check(build(tmp_path, t, L.awq_config(32, version)), expected)


def test_awq_gemm_order_is_interleaved(tmp_path):
    """Channel 8c + ORDER[i] in nibble i: a single nonzero channel lands where AutoAWQ puts it."""
    q = np.zeros((4, 16), np.int64)
    q[:, 1] = 5  # channel 1 -> nibble 4 of word 0
    words = L.awq_gemm_pack(q).view(np.uint32)
    assert (words[:, 0] == 5 << 16).all() and (words[:, 1] == 0).all()


def test_awq_gemv_fast_is_refused_by_name(tmp_path):
    w = L.weight(64, 64)
    t, _ = L.awq_layer(BASE, w, 32, "gemm")
    ckpt = build(tmp_path, t, L.awq_config(32, "gemm"))
    ckpt.tensors[NAME].quant = dataclasses.replace(ckpt.tensors[NAME].quant, version="gemv_fast")
    with pytest.raises(ValueError, match="gemv_fast.*not decoded"):
        ckpt.read(NAME)


@pytest.mark.parametrize("block", [(128, 128), (64, 48)])  # 96 x 64: partial edge blocks
def test_fp8_block_round_trip(tmp_path, block):
    w = L.weight(96, 64)
    t, expected = L.fp8_block_layer(BASE, w, block)
    check(build(tmp_path, t, L.fp8_config(block)), expected)


def test_fp8_block_equals_transformers_dequantize(tmp_path):
    torch = pytest.importorskip("torch")
    fp8 = pytest.importorskip("transformers.integrations.finegrained_fp8")
    w = L.weight(128, 64)
    t, _ = L.fp8_block_layer(BASE, w, (32, 32))
    ckpt = build(tmp_path, t, L.fp8_config((32, 32)))
    q = torch.from_numpy(t[BASE + ".weight"].view(np.uint8)).view(torch.float8_e4m3fn)
    ref = fp8.Fp8Dequantize(None)._dequantize_one(q, torch.from_numpy(t[BASE + ".weight_scale_inv"]),
                                                  torch.float32)
    np.testing.assert_array_equal(ckpt.read(NAME), ref.numpy())


def test_mxfp4_equals_transformers(tmp_path):
    torch = pytest.importorskip("torch")
    mx4 = pytest.importorskip("transformers.integrations.mxfp4")
    w = L.weight(2 * 16, 64).reshape(2, 16, 64)
    name = "model.layers.0.mlp.experts.gate_up_proj"
    t, expected = L.mxfp4_layer(name, w)
    ckpt = build(tmp_path, t, {"quant_method": "mxfp4"})
    got = ckpt.read(name)
    np.testing.assert_array_equal(got, expected)
    ref = mx4.convert_moe_packed_tensors(torch.from_numpy(t[name + "_blocks"]),
                                         torch.from_numpy(t[name + "_scales"]), dtype=torch.float32)
    np.testing.assert_array_equal(got, ref.transpose(1, 2).numpy())  # transformers transposes
    np.testing.assert_array_equal(ckpt.read(name, rows=1), expected[1])


@pytest.mark.parametrize("quant_type", ["nf4", "fp4"])
@pytest.mark.parametrize("nested", [False, True])
@pytest.mark.parametrize("shape", [(96, 128), (64, 96)])  # rows of 96: blocks across rows
def test_bnb_4bit_equals_bitsandbytes(tmp_path, quant_type, nested, shape):
    pytest.importorskip("bitsandbytes")
    t, ref = L.bnb4_layer_real(BASE, L.weight(*shape), quant_type, nested)
    check(build(tmp_path, t, L.bnb_config(True, quant_type, nested)), ref)


def test_bnb_int8_equals_bitsandbytes(tmp_path):
    pytest.importorskip("bitsandbytes")
    t, ref = L.bnb_int8_layer_real(BASE, L.weight(96, 128))
    check(build(tmp_path, t, L.bnb_config(False)), ref)


CT_CASES = {
    "w4a16_group_sym": ("pack-quantized", dict(bits=4, strategy="group", group=32, sym=True)),
    "w4a16_group_asym": ("pack-quantized", dict(bits=4, strategy="group", group=32, sym=False)),
    "w4_channel_asym": ("pack-quantized", dict(bits=4, strategy="channel", group=None, sym=False)),
    "w3_group_asym": ("pack-quantized", dict(bits=3, strategy="group", group=32, sym=False)),
    "w8_channel": ("pack-quantized", dict(bits=8, strategy="channel", group=None, sym=True)),
    "int8_channel": ("int-quantized", dict(bits=8, strategy="channel", group=None, sym=True)),
    "fp8_tensor": ("float-quantized", dict(bits=8, strategy="tensor", group=None, typ="float")),
    "fp8_channel": ("float-quantized", dict(bits=8, strategy="channel", group=None, typ="float")),
    "fp8_group": ("float-quantized", dict(bits=8, strategy="group", group=32, typ="float")),
    "fp8_block": ("float-quantized", dict(bits=8, strategy="block", group=None, block=(64, 48),
                                          typ="float")),
    "nvfp4": ("nvfp4-pack-quantized", dict(bits=4, strategy="tensor_group", group=16, typ="float")),
}


@pytest.mark.parametrize("case", list(CT_CASES))
def test_compressed_tensors_equals_library(tmp_path, case):
    pytest.importorskip("compressed_tensors")
    fmt, kw = CT_CASES[case]
    args = L.ct_args(fmt, **kw)
    t, ref = L.ct_layer_real(BASE, L.weight(96, 128), fmt, args)
    ckpt = build(tmp_path, t, L.ct_config(fmt, args))
    if fmt == "nvfp4-pack-quantized":  # the library returns bf16: ours rounds to it exactly
        got = ckpt.read(NAME)
        np.testing.assert_array_equal(got.astype(ml_dtypes.bfloat16).astype(np.float32), ref)
        assert L.rel_diff(got, ref) <= 2 ** -8
    else:
        check(ckpt, ref)


def test_blocks_and_scale_histogram(tmp_path):
    w = L.weight(96, 64)
    t, expected = L.gptq_layer(BASE, w, 4, 32, False, True, "gptq")
    ckpt = build(tmp_path, t, L.gptq_config(4, 32, False, True))
    b = ckpt.blocks(NAME, reference=w, start=2, count=3)
    assert b.block_elems == 32 and b.n_blocks == 96 * 2 and b.dtype == "GPTQ_Q4"
    g_idx = t[BASE + ".g_idx"]
    row, grp = 1, 0  # block 2 = row 1, group 0: its members are the columns g_idx says
    np.testing.assert_array_equal(b.values[0], expected[row, g_idx == grp])
    np.testing.assert_array_equal(b.scale[0], t[BASE + ".scales"][grp, row].astype(np.float32))
    np.testing.assert_allclose(b.values[0], b.scale[0] * (b.codes[0] - b.zero_point[0]))
    assert {"scale", "zero_point", "max_abs_error"} <= set(b.table().columns)
    s = ckpt.stats(NAME)
    assert s.scales["count"] == 96 * 2 and s.max == expected.max()


@pytest.mark.parametrize("builder", ["fp8", "bnb", "mxfp4", "awq"])
def test_blocks_of_other_schemes(tmp_path, builder):
    w = L.weight(96, 64)
    if builder == "fp8":
        t, exp = L.fp8_block_layer(BASE, w, (64, 48))
        ckpt, name = build(tmp_path, t, L.fp8_config((64, 48))), NAME
    elif builder == "bnb":
        pytest.importorskip("bitsandbytes")
        t, exp = L.bnb4_layer_real(BASE, w)
        ckpt, name = build(tmp_path, t, L.bnb_config()), NAME
    elif builder == "awq":
        t, exp = L.awq_layer(BASE, w, 32)
        ckpt, name = build(tmp_path, t, L.awq_config(32)), NAME
    else:
        t, exp = L.mxfp4_layer(BASE, w)
        ckpt, name = build(tmp_path, t, {"quant_method": "mxfp4"}), BASE
    b = ckpt.blocks(name, start=0, count=4)
    gw = b.block_elems
    np.testing.assert_array_equal(b.values[0][:min(gw, 64)], exp[0, :min(gw, 64)])
    assert b.scale is not None and np.all(np.isfinite(b.scale))
