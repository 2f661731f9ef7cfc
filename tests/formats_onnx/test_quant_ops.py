"""Integer weights of onnxruntime's quantized operators, grouped with their scale and zero point
by input position (formats/onnx/quant_ops.py): the values read equal onnxruntime's definition,
value = (code - zero_point) * scale, and where onnxruntime runs the op, its output."""

from __future__ import annotations

import numpy as np
import pytest

import model_explorer as mx

from .models import TP, _model, helper, numpy_helper, value

ort = pytest.importorskip("onnxruntime")
MS = ("com.microsoft", 1)
RNG = np.random.default_rng(11)


def _codes(shape, dtype=np.int8):
    info = np.iinfo(dtype)
    return RNG.integers(info.min, info.max + 1, shape).astype(dtype)


def _save(tmp_path, model, name="q.onnx"):
    import onnx

    path = tmp_path / name
    onnx.save_model(model, path)
    return path


def _run(path, feeds):
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _expect(codes, scale, zero, shape):
    """onnxruntime's definition, broadcast the way the op's documentation says."""
    z = np.zeros_like(scale, np.float32) if zero is None else zero.astype(np.float32)
    return ((codes.astype(np.float32) - z.reshape(shape)) * scale.reshape(shape)).astype(np.float32)


@pytest.mark.parametrize("per_column", [False, True])
def test_dynamic_quantize_matmul_equals_onnxruntime(tmp_path, per_column):
    K, N = 6, 5
    b = _codes((K, N))
    scale = (RNG.random(N if per_column else 1) * 0.1 + 0.01).astype(np.float32)
    zero = _codes(scale.shape)
    inits = [numpy_helper.from_array(b, "B"), numpy_helper.from_array(scale.reshape(-1 if per_column else ()), "b_scale"),
             numpy_helper.from_array(zero.reshape(-1 if per_column else ()), "b_zp")]
    node = helper.make_node("DynamicQuantizeMatMul", ["A", "B", "b_scale", "b_zp"], ["Y"], domain=MS[0])
    path = _save(tmp_path, _model([node], inits, [value("A", shape=[K, K])], [value("Y", shape=[K, N])],
                                  opsets=(("", 21), MS)))
    ckpt = mx.open(path)
    assert not ckpt.errors and ckpt.tensors["B"].quant.label == "DQMATMUL_I8"
    got = ckpt.read("B")
    want = _expect(b, scale, zero, (1, -1))
    np.testing.assert_allclose(got, want, rtol=1e-6)
    (y,) = _run(path, {"A": np.eye(K, dtype=np.float32)})  # identity in: the weight out
    np.testing.assert_allclose(got, y, rtol=1e-5, atol=1e-6)


def _lstm(tmp_path, D, per_column, shared_zero_point):
    n_in, H = 3, 2
    w, r = _codes((D, n_in, 4 * H)), _codes((D, H, 4 * H))
    shape = (D, 4 * H) if per_column else (D,)
    ws, rs = (RNG.random(shape) * 0.05 + 0.01).astype(np.float32), (RNG.random(shape) * 0.05 + 0.01).astype(np.float32)
    wz, rz = np.zeros(shape, np.int8), np.zeros(shape, np.int8)  # onnxruntime: int8 is symmetric
    if shared_zero_point:  # one real file (onnx's dynamic quantizer) names W's zero point for R too
        rz = wz
    inits = [numpy_helper.from_array(w, "W"), numpy_helper.from_array(r, "R"),
             numpy_helper.from_array(ws, "W_scale"), numpy_helper.from_array(wz, "W_zero_point"),
             numpy_helper.from_array(rs, "R_scale")]
    if not shared_zero_point:
        inits.append(numpy_helper.from_array(rz, "R_zero_point"))
    node = helper.make_node(
        "DynamicQuantizeLSTM", ["X", "W", "R", "", "", "", "", "", "W_scale", "W_zero_point", "R_scale",
                                "W_zero_point" if shared_zero_point else "R_zero_point"],
        ["Y"], domain=MS[0], hidden_size=H, direction="bidirectional" if D == 2 else "forward")
    model = _model([node], inits, [value("X", shape=[4, 1, n_in])], [value("Y", shape=None)],
                   opsets=(("", 21), MS))
    path = _save(tmp_path, model)
    bshape = (D, 1, 4 * H) if per_column else (D, 1, 1)
    return path, {"W": _expect(w, ws, wz, bshape), "R": _expect(r, rs, rz, bshape)}, (n_in, H, D)


@pytest.mark.parametrize("D, per_column, shared", [(1, False, False), (1, True, True), (2, True, False),
                                                   (2, False, True)])
