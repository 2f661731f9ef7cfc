"""Small ONNX models written by the onnx package itself (onnx.helper, numpy_helper, save_model),
and the reference values every test compares against (onnx.numpy_helper.to_array)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto as TP  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402

RNG = np.random.default_rng(7)
OPSET = 21


def _model(nodes, inits, inputs, outputs, opsets=(("", OPSET),), name="g"):
    graph = helper.make_graph(nodes, name, inputs, outputs, inits)
    model = helper.make_model(graph, producer_name="model_explorer tests", producer_version="1",
                              opset_imports=[helper.make_opsetid(d, v) for d, v in opsets])
    model.ir_version = 10  # onnxruntime 1.32 reads up to IR 11
    return model


def value(name, dtype=TP.FLOAT, shape=None):
    return helper.make_tensor_value_info(name, dtype, shape)


def plain_model(path: Path) -> Path:
    """Every storage place: raw_data (f32, f16, bf16, int8, int64, bool), packed typed fields
    (float_data, int32_data, int64_data, double_data, uint64_data, f16 bit patterns), a Constant
    node and an If whose branches hold initializers and Constants."""
    w = RNG.standard_normal((8, 4)).astype(np.float32)
    inits = [
        numpy_helper.from_array(w, "linear.weight"),
        numpy_helper.from_array(RNG.standard_normal(4).astype(np.float16), "half"),
        helper.make_tensor("bf", TP.BFLOAT16, [3], np.array([1.5, -2.25, 3.0], np.float32)),
        numpy_helper.from_array(np.array([-128, 0, 127, 5], np.int8), "codes"),
        numpy_helper.from_array(np.array([2**40, -3], np.int64), "big"),
        numpy_helper.from_array(np.array([True, False, True]), "mask"),
        helper.make_tensor("typed_float", TP.FLOAT, [2, 2], [1.0, -2.0, 3.5, 4.25]),
        helper.make_tensor("typed_int32", TP.INT32, [3], [1, -2, 70000]),
        helper.make_tensor("typed_int8", TP.INT8, [3], [-100, 0, 100]),
        helper.make_tensor("typed_int64", TP.INT64, [2], [-(2**50), 9]),
        helper.make_tensor("typed_double", TP.DOUBLE, [2], [0.1, -1e30]),
        helper.make_tensor("typed_uint64", TP.UINT64, [2], [2**63 + 5, 1]),
        helper.make_tensor("typed_uint32", TP.UINT32, [2], [2**32 - 1, 7]),
        helper.make_tensor("typed_half", TP.FLOAT16, [3], np.array([0.5, -1.0, 65504.0], np.float16)),
        helper.make_tensor("empty", TP.FLOAT, [0, 3], []),
        numpy_helper.from_array(np.float32(2.5), "scalar"),
    ]
    const = helper.make_node("Constant", [], ["const_out"],
                             value=numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3)))
    then_w = numpy_helper.from_array(RNG.standard_normal((4,)).astype(np.float32), "then.bias")
    else_c = helper.make_node("Constant", [], ["else_const"],
                              value=numpy_helper.from_array(np.full(4, -1.0, np.float32)))
    then_g = helper.make_graph([helper.make_node("Add", ["y0", "then.bias"], ["r"])], "then",
                               [], [value("r", shape=[1, 4])], [then_w])
    else_g = helper.make_graph([else_c, helper.make_node("Add", ["y0", "else_const"], ["r2"])],
                               "else", [], [value("r2", shape=[1, 4])])
    nodes = [const, helper.make_node("MatMul", ["x", "linear.weight"], ["y0"]),
             helper.make_node("If", ["cond"], ["y"], then_branch=then_g, else_branch=else_g)]
    model = _model(nodes, inits, [value("x", shape=[1, 8]), value("cond", TP.BOOL, [])],
                   [value("y", shape=[1, 4])])
    onnx.save_model(model, str(path))
    return path


def external_model(path: Path, threshold: int = 64) -> Path:
    """Tensors above `threshold` bytes in model.onnx_data beside the model (onnx's own writer)."""
    inits = [numpy_helper.from_array(RNG.standard_normal((16, 8)).astype(np.float32), "big.weight"),
             numpy_helper.from_array(RNG.standard_normal((32,)).astype(np.float16), "big.half"),
             numpy_helper.from_array(np.ones(2, np.float32), "small")]
    model = _model([helper.make_node("MatMul", ["x", "big.weight"], ["y"])], inits,
                   [value("x", shape=[1, 16])], [value("y", shape=[1, 8])])
    onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location=path.name + "_data", size_threshold=threshold)
    return path


