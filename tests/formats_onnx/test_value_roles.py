"""Deep checks read what a graph's constant is for (formats/graph_roles.py): −inf masks (a
constant that feeds Where, an additive mask before Softmax, −inf rows that Gather picks),
shape and index constants, scalars and unused initializers are no weights, so a healthy graph
has no nan_inf, all_zero or fp16_overflow finding; the same values in a weight still do. Each
model is built with onnx.helper and run by onnxruntime, so it is a graph that works."""

from __future__ import annotations

import numpy as np
import pytest

import model_explorer as mx
from model_explorer.checks.deep import deep_check

from .models import TP, _model, helper, numpy_helper, value

ort = pytest.importorskip("onnxruntime")
F32_MAX = np.finfo(np.float32).max
NEG_INF = np.float32(-np.inf)


def _attention(mask: np.ndarray, table: np.ndarray, bias: np.ndarray, w: np.ndarray):
    """scores = x @ w (+ zero bias via Gemm), masked by Where(cond, scores, -inf), an additive
    mask, and a row Gather picks from a table; Softmax; the shapes kept by a Reshape whose shape
    constant holds a 0 (keep that dimension)."""
    tri = np.triu(np.ones((4, 4), bool), 1)
    inits = [
        numpy_helper.from_array(w, "w"),
        numpy_helper.from_array(bias, "fc.bias"),
        numpy_helper.from_array(mask, "causal_mask"),
        numpy_helper.from_array(tri, "cond"),
        numpy_helper.from_array(np.array([NEG_INF], np.float32), "neg_inf"),
        numpy_helper.from_array(table, "mask_rows"),
        numpy_helper.from_array(np.array([0], np.int64), "row"),
        numpy_helper.from_array(np.array([0, 4], np.int64), "shape"),
        numpy_helper.from_array(np.array([0], np.int64), "axes"),
        numpy_helper.from_array(np.float32(0), "zero"),
        numpy_helper.from_array(np.zeros((16,), np.float32), "unused_buffer"),
    ]
    nodes = [
        helper.make_node("Gemm", ["x", "w", "fc.bias"], ["s0"]),
        helper.make_node("Reshape", ["s0", "shape"], ["s1"]),
        helper.make_node("Where", ["cond", "neg_inf", "s1"], ["s2"]),
        helper.make_node("Add", ["s2", "causal_mask"], ["s3"]),
        helper.make_node("Gather", ["mask_rows", "row"], ["picked"], axis=0),
        helper.make_node("Squeeze", ["picked", "axes"], ["picked1"]),
        helper.make_node("Add", ["s3", "picked1"], ["s4"]),
        helper.make_node("Add", ["s4", "zero"], ["s5"]),
        helper.make_node("Softmax", ["s5"], ["y"], axis=-1),
    ]
    return _model(nodes, inits, [value("x", shape=[4, 4])], [value("y", shape=[4, 4])])


def _healthy():
    rng = np.random.default_rng(3)
    mask = np.where(np.triu(np.ones((4, 4), bool), 1), F32_MAX * -1, 0).astype(np.float32)
    table = np.zeros((2, 4), np.float32)
    table[1] = NEG_INF
    return (mask, table, np.zeros(4, np.float32), rng.standard_normal((4, 4)).astype(np.float32))


def _deep(tmp_path, model, name="m.onnx"):
    import onnx

    path = tmp_path / name
    onnx.save_model(model, path)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    out = sess.run(None, {"x": np.ones((4, 4), np.float32)})[0]
    ckpt = mx.open(path)
    return ckpt, deep_check(ckpt), out


def test_masks_shapes_scalars_and_unused_constants_are_no_weights(tmp_path):
    ckpt, found, out = _deep(tmp_path, _attention(*_healthy()))
    assert np.isfinite(out).all()  # onnxruntime runs it: the masks do what masks do
    roles = {n: t.extra["role"] for n, t in ckpt.tensors.items()}
    assert roles == {"w": "weight", "fc.bias": "bias", "causal_mask": "mask", "cond": "mask",
                     "neg_inf": "mask", "mask_rows": "table", "row": "index", "shape": "index",
                     "axes": "index", "zero": "mask", "unused_buffer": "unused"}
    assert [f for f in found if f.severity in ("error", "warning")] == []


@pytest.mark.parametrize("change, code", [
    ("nan_in_mask", "nan_inf"),       # NaN is never a mask
    ("inf_in_weight", "nan_inf"),     # the same −inf in a weight is an error
    ("zero_weight", "all_zero"),
    ("huge_weight", "fp16_overflow"),
    ("plus_inf_row", "nan_inf"),      # a Gather table: only −inf rows are mask rows
])
def test_the_same_values_in_a_weight_are_still_reported(tmp_path, change, code):
    mask, table, bias, w = _healthy()
    if change == "nan_in_mask":
        mask[3, 0] = np.nan
    elif change == "inf_in_weight":
        w[1, 2] = NEG_INF
    elif change == "zero_weight":
        w[:] = 0
    elif change == "huge_weight":
        w[0, 0] = 1e6
    else:
        table[1, 0] = np.inf
    ckpt, found, _ = _deep(tmp_path, _attention(mask, table, bias, w))
    assert code in {f.code for f in found}, [str(f) for f in found]


def test_a_zero_bias_through_a_dequantize_is_a_bias(tmp_path):
    """TFLite and ONNX exports store a float16 bias and convert it before the Conv: the role is
    the Conv's input, seen through the Cast."""
    w = np.random.default_rng(1).standard_normal((2, 1, 1, 1)).astype(np.float32)
    inits = [numpy_helper.from_array(w, "conv.w"),
             numpy_helper.from_array(np.zeros(2, np.float16), "conv.b16")]
    nodes = [helper.make_node("Cast", ["conv.b16"], ["conv.b"], to=TP.FLOAT),
             helper.make_node("Conv", ["x", "conv.w", "conv.b"], ["y"])]
    model = _model(nodes, inits, [value("x", shape=[1, 1, 2, 2])], [value("y", shape=[1, 2, 2, 2])])
    import onnx

    path = tmp_path / "conv.onnx"
    onnx.save_model(model, path)
    ckpt = mx.open(path)
    assert ckpt.tensors["conv.b16"].extra["role"] == "bias"
    assert not [f for f in deep_check(ckpt) if f.severity != "info"]


def test_counters_and_scalars_of_a_torch_checkpoint(tmp_path):
    """BatchNorm's num_batches_tracked (0 before training) and an optimizer's step are counters,
    not weights: no all_zero, no fp16_overflow. A weight of zeros still is one."""
    torch = pytest.importorskip("torch")
    bn = torch.nn.BatchNorm1d(4).state_dict()
    for key in ("weight", "bias", "running_mean", "running_var"):  # trained values
        bn[key] = torch.rand(4) + 0.5
    state = {"model": bn, "optimizer": {"state": {0: {"step": torch.tensor(1e6)}}},
             "head.weight": torch.zeros(3, 4)}
    path = tmp_path / "ckpt.pt"
    torch.save(state, path)
    ckpt = mx.open(path)
    found = {(f.code, f.tensor) for f in deep_check(ckpt) if f.severity != "info"}
    assert found == {("all_zero", "head.weight")}, found