def test_dynamic_quantize_lstm_weights_by_position(tmp_path, D, per_column, shared):
    """W and R with their own scale and zero point inputs (8-11), per direction or per direction
    and column; the output of onnxruntime's DynamicQuantizeLSTM equals a float LSTM built from
    the values read (ONNX's LSTM takes W as [D, 4H, I]: the transpose)."""
    path, want, (n_in, H, D) = _lstm(tmp_path, D, per_column, shared)
    ckpt = mx.open(path)
    assert not ckpt.errors and not ckpt.warnings, [str(f) for f in ckpt.findings]
    for name in ("W", "R"):
        assert ckpt.tensors[name].quant.label == "DQLSTM_I8"
        np.testing.assert_allclose(ckpt.read(name), want[name], rtol=1e-6)
    x = RNG.standard_normal((4, 1, n_in)).astype(np.float32)
    (y_q,) = _run(path, {"X": x})
    direction = "bidirectional" if D == 2 else "forward"
    inits = [numpy_helper.from_array(np.ascontiguousarray(ckpt.read(n).transpose(0, 2, 1)), n)
             for n in ("W", "R")]
    ref = _model([helper.make_node("LSTM", ["X", "W", "R"], ["Y"], hidden_size=H, direction=direction)],
                 inits, [value("X", shape=[4, 1, n_in])], [value("Y", shape=None)])
    (y_f,) = _run(_save(tmp_path, ref, "ref.onnx"), {"X": x})
    np.testing.assert_allclose(y_q, y_f, atol=0.03)  # X is quantized to 8 bits on the way in


def test_qlinear_matmul_conv_and_qattention_weights(tmp_path):
    K, N, M, C = 4, 3, 2, 3
    a, b = _codes((2, K), np.uint8), _codes((K, N), np.uint8)
    w = _codes((M, C, 1, 1))
    qw = _codes((4, 12))
    f = np.float32
    inits = [numpy_helper.from_array(b, "b"), numpy_helper.from_array((RNG.random(N) * .1 + .01).astype(f), "b_scale"),
             numpy_helper.from_array(_codes((N,), np.uint8), "b_zp"),
             numpy_helper.from_array(f(0.02), "a_scale"), numpy_helper.from_array(np.uint8(3), "a_zp"),
             numpy_helper.from_array(f(0.5), "y_scale"), numpy_helper.from_array(np.uint8(0), "y_zp"),
             numpy_helper.from_array(w, "w"), numpy_helper.from_array((RNG.random(M) * .1 + .01).astype(f), "w_scale"),
             numpy_helper.from_array(np.zeros(M, np.int8), "w_zp"),
             numpy_helper.from_array(f(0.1), "x_scale"), numpy_helper.from_array(np.uint8(128), "x_zp"),
             numpy_helper.from_array(qw, "qw"), numpy_helper.from_array(f(0.03), "qw_scale"),
             numpy_helper.from_array(np.int8(2), "qw_zp"),
             numpy_helper.from_array(RNG.standard_normal(12).astype(f), "qb")]
    nodes = [helper.make_node("QLinearMatMul", ["a", "a_scale", "a_zp", "b", "b_scale", "b_zp", "y_scale", "y_zp"], ["y"]),
             helper.make_node("QLinearConv", ["x", "x_scale", "x_zp", "w", "w_scale", "w_zp", "y_scale", "y_zp"], ["c"]),
             helper.make_node("QAttention", ["h", "qw", "qb", "a_scale", "qw_scale", "", "a_zp", "qw_zp"], ["att"],
                              domain=MS[0], num_heads=2)]
    model = _model(nodes, inits, [value("a", TP.UINT8, [2, K]), value("x", TP.UINT8, [1, C, 2, 2]),
                                  value("h", TP.UINT8, [1, 2, 4])],
                   [value("y", TP.UINT8, None), value("c", TP.UINT8, None), value("att", TP.FLOAT, None)],
                   opsets=(("", 21), MS))
    path = _save(tmp_path, model)
    _run(path, {"a": a, "x": _codes((1, C, 2, 2), np.uint8), "h": _codes((1, 2, 4), np.uint8)})
    ckpt = mx.open(path)
    assert not ckpt.errors and not ckpt.warnings, [str(x) for x in ckpt.findings]
    ref = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    np.testing.assert_allclose(ckpt.read("b"), _expect(b, ref["b_scale"], ref["b_zp"], (1, -1)), rtol=1e-6)
    np.testing.assert_allclose(ckpt.read("w"), _expect(w, ref["w_scale"], ref["w_zp"], (-1, 1, 1, 1)), rtol=1e-6)
    np.testing.assert_allclose(ckpt.read("qw"), _expect(qw, ref["qw_scale"], ref["qw_zp"], ()), rtol=1e-6)


