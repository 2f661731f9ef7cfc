"""Quantized operators that take an integer weight with its scale and zero point as inputs of
the same node: each followed by position, as onnxruntime defines the op (a real file reuses W's
zero-point name for R, so names prove nothing). value = (code - zero_point) * scale.

- com.microsoft.DynamicQuantizeLSTM: X, W [D, I, 4H], R [D, H, 4H], B, sequence_lens, initial_h,
  initial_c, P, W_scale(8), W_zero_point(9), R_scale(10), R_zero_point(11); a scale is [D]
  (per direction) or [D, 4H] (per direction and column).
- com.microsoft.DynamicQuantizeMatMul: A, B [K, N], b_scale(2), b_zero_point(3): per tensor or
  per column [N].
- QLinearMatMul: a(0), a_scale(1), a_zero_point(2), b(3), b_scale(4), b_zero_point(5): a per
  tensor or per row, b per tensor or per column.
- QLinearConv: x, x_scale, x_zero_point, w(3) [M, C/group, k...], w_scale(4), w_zero_point(5):
  per tensor or per output channel [M].
- com.microsoft.QAttention: input, weight(1) [hidden, 3*hidden], bias, input_scale,
  weight_scale(4), mask_index, input_zero_point, weight_zero_point(7): per tensor or per column.
- MatMulInteger: B(1), b_zero_point(3); its scale is no input (a Mul after it applies it):
  quant.py finds it by onnxruntime's naming.

A weight whose scale is not a tensor stored in the file (computed by the graph) cannot be
dequantized: `onnx_quant_unresolved` says so and the codes stay as the integers they are.
"""

from __future__ import annotations

import dataclasses
from collections.abc import MutableMapping

from ...records import TensorInfo
from .quant import MS_DOMAIN, _attach, _get, _mismatch, _taken

CODES = ("I8", "U8")
# op -> (weight, scale, zero point) input positions, and the domains it lives in
OPS = {
    "DynamicQuantizeLSTM": (((1, 8, 9), (2, 10, 11)), (MS_DOMAIN,)),
    "DynamicQuantizeMatMul": (((1, 2, 3),), (MS_DOMAIN,)),
    "QLinearMatMul": (((0, 1, 2), (3, 4, 5)), ("", "ai.onnx", MS_DOMAIN)),
    "QLinearConv": (((3, 4, 5),), ("", "ai.onnx", MS_DOMAIN)),
    "QAttention": (((1, 4, 7),), (MS_DOMAIN,)),
}


def group_quant_ops(tensors: MutableMapping, rec, rep) -> None:
    """Group each stored integer weight of a quantized op with its scale and zero point."""
    spec = OPS.get(rec.op_type)
    if spec is None or rec.domain not in spec[1]:
        return
    if rec.op_type == "QLinearConv":
        _bias_codes(tensors, rec, rep)
    for w_at, s_at, z_at in spec[0]:
        w = _get(tensors, rec, w_at)
        if w is None or _taken(w) or w.dtype not in CODES or not w.shape:
            continue
        s, z = _get(tensors, rec, s_at), _get(tensors, rec, z_at)
        if s is None:
            _unresolved(rep, rec, w, rec.inputs[s_at] if s_at < len(rec.inputs) else "")
            continue
        layout = _layout(rec.op_type, w_at, w, s)
        if layout is None:
            _mismatch(rep, rec, f"scale {s.name!r} is {list(s.shape)}; {rec.op_type}'s input "
                      f"{w_at} {list(w.shape)} takes one scale, or one per "
                      f"{_per(rec.op_type, w_at)}", w)
            continue
        axis, block, shape = layout
        if shape is not None:  # the same bytes seen in the shape the codec indexes by
            s = dataclasses.replace(s, shape=shape)
            if z is not None and z.numel == s.numel:
                z = dataclasses.replace(z, shape=shape)
        _attach(tensors, rec, rep, w, s, z, axis, block, _how(rec.op_type))


def _how(op: str) -> str:
    return {"DynamicQuantizeLSTM": "DQLSTM", "DynamicQuantizeMatMul": "DQMATMUL",
            "QLinearMatMul": "QLINEAR", "QLinearConv": "QLINEAR", "QAttention": "QATTN"}[op]


def _per(op: str, at: int) -> str:
    if op == "DynamicQuantizeLSTM":
        return "direction [D] or per direction and column [D, 4H]"
    if op == "QLinearConv":
        return "output channel"
    if op == "QLinearMatMul" and at == 0:
        return "row"
    return "column"


def _layout(op: str, at: int, w: TensorInfo, s: TensorInfo):
    """(axis, block, the scale's shape as the codec indexes it or None) for this op's weight
    and scale, None when the scale fits no layout the op defines."""
    shape, n = tuple(w.shape), s.numel
    rank = len(shape)
    if n == 1:
        return 0, 0, ()
    if op == "DynamicQuantizeLSTM":
        if rank != 3:
            return None
        d, inner, cols = shape
        if n == d and tuple(s.shape) in ((d,), (d, 1)):
            return 0, 0, (d,)
        if tuple(s.shape) == (d, cols):
            # per direction and column: blocks spanning the whole middle axis
            return (2, 0, (cols,)) if d == 1 else (1, inner, (d, 1, cols))
        return None
    if op == "QLinearConv":
        return (0, 0, (shape[0],)) if n == shape[0] and len(s.shape) == 1 else None
    if rank < 2:
        return None
    axis = rank - 2 if op == "QLinearMatMul" and at == 0 else rank - 1
    return (axis, 0, (shape[axis],)) if n == shape[axis] and len(s.shape) == 1 else None


def _unresolved(rep, rec, w: TensorInfo, scale: str) -> None:
    rep.warning("onnx_quant_unresolved", f"{w.name!r} ({w.dtype} {list(w.shape)}) is the "
                f"quantized weight of {rec.op_type} node {rec.name or rec.outputs[:1]!r}, but its "
                f"scale {scale!r} is not a tensor stored in the file (the graph computes it, or "
                "it is missing): it cannot be dequantized here, and its values are the integer "
                "codes, not the weights.", rec.at, rec.length, w.name)


def _bias_codes(tensors: MutableMapping, rec, rep) -> None:
    """QLinearConv's bias (input 8) is int32 in units of x_scale * w_scale, a product this
    reader's codecs do not apply: said, so the codes never pass for the bias itself."""
    b = _get(tensors, rec, 8)
    if b is None or _taken(b) or b.dtype != "I32":
        return
    rep.warning("onnx_quant_bias_codes", f"{b.name!r} ({b.dtype} {list(b.shape)}) is the bias of "
                f"QLinearConv node {rec.name or rec.outputs[:1]!r}: int32 codes in units of "
                "x_scale * w_scale (inputs 1 and 4). The values shown are those codes, not the "
                "bias; multiply by both scales to read it.", rec.at, rec.length, b.name)
