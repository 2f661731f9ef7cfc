"""Integer codes with a broadcast scale (and zero point): OpenVINO's compressed weights, TFLite's
quantized tensors and CTranslate2's int8/int16 weights.

    value = (code - zero) * scale      OpenVINO (Convert, Subtract, Multiply), TFLite
    value = code / scale               CTranslate2 (model_spec.py `_quantize`)

The tensor's Quant (records.py), codec "affine": bits 4|8|16, signed, divide; parts "scale" and
optionally "zero_point"; scale_shape / zero_shape (full-rank shapes that broadcast to the
weight's); zero_point (a constant, without a part); round_to ("F16" | "BF16" | None: the
precision the file's own graph computes in) and scale_round_to (the same, for a scale the graph
converts before using it).
4-bit codes are packed two a byte, the first in the low nibble (OpenVINO u4/i4, TFLite INT4).
A unit is one row (the last dimension) when rows are whole bytes, else the whole tensor.
"""

from __future__ import annotations

import math

import numpy as np

from ... import dtypes
from ..plan import Plan
from .common import F32, MAX_SIDE_BYTES, Parts, as_array, check_scales, part, row_offsets, stored

CODE_DTYPES = {("I8", 8): np.int8, ("U8", 8): np.uint8, ("I16", 16): np.int16, ("U16", 16): np.uint16,
               ("I32", 32): np.int32}
SIDE_DTYPES = ("F32", "F16", "BF16", "F64", "I8", "U8", "I16", "I32", "I64", "U4", "I4")


def _side_values(ckpt, t, shape: tuple[int, ...], what: str) -> np.ndarray:
    """A scale or zero-point component read whole as float32, shaped to broadcast."""
    if t.length > MAX_SIDE_BYTES:
        raise ValueError(f"The {what} {t.name!r} is {t.length:,} bytes, more than such a tensor holds.")
    n = math.prod(shape)
    if t.dtype in ("U4", "I4"):
        raw = stored(ckpt, t, np.dtype(np.uint8), (t.length,))
        vals = _unpack4(raw.reshape(1, -1), t.dtype == "I4").reshape(-1)[:n]
        if vals.size != n:
            raise ValueError(f"The {what} {t.name!r} holds {vals.size} values; {n} were expected.")
        return vals.astype(F32).reshape(shape)
    dt = dtypes.numpy_dtype(dtypes.canonical(t.dtype), t.byteorder)
    if dt is None or t.dtype not in SIDE_DTYPES:
        raise ValueError(f"The {what} {t.name!r} is {t.dtype}, which is not a scale or zero-point type.")
    if t.numel != n:
        raise ValueError(f"The {what} {t.name!r} has {t.numel} values; its shape {list(shape)} "
                         f"needs {n}.")
    return stored(ckpt, t, dt).astype(F32).reshape(shape)


def _unpack4(raw: np.ndarray, signed: bool) -> np.ndarray:
    """(n, b) bytes -> (n, 2b) 4-bit codes, low nibble first; sign-extended when `signed`."""
    out = np.empty((len(raw), raw.shape[1], 2), np.uint8)
    np.bitwise_and(raw, 15, out=out[:, :, 0])
    np.right_shift(raw, 4, out=out[:, :, 1])
    out = out.reshape(len(raw), -1)
    if signed:
        s = out.view(np.int8)
        s[s > 7] -= 16
        return s
    return out


def _rows_of(full: np.ndarray, lead: tuple[int, ...], idx) -> np.ndarray:
    """The side values of weight rows `idx` (flat indices over the leading dims): (n, k), k the
    side's last dimension (1 or the row length)."""
    rows = as_array(idx)
    if not lead:
        return full.reshape(1, -1)[np.zeros(len(rows), np.int64)]
    multi = np.unravel_index(rows, lead)
    pick = tuple(m if d > 1 else np.zeros_like(m) for m, d in zip(multi, full.shape[:-1], strict=True))
    return full[pick]


def plan(ckpt, info) -> Plan:
    q = info.quant
    bits, signed, label = int(q.bits), bool(q.signed), q.label or info.dtype
    shape = tuple(info.shape) or (1,)
    rank = len(shape)
    scale_part, zero_part = part(info, "scale"), part(info, "zero_point", required=False)
    scale_shape = tuple(q.scale_shape or ())
    if len(scale_shape) != rank or any(s not in (1, d) for s, d in zip(scale_shape, shape, strict=True)):
        raise ValueError(f"Tensor {info.name!r} ({label}) is {list(shape)}; its scale "
                         f"{list(scale_shape)} does not broadcast to it.")
    scale = _side_values(ckpt, scale_part, scale_shape, "scale")
    if q.scale_round_to:
        scale = scale.astype(dtypes.numpy_dtype(q.scale_round_to)).astype(F32)
    check_scales(scale, scale_part, allow_zero=not q.divide)
    zero = None
    if zero_part is not None:
        zero_shape = tuple(q.zero_shape or ())
        if len(zero_shape) != rank or any(s not in (1, d) for s, d in zip(zero_shape, shape, strict=True)):
            raise ValueError(f"Tensor {info.name!r} ({label}): its zero point {list(zero_shape)} "
                             "does not broadcast to it.")
        zero = _side_values(ckpt, zero_part, zero_shape, "zero point")
    zero_value = F32(q.zero_point or 0)
    rounding = dtypes.numpy_dtype(q.round_to) if q.round_to else None
    numel = math.prod(shape)
    cols = shape[-1]
    whole_rows = rank >= 2 and cols * bits % 8 == 0
    unit = cols if whole_rows else numel
    lead = shape[:-1] if whole_rows else ()
    n_units = numel // unit if unit else 0
    ub = unit * bits // 8 if bits >= 8 else -(-unit * bits // 8)
    if info.length < n_units * ub:
        raise ValueError(f"Tensor {info.name!r} ({label}) {list(shape)} needs {n_units * ub} bytes; "
                         f"its byte range holds {info.length}.")
    if bits == 4:
        def codes(raw, idx):
            return _unpack4(raw, signed)[:, :unit]
    else:
        code_dt = CODE_DTYPES.get((info.dtype, bits))
        if code_dt is None:
            raise ValueError(f"Tensor {info.name!r} ({label}) stores {info.dtype}, not {bits}-bit codes.")
        code_dt = np.dtype(code_dt).newbyteorder(info.byteorder if bits > 8 else "=")

        def codes(raw, idx):
            return raw.view(code_dt)

    # Without whole rows the unit is the tensor: its sides are the full broadcast, flattened.
    def side_rows(full, idx):
        if whole_rows:
            return _rows_of(full, lead, idx)
        return np.broadcast_to(full, shape).reshape(1, -1)

    def scales(raw, idx):
        return side_rows(scale, idx)

    def zeros(raw, idx):
        return side_rows(zero, idx) if zero is not None else None

    def decode(raw, idx, out):
        out[...] = codes(raw, idx)
        if zero is not None:
            out -= side_rows(zero, idx)
        elif zero_value:
            out -= zero_value
        if q.divide:
            out /= side_rows(scale, idx)
        else:
            out *= side_rows(scale, idx)
        if rounding is not None:  # codes, zero and scale are exact in float32: one rounding
            out[...] = out.astype(rounding)

    k = scale_shape[-1] if whole_rows else 1
    parts = Parts(codes, scales, zeros if zero is not None else None,
                  unit // k if whole_rows and k else 0, row_offsets(info, ub), bits)
    return Plan(info, unit, ub, n_units, np.dtype(F32), decode, scales, n_units * ub,
                f"row of {unit}", parts=parts)