def test_a_qlinear_conv_int32_bias_is_said_to_be_codes(tmp_path):
    """Its scale is x_scale * w_scale, which no codec here applies: the codes are shown as what
    they are, with a finding, never as the bias."""
    M, C = 2, 3
    f = np.float32
    bias = np.array([1000, -250], np.int32)
    inits = [numpy_helper.from_array(_codes((M, C, 1, 1)), "w"), numpy_helper.from_array(f(0.05), "w_scale"),
             numpy_helper.from_array(np.int8(0), "w_zp"), numpy_helper.from_array(f(0.1), "x_scale"),
             numpy_helper.from_array(np.uint8(128), "x_zp"), numpy_helper.from_array(f(0.5), "y_scale"),
             numpy_helper.from_array(np.uint8(0), "y_zp"), numpy_helper.from_array(bias, "bias")]
    node = helper.make_node("QLinearConv", ["x", "x_scale", "x_zp", "w", "w_scale", "w_zp", "y_scale", "y_zp",
                                            "bias"], ["c"])
    model = _model([node], inits, [value("x", TP.UINT8, [1, C, 2, 2])], [value("c", TP.UINT8, None)])
    path = _save(tmp_path, model)
    _run(path, {"x": _codes((1, C, 2, 2), np.uint8)})  # onnxruntime takes the op as built
    ckpt = mx.open(path)
    (found,) = [x for x in ckpt.findings if x.code == "onnx_quant_bias_codes"]
    assert found.tensor == "bias" and "x_scale * w_scale" in found.message and found.fix
    assert ckpt.read("bias").tolist() == bias.tolist()  # the codes, said to be codes


def test_a_weight_whose_scale_is_computed_says_so(tmp_path):
    b = _codes((3, 2))
    inits = [numpy_helper.from_array(b, "B")]
    node = helper.make_node("DynamicQuantizeMatMul", ["A", "B", "s"], ["Y"], domain=MS[0])
    path = _save(tmp_path, _model([node], inits, [value("A", shape=[3, 3]), value("s", shape=[])],
                                  [value("Y", shape=[3, 2])], opsets=(("", 21), MS)))
    ckpt = mx.open(path)
    (f,) = [f for f in ckpt.findings if f.code == "onnx_quant_unresolved"]
    assert f.tensor == "B" and "integer codes, not the weights" in f.message
    bad = np.ones(4, np.float32)  # a scale of a shape the op does not define
    inits = [numpy_helper.from_array(b, "B"), numpy_helper.from_array(bad, "s")]
    path = _save(tmp_path, _model([node], inits, [value("A", shape=[3, 3])], [value("Y", shape=[3, 2])],
                                  opsets=(("", 21), MS)), "bad.onnx")
    ckpt = mx.open(path)
    assert [f.code for f in ckpt.findings] == ["onnx_quant_mismatch"] and ckpt.tensors["B"].quant is None


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_onnx_dynamic_quantizer_lstm_equals_the_float_weights(tmp_path):
    """What onnxruntime.quantization.quantize_dynamic writes for a bidirectional LSTM
    (DynamicQuantizeLSTM, W's zero point named for R as well): every weight within half a step of
    the float export's (ONNX LSTM's W is [D, 4H, I], the quantized op's [D, I, 4H])."""
    torch = pytest.importorskip("torch")
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    lstm = torch.nn.LSTM(8, 16, bidirectional=True)
    src, out = tmp_path / "lstm.onnx", tmp_path / "lstm_q.onnx"
    torch.onnx.export(lstm, (torch.randn(5, 1, 8),), src, dynamo=False, opset_version=17)
    quantize_dynamic(src, out, weight_type=QuantType.QInt8, op_types_to_quantize=["LSTM"])
    ref = {t.name: numpy_helper.to_array(t) for t in onnx.load(src).graph.initializer}
    ckpt = mx.open(out)
    node = next(n for n in onnx.load(out).graph.node if n.op_type == "DynamicQuantizeLSTM")
    assert not ckpt.errors and not ckpt.warnings
    for w_at, s_at in ((1, 8), (2, 10)):
        name = node.input[w_at]
        assert ckpt.tensors[name].quant.label == "DQLSTM_I8"
        step = float(np.max(ckpt.read(node.input[s_at])))
        float_w = ref[name[: -len("_quantized")]].transpose(0, 2, 1)
        assert np.abs(ckpt.read(name) - float_w).max() <= step / 2 + 1e-7
