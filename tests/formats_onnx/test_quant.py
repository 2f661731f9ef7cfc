"""Quantized ONNX weights decode to the values onnxruntime computes: DequantizeLinear (per
tensor, per axis, blocked int4), quantize_dynamic's MatMulInteger weights, and MatMulNBits
blocks written by onnxruntime's own quantizer; statistics see weights, never codes."""

from __future__ import annotations

import numpy as np
import pytest

import model_explorer as mx

from . import models

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
TP = onnx.TensorProto


@pytest.mark.parametrize("dtype, axis, block, zero, raw", [
    (TP.INT8, None, 0, True, True),
    (TP.INT8, None, 0, True, False),
    (TP.UINT8, 1, 0, True, True),
    (TP.UINT8, 1, 0, True, False),
    (TP.INT8, 0, 0, False, True),
    (TP.INT16, None, 0, True, True),
    (TP.UINT16, 1, 0, True, False),
    (TP.INT4, 0, 4, True, True),
    (TP.UINT4, 1, 4, True, True),
    (TP.INT4, 1, 3, False, True),
])
def test_dequantize_linear_equals_onnxruntime(tmp_path, dtype, axis, block, zero, raw):
    path, want = models.qdq_model(tmp_path / "qdq.onnx", dtype, axis, block, zero, raw)
    ckpt = mx.open(str(path))
    assert [f for f in ckpt.findings if f.severity != "info"] == []
    w = ckpt.tensors["w_q"]
    assert w.quant.codec == "onnx_qdq" and w.quant.parts["scale"].name == "w_scale"
    np.testing.assert_array_equal(ckpt.read("w_q"), want)
    np.testing.assert_array_equal(ckpt.read("w_q", rows=slice(2, 5)), want[2:5])
    st = ckpt.stats("w_q")
    assert st.min == pytest.approx(float(want.min())) and st.max == pytest.approx(float(want.max()))


def test_scale_of_the_wrong_shape_is_a_finding_not_values(tmp_path):
    from onnx import helper, numpy_helper

    inits = [numpy_helper.from_array(np.zeros((4, 6), np.int8), "w_q"),
             numpy_helper.from_array(np.ones(5, np.float32), "w_scale")]
    nodes = [helper.make_node("DequantizeLinear", ["w_q", "w_scale"], ["w"], axis=1)]
    model = models._model(nodes, inits, [], [models.value("w")])
    (tmp_path / "bad.onnx").write_bytes(model.SerializeToString())
    ckpt = mx.open(str(tmp_path / "bad.onnx"))
    (f,) = [f for f in ckpt.findings if f.code == "onnx_quant_mismatch"]
    assert f.tensor == "w_q" and "per axis 1" in f.message
    assert ckpt.tensors["w_q"].quant is None  # left as the int8 it is, said so


def _matmul_model(K: int, N: int):
    from onnx import helper, numpy_helper

    w = models.RNG.standard_normal((K, N)).astype(np.float32)
    model = models._model([helper.make_node("MatMul", ["x", "fc.weight"], ["y"], name="fc")],
                          [numpy_helper.from_array(w, "fc.weight")],
                          [models.value("x", shape=[K, K])], [models.value("y", shape=[K, N])])
    return model, w


@pytest.mark.parametrize("bits, symmetric, block", [(4, False, 32), (4, True, 16), (8, False, 32)])
def test_matmul_nbits_from_onnxruntime_quantizer_equals_its_own_run(tmp_path, bits, symmetric, block):
    mnq = pytest.importorskip("onnxruntime.quantization.matmul_nbits_quantizer")
    K, N = 80, 24  # K not a multiple of the block: the last block is padded
    model, w = _matmul_model(K, N)
    q = mnq.MatMulNBitsQuantizer(model, bits=bits, block_size=block, is_symmetric=symmetric)
    q.process()
    qmodel = q.model.model
    path = tmp_path / "q.onnx"
    onnx.save_model(qmodel, str(path))
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    ref = sess.run(None, {"x": np.eye(K, dtype=np.float32)})[0]  # = the dequantized [K, N]
    ckpt = mx.open(str(path))
    assert [f for f in ckpt.findings if f.severity != "info"] == []
    (name,) = [n for n, t in ckpt.tensors.items() if t.quant and t.quant.codec == "onnx_matmul_nbits"]
    t = ckpt.tensors[name]
    assert t.shape == (N, K) and t.label == f"MATMULNBITS_Q{bits}"
    got = ckpt.read(name)
    np.testing.assert_allclose(got.T, ref, rtol=1e-6, atol=1e-6)
    assert np.abs(got.T - w).max() < np.abs(w).max() / (2 ** (bits - 2))  # near the float weight
    np.testing.assert_array_equal(ckpt.read(name, rows=slice(3, 7)), got[3:7])
    # the blocks view: value = scale * (code - zero point), block by block along K
    b = ckpt.blocks(name, count=3)
    assert b.block_elems == block and b.offsets[0] == t.quant.parts["B"].offset
    want = b.scale[:, None] * (b.codes.astype(np.float32) - b.zero_point[:, None])
    inside = np.isfinite(b.values)  # K = 80 ends inside a block: its tail is padding (NaN)
    assert inside.sum() >= 2 * block
    np.testing.assert_allclose(b.values[inside], want[inside], rtol=1e-6, atol=1e-7)


def test_quantize_dynamic_weights_are_dequantized(tmp_path):
    from onnx import numpy_helper
    from onnxruntime.quantization import QuantType, quantize_dynamic

    model, w = _matmul_model(32, 16)
    src, dst = tmp_path / "f.onnx", tmp_path / "q.onnx"
    onnx.save_model(model, str(src))
    quantize_dynamic(str(src), str(dst), weight_type=QuantType.QUInt8, per_channel=True)
    loaded = onnx.load(str(dst))
    arrays = {t.name: numpy_helper.to_array(t) for t in loaded.graph.initializer}
    ops = {n.op_type for n in loaded.graph.node}
    assert "MatMulInteger" in ops
    want = (arrays["fc.weight_quantized"].astype(np.float32)
            - arrays["fc.weight_zero_point"].astype(np.float32)) * arrays["fc.weight_scale"]
    ckpt = mx.open(str(dst))
    t = ckpt.tensors["fc.weight_quantized"]
    assert t.quant.codec == "onnx_qdq" and t.label == "DYN_U8"
    np.testing.assert_allclose(ckpt.read("fc.weight_quantized"), want, rtol=1e-6)
    assert np.abs(ckpt.read("fc.weight_quantized") - w).max() <= arrays["fc.weight_scale"].max()


@pytest.mark.parametrize("attrs", [{"axis": 1.5}, {"block_size": -2}, {"axis": 7}])
def test_attributes_of_the_wrong_kind_are_findings(tmp_path, attrs):
    from onnx import helper, numpy_helper

    inits = [numpy_helper.from_array(np.zeros((4, 6), np.int8), "w_q"),
             numpy_helper.from_array(np.ones(6, np.float32), "w_scale")]
    nodes = [helper.make_node("DequantizeLinear", ["w_q", "w_scale"], ["w"], **attrs)]
    model = models._model(nodes, inits, [], [models.value("w")])
    (tmp_path / "bad.onnx").write_bytes(model.SerializeToString())
    ckpt = mx.open(str(tmp_path / "bad.onnx"))
    assert [f.code for f in ckpt.findings] == ["onnx_quant_mismatch"]
    assert ckpt.tensors["w_q"].quant is None
