"""Quantized ONNX weights recognised from the graph: which integer initializer is a weight, and
with which scale and zero point, so tensors/schemes/onnx_quant.py shows dequantized values.

- QDQ (DequantizeLinear, opset 10-23 and com.microsoft): x (int8/uint8/int16/uint16/int4/uint4/
  int32), x_scale, x_zero_point; attributes axis (default 1) and block_size (0: per tensor or per
  axis). value = (x - zero_point) * scale.
- onnxruntime's quantize_dynamic (MatMulInteger / ConvInteger / Gather, QOperator format): the
  weight's scale is not an input of the node that takes it (a Mul after it applies it), so it is
  found by onnxruntime's naming: `W_quantized` -> `W_scale` (and `W_zero_point`). Weights whose
  scale cannot be found this way stay as stored.
- MatMulNBits (com.microsoft, onnxruntime's 2/4/8-bit weight-only format): B uint8
  [N, ceil(K / block_size), block_size * bits / 8], scales [N * blocks], zero_points packed uint8
  or of the scales' type; attributes K, N, bits, block_size. The weight is shown as [N, K]
  (torch's Linear [out, in]).

Each grouped weight gets a `Quant` (records.py): the scale and zero point are its parts
"scale"/"zero_point" (MatMulNBits: "B", "scales", "zero_points"); QDQ's codes are the tensor's
own bytes, so they are no part.
"""

from __future__ import annotations

import math

from ...records import Quant, TensorInfo
from ..result import FileResult

QDQ_CODES = ("I8", "U8", "I16", "U16", "I4", "U4", "I32", "F8_E4M3", "F8_E5M2", "F8_E4M3FNUZ",
             "F8_E5M2FNUZ")
CODE_BITS = {"I4": 4, "U4": 4, "I16": 16, "U16": 16, "I32": 32}
SCALE_TYPES = ("F32", "F16", "BF16")
MS_DOMAIN = "com.microsoft"


def present(parts: dict[str, TensorInfo | None]) -> dict[str, TensorInfo]:
    """The components that are there, by role (an optional zero point may be absent)."""
    return {role: t for role, t in parts.items() if t is not None}


def group_quantized(result: FileResult, nodes) -> None:
    tensors = result.tensors
    rep = result.report
    for rec in nodes:
        op = rec.op_type
        if op == "DequantizeLinear" and rec.domain in ("", "ai.onnx", MS_DOMAIN):
            _qdq(tensors, rec, rep)
        elif rec.domain in ("", "ai.onnx"):
            _dynamic(tensors, rec, rep)
        elif op == "MatMulNBits" and rec.domain == MS_DOMAIN:
            _nbits(tensors, rec, rep)


def _get(tensors, rec, i: int) -> TensorInfo | None:
    name = rec.inputs[i] if i < len(rec.inputs) else ""
    return tensors.get(name) if name else None


def _int(v) -> int | None:
    """An attribute that should be one integer (a file may give a float or a list)."""
    return v if isinstance(v, int) else None


def _taken(t: TensorInfo) -> bool:
    """Already grouped or unreadable; codes in a typed varint field can still be grouped."""
    return t.quant is not None and t.quant.codec not in ("onnx_varint", "onnx_packed_int")


def _mismatch(rep, rec, message: str, t: TensorInfo) -> None:
    rep.error("onnx_quant_mismatch", f"{rec.op_type} node {rec.name or rec.outputs[:1]!r}: "
              f"{message}; its weight is left as stored (codes, not values).", rec.at, rec.length,
              t.name)


