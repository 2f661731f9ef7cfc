"""Fine-grained FP8 blocks, gpt-oss MXFP4 experts and LLM.int8: read() against each library's
own dequantization (or, where it needs a GPU, a direct port of its formula)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from quant_format import layouts as L

import model_explorer as mx

P0 = "model.layers.0.mlp.proj0.weight"


def _fp8_folder(tmp_path, block=(128, 128), out_in=((200, 64), (64, 300)), lead=()):
    rng = np.random.default_rng(0)
    t, q = L.fp8_block(block, out_in)
    want = {}
    for i, (out, inp) in enumerate(out_in):
        p = f"model.layers.0.mlp.proj{i}."
        w8 = (rng.standard_normal(lead + (out, inp)) * 100).astype(ml_dtypes.float8_e4m3fn)
        sshape = lead + (-(-out // block[0]), -(-inp // block[1]))
        s = (rng.random(sshape) * 1e-3 + 1e-4).astype(np.float32)
        t[p + "weight"] = ("F8_E4M3", lead + (out, inp), w8.tobytes())
        t[p + "weight_scale_inv"] = ("F32", sshape, s.tobytes())
        # transformers' dequantization: weight.float() * scale_inv repeated over each block
        full = np.repeat(np.repeat(s, block[0], -2), block[1], -1)[..., :out, :inp]
        want[p + "weight"] = w8.astype(np.float32) * full
    return mx.open(str(L.write(tmp_path, t, q))), want


def test_fp8_block_partial_edges(tmp_path):
    ck, want = _fp8_folder(tmp_path)
    for name, w in want.items():
        assert ck.tensors[name].kind == "FP8_E4M3_B128"
        np.testing.assert_array_equal(ck.read(name), w)
        np.testing.assert_array_equal(ck.read(name, rows=slice(120, 140)), w[120:140])
        np.testing.assert_array_equal(ck.read(name, rows=-1), w[-1])


def test_fp8_zero_scale_refused(tmp_path):
    t, q = L.fp8_block((128, 128), ((200, 64),))
    t["model.layers.0.mlp.proj0.weight_scale_inv"] = ("F32", (2, 1), np.array([1, 0], np.float32).tobytes())
    ck = mx.open(str(L.write(tmp_path, t, q)))
    np.testing.assert_array_equal(ck.read(P0, rows=slice(0, 128)), 0)
    with pytest.raises(ValueError, match="weight_scale_inv.*zero or non-finite"):
        ck.read(P0)
    assert any(f.code == "undecodable" for f in ck.findings)


def test_mxfp4_matches_transformers(tmp_path):
    torch = pytest.importorskip("torch")
    mxfp4 = pytest.importorskip("transformers.integrations.mxfp4")
    rng = np.random.default_rng(2)
    t, q = L.mxfp4()
    ref = {}
    for name, (dtype, shape) in list(t.items()):
        if name.endswith("_blocks"):
            b = rng.integers(0, 256, shape, dtype=np.uint8)
            s = rng.integers(110, 135, shape[:-1], dtype=np.uint8)
            t[name] = (dtype, shape, b.tobytes())
            t[name.replace("_blocks", "_scales")] = ("U8", shape[:-1], s.tobytes())
            out = mxfp4._convert_moe_packed_tensors(torch.from_numpy(b), torch.from_numpy(s),
                                                    dtype=torch.float32)
            # transformers hands gpt-oss [experts, in, rows]; the file (and read) is [.., rows, in]
            ref[name[:-len("_blocks")]] = out.transpose(1, 2).numpy()
    ck = mx.open(str(L.write(tmp_path, t, q)))
    for name, want in ref.items():
        assert ck.tensors[name].kind == "MXFP4"
        np.testing.assert_array_equal(ck.read(name), want)
        np.testing.assert_array_equal(ck.read(name, rows=1), want[1])


def test_bnb_int8_matches_bitsandbytes(tmp_path):
    torch = pytest.importorskip("torch")
    F = pytest.importorskip("bitsandbytes.functional")
    rng = np.random.default_rng(4)
    t = L.plain()
    cb = rng.integers(-127, 128, (64, 96), dtype=np.int8)
    scb = (rng.random(64) * 3 + 0.01).astype(np.float32)
    p = "model.layers.0.mlp.down_proj."
    t[p + "weight"] = ("I8", (64, 96), cb.tobytes())
    t[p + "SCB"] = ("F32", (64,), scb.tobytes())
    ck = mx.open(str(L.write(tmp_path, t, {"quant_method": "bitsandbytes", "load_in_8bit": True})))
    want = F.int8_vectorwise_dequant(torch.from_numpy(cb), torch.from_numpy(scb)).numpy()
    assert ck.tensors[p + "weight"].kind == "BNB_INT8"
    np.testing.assert_array_equal(ck.read(p + "weight"), want)
