"""GPTQ and AWQ: packed by the libraries' own loops from a known weight, read back exactly."""

from __future__ import annotations

import numpy as np
import pytest

import model_explorer as mx

from . import packers as P

M = "model.layers.0.self_attn.q_proj"


def _gptq(tmp_path, bits=4, group=32, act_order=False, v2=False, sym=False, out=64, inp=128):
    rng = np.random.default_rng(bits * 7 + group)
    parts, w = P.gptq_layer(rng, out, inp, bits, group, act_order, v2, sym)
    q = {"quant_method": "gptq", "bits": bits, "group_size": group, "desc_act": act_order,
         "sym": sym, "checkpoint_format": "gptq_v2" if v2 else "gptq"}
    return mx.open(str(P.folder(tmp_path, {M: parts}, q))), w


@pytest.mark.parametrize("bits", [2, 3, 4, 8])
@pytest.mark.parametrize("act_order", [False, True])
def test_gptq_bits_and_act_order(tmp_path, bits, act_order):
    ck, w = _gptq(tmp_path, bits, act_order=act_order)
    t = ck.tensors[M + ".weight"]
    assert t.kind == f"GPTQ_Q{bits}" and t.shape == (64, 128)
    got = ck.read(M + ".weight")
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, w)


@pytest.mark.parametrize("v2,sym,group", [(True, False, 32), (False, True, 128), (False, False, -1)])
def test_gptq_format_sym_group(tmp_path, v2, sym, group):
    ck, w = _gptq(tmp_path, 4, group, v2=v2, sym=sym)
    np.testing.assert_array_equal(ck.read(M + ".weight"), w)


def test_gptq_row_slices_read_only_their_columns(tmp_path):
    ck, w = _gptq(tmp_path, 3, act_order=True)
    name = M + ".weight"
    np.testing.assert_array_equal(ck.read(name, rows=slice(5, 9)), w[5:9])
    np.testing.assert_array_equal(ck.read(name, rows=17), w[17])
    np.testing.assert_array_equal(ck.read(name, rows=slice(60, 2, -7)), w[60:2:-7])
    st = ck.stats(name, exact=True)
    assert st is not None


def test_gptq_bad_gidx_and_scales(tmp_path):
    rng = np.random.default_rng(1)
    parts, _ = P.gptq_layer(rng, 64, 128, 4, 32)
    parts["g_idx"] = ("I32", (128,), np.full(128, 9, np.int32).tobytes())
    ck = mx.open(str(P.folder(tmp_path / "a", {M: parts}, {"quant_method": "gptq", "bits": 4,
                                                             "group_size": 32})))
    with pytest.raises(ValueError, match="g_idx.*group 9"):
        ck.read(M + ".weight")
    assert any(f.code == "undecodable" and f.tensor == M + ".weight" for f in ck.findings)
    parts, _ = P.gptq_layer(rng, 64, 128, 4, 32)
    sc = np.ones((4, 64), np.float16)
    sc[2, 3] = np.nan
    parts["scales"] = ("F16", (4, 64), sc.tobytes())
    ck = mx.open(str(P.folder(tmp_path / "b", {M: parts}, {"quant_method": "gptq", "bits": 4,
                                                             "group_size": 32})))
    with pytest.raises(ValueError, match="scales.*non-finite"):
        ck.read(M + ".weight")


def test_awq_gemm(tmp_path):
    rng = np.random.default_rng(3)
    parts, w = P.awq_layer(rng, 64, 128, 32)
    q = {"quant_method": "awq", "bits": 4, "group_size": 32, "zero_point": True, "version": "gemm"}
    ck = mx.open(str(P.folder(tmp_path, {M: parts}, q)))
    name = M + ".weight"
    assert ck.tensors[name].kind == "AWQ_Q4"
    np.testing.assert_array_equal(ck.read(name), w)
    np.testing.assert_array_equal(ck.read(name, rows=slice(3, 20, 5)), w[3:20:5])