def reference(path: Path) -> dict[str, np.ndarray]:
    """Every initializer and Constant value as onnx reads it, subgraphs included (names as the
    reader gives them: a Constant by its output)."""
    model = onnx.load(str(path), load_external_data=True)
    out: dict[str, np.ndarray] = {}

    def walk(graph):
        for t in graph.initializer:
            out[t.name] = numpy_helper.to_array(t)
        for node in graph.node:
            for a in node.attribute:
                if node.op_type == "Constant" and a.name == "value":
                    out[node.output[0]] = numpy_helper.to_array(a.t)
                for g in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                    walk(g)

    walk(model.graph)
    return out


# -- quantized ---------------------------------------------------------------------------------

def qdq_model(path: Path, dtype=TP.INT8, axis: int | None = None, block: int = 0,
              zero: bool = True, raw: bool = True) -> tuple[Path, np.ndarray]:
    """A DequantizeLinear of a weight initializer: per tensor, per axis or blocked; returns the
    file and the weight as onnxruntime dequantizes it (run in the test)."""
    shape = (6, 8)
    np_codes = {TP.INT8: np.int8, TP.UINT8: np.uint8, TP.INT4: np.int8, TP.UINT4: np.uint8,
                TP.INT16: np.int16, TP.UINT16: np.uint16}[dtype]
    lo, hi = {TP.INT8: (-128, 127), TP.UINT8: (0, 255), TP.INT4: (-8, 7), TP.UINT4: (0, 15),
              TP.INT16: (-3000, 3000), TP.UINT16: (0, 6000)}[dtype]
    codes = RNG.integers(lo, hi + 1, shape).astype(np_codes)
    if axis is None:
        s_shape = []
    elif block:
        s_shape = list(shape)
        s_shape[axis] = -(-shape[axis] // block)
    else:
        s_shape = [shape[axis]]
    scale = (RNG.random(s_shape) * 0.1 + 0.01).astype(np.float32)
    zp = RNG.integers(lo, hi + 1, s_shape).astype(np_codes)
    inits = [helper.make_tensor("w_q", dtype, shape, codes.ravel().tolist()),
             numpy_helper.from_array(scale, "w_scale")]
    inputs = ["w_q", "w_scale"]
    if zero:
        inits.append(helper.make_tensor("w_zp", dtype, s_shape, np.atleast_1d(zp).ravel().tolist()))
        inputs.append("w_zp")
    attrs = {} if axis is None else {"axis": axis}
    if block:
        attrs["block_size"] = block
    nodes = [helper.make_node("DequantizeLinear", inputs, ["w"], **attrs),
             helper.make_node("MatMul", ["x", "w"], ["y"])]
    model = _model(nodes, inits, [value("x", shape=[1, 6])], [value("y", shape=[1, 8])])
    # raw_data as exporters write it (onnx.helper.make_tensor writes int32_data varints)
    for t in model.graph.initializer:
        if raw or t.data_type in (TP.INT4, TP.UINT4):
            arr = numpy_helper.to_array(t)
            t.CopyFrom(numpy_helper.from_array(arr, t.name))
    onnx.save_model(model, str(path))
    weight = run_dequantize(model)
    return path, weight


def run_dequantize(model) -> np.ndarray:
    """onnxruntime's own value of the graph's weight: the DequantizeLinear output."""
    ort = pytest.importorskip("onnxruntime")
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    del probe.graph.output[:]
    probe.graph.output.append(value("w"))
    sess = ort.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(["w"], {"x": np.zeros((1, 6), np.float32)})[0]