def _scale_layout(x: TensorInfo, s: TensorInfo, axis: int, block: int) -> str | None:
    """Why a scale of this shape cannot go with x (None when it fits)."""
    rank = len(x.shape)
    if s.numel == 1 and not block:
        return None
    if not -rank <= axis < rank:
        return f"axis {axis} is outside {x.name!r}'s {rank} dimensions"
    ax = axis % rank
    if block:
        want = list(x.shape)
        want[ax] = -(-x.shape[ax] // block)
        return None if list(s.shape) == want else \
            f"scale {s.name!r} is {list(s.shape)}; blocks of {block} along axis {ax} need {want}"
    if tuple(s.shape) == (x.shape[ax],):
        return None
    return f"scale {s.name!r} is {list(s.shape)}; per axis {ax} it must be [{x.shape[ax]}]"


def _qdq(tensors, rec, rep) -> None:
    x, s, z = _get(tensors, rec, 0), _get(tensors, rec, 1), _get(tensors, rec, 2)
    if x is None or s is None or _taken(x) or x.dtype not in QDQ_CODES:
        return
    axis, block = _int(rec.attrs.get("axis", 1)), _int(rec.attrs.get("block_size", 0))
    if axis is None or block is None or block < 0:
        _mismatch(rep, rec, "its axis or block_size attribute is not an integer of the right sign", x)
        return
    if len(x.shape) <= 1 and s.numel == 1:
        axis = 0
    _attach(tensors, rec, rep, x, s, z, axis, block, "QDQ")


def _dynamic(tensors, rec, rep) -> None:
    """onnxruntime quantize_dynamic: an input `W_quantized` (MatMulInteger, ConvInteger, or the
    Gather of an embedding, whose DequantizeLinear acts on the gathered rows) with `W_scale` and
    `W_zero_point` beside it, by onnxruntime's naming."""
    for name in rec.inputs:
        w = tensors.get(name) if name.endswith("_quantized") else None
        if w is None or _taken(w) or w.dtype not in ("I8", "U8") or not w.shape:
            continue
        base = name[: -len("_quantized")]
        s, z = tensors.get(base + "_scale"), tensors.get(base + "_zero_point")
        if s is None:
            continue
        # per channel: MatMulInteger's [K, N] weight along N, the others along their first axis
        axis = len(w.shape) - 1 if rec.op_type == "MatMulInteger" else 0
        _attach(tensors, rec, rep, w, s, z, 0 if s.numel == 1 else axis, 0, "DYN")


def _attach(tensors, rec, rep, x, s, z, axis: int, block: int, how: str) -> None:
    why = _scale_layout(x, s, axis, block) if x.shape else None
    if why is None and s.dtype not in SCALE_TYPES:
        why = f"scale {s.name!r} is {s.dtype}; expected F32, F16 or BF16"
    if why is None and z is not None and (z.dtype != x.dtype or tuple(z.shape) != tuple(s.shape)):
        why = (f"zero point {z.name!r} is {z.dtype} {list(z.shape)}; it must match the weight's "
               f"type {x.dtype} and the scale's shape {list(s.shape)}")
    if why is not None:
        _mismatch(rep, rec, why, x)
        return
    rank = len(x.shape)
    strategy = "tensor" if s.numel == 1 and not block else "group" if block else "channel"
    varints = x.quant.varint_field if x.quant is not None and x.quant.codec == "onnx_varint" else None
    x.quant = Quant(codec="onnx_qdq", label=f"{how}_{x.dtype}",
                    parts=present({"scale": s, "zero_point": z}), bits=CODE_BITS.get(x.dtype, 8),
                    axis=axis % rank if rank else 0, group_size=block or None, strategy=strategy,
                    varint_field=varints)


def _nbits(tensors, rec, rep) -> None:
    b, s, z = _get(tensors, rec, 1), _get(tensors, rec, 2), _get(tensors, rec, 3)
    if b is None or s is None or b.quant is not None:
        return
    a = rec.attrs
    K, N, bits, block = _int(a.get("K")), _int(a.get("N")), _int(a.get("bits", 4)), _int(a.get("block_size"))
    if K is None or N is None or bits is None or block is None:
        _mismatch(rep, rec, "its K, N, bits or block_size attribute is missing or not an integer", b)
        return
    why = None
    if bits not in (2, 4, 8) or block < 16 or block & (block - 1) or K <= 0 or N <= 0:
        why = f"bits {bits}, block_size {block}, K {K}, N {N} are not a MatMulNBits layout"
    blocks = -(-K // block) if block > 0 else 0
    blob = block * bits // 8 if block > 0 else 0
    if why is None and (b.dtype != "U8" or tuple(b.shape) != (N, blocks, blob)):
        why = f"B {b.name!r} is {b.dtype} {list(b.shape)}; K {K} and N {N} need U8 [{N}, {blocks}, {blob}]"
    if why is None and (s.dtype not in SCALE_TYPES or s.numel != N * blocks):
        why = f"scales {s.name!r} is {s.dtype} {list(s.shape)}; it must hold {N * blocks} floats"
    packed_zp = N * math.ceil(blocks * bits / 8)
    if why is None and z is not None and not (
            (z.dtype == "U8" and z.numel == packed_zp) or (z.dtype == s.dtype and z.numel == N * blocks)):
        why = (f"zero_points {z.name!r} is {z.dtype} {list(z.shape)}; it must be U8 with "
               f"{packed_zp} bytes or {s.dtype} with {N * blocks} values")
    g_idx = _get(tensors, rec, 4)
    if why is None and g_idx is not None:
        why = f"it has g_idx {g_idx.name!r} (act-order), which is not decoded here"
    if why is not None:
        _mismatch(rep, rec, why, b)
        return
    logical = TensorInfo(b.name, b.dtype, (N, K), b.file, b.offset, b.length, extra=dict(b.extra))
    # K and N are the logical shape [N, K]; a block of block_size codes shares a scale along K
    logical.quant = Quant(codec="onnx_matmul_nbits", label=f"MATMULNBITS_Q{bits}",
                          parts=present({"B": b, "scales": s, "zero_points": z}), bits=bits,
                          group_size=block)
    tensors[b.name] = logical
