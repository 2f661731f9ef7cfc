"""Codes stored row by row with a grid of scales: fine-grained FP8 (weight x weight_scale_inv
per [r, c] block), compressed-tensors float/int/pack-quantized (tensor, channel, group or
block scales, optional zero points), NVFP4 and MXFP4 (E2M1 codes, two a byte), LLM.int8
(int8 x SCB[row] / 127) and gpt-oss MXFP4 experts.

One unit is one logical row: the main component's bytes for that row, read in place, and
the row of the scale grid that covers it.
"""

from __future__ import annotations

import math

import numpy as np

from ... import dtypes
from ...records import CheckpointRecord, TensorInfo
from ..dequant import _MXFP4_VALUES, _e8m0_half
from ..read import DecodeError, Plan
from .common import check_scales, part, stored
from .intpack import stream_at, unpack_stream

E2M1_2X = _MXFP4_VALUES.astype(np.float32)  # twice the E2M1 values, as ggml keeps them
BNB_INV127 = np.float32(7.874015718698502e-3)  # bitsandbytes multiplies by 1/127 in float32


def scale_values(ckpt: CheckpointRecord, info: TensorInfo, role: str) -> np.ndarray:
    """A scale component as float32: floats (FP8 included) as they are, E8M0 bytes as 2**(e-127)."""
    t = part(info, role)
    if t.dtype in ("U8", "F8_E8M0"):
        e = stored(ckpt, t) if t.dtype == "U8" else stored(ckpt, t).view(np.uint8)
        s = _e8m0_half(e) * np.float32(2)
        return np.where(e == 255, np.float32(np.nan), s)
    arr = stored(ckpt, t)
    if arr.dtype.kind in "iub":
        raise ValueError(f"Tensor {info.name!r}: its {role} {t.name!r} is {t.dtype}, not a "
                         "float scale.")
    return arr.astype(np.float32)


def _grid(info: TensorInfo, role: str, s: np.ndarray, out: int, in_f: int, lead: int,
          block: tuple[int, int]) -> tuple[np.ndarray, int, int]:
    """The scales as (lead*SR, SC) with the block [br, bc] each covers."""
    br, bc = block
    sr, sc = -(-out // br), -(-in_f // bc)
    if s.size == 1 and (sr, sc) != (1, 1) and br >= out and bc >= in_f:
        s = s.reshape(1, 1)
    if s.size != lead * sr * sc:
        raise ValueError(f"Tensor {info.name!r}: its {role} {info.quant[role].name!r} has "
                         f"{list(s.shape)} values; {lead} x [{out}, {in_f}] in blocks of "
                         f"{br}x{bc} needs {lead * sr * sc}.")
    return s.reshape(lead * sr, sc), br, bc


def row_plan(ckpt, info, *, row_bytes: int, values, scale: np.ndarray, block, role: str,
             zeros=None, main: TensorInfo | None = None) -> Plan:
    """Plan for codes stored row by row: values(raw (n, row_bytes), o (n, in)) writes the
    unscaled values; then (o - zero) * scale over the grid of blocks."""
    shape = tuple(info.shape)
    in_f = shape[-1]
    out = shape[-2] if len(shape) > 1 else 1
    n_rows = math.prod(shape[:-1]) if len(shape) > 1 else 1
    lead = n_rows // out if out else 1
    s, br, bc = _grid(info, role, scale, out, in_f, lead, block)
    sr = s.shape[0] // max(1, lead)
    if zeros is not None:
        zeros = zeros.reshape(s.shape)

    def grid_rows(idx):
        idx = np.asarray(idx, np.int64)
        return (idx // out) * sr + (idx % out) // br

    def expand(a, n):
        if in_f % bc == 0:
            return a[:, :, None], (n, a.shape[1], bc)
        return np.repeat(a, bc, axis=1)[:, :in_f], (n, in_f)

    def decode(raw, idx, o):
        g = grid_rows(idx)
        rs = s[g]
        check_scales(info, role, rs)
        values(raw, o)
        if zeros is not None:
            z, shp = expand(zeros[g], len(raw))
            o.reshape(shp)[...] -= z
        f, shp = expand(rs, len(raw))
        o.reshape(shp)[...] *= f

    def scales(raw, idx):
        return s[grid_rows(idx)]

    return Plan(info, in_f, row_bytes, n_rows, np.dtype(np.float32), decode, scales,
                n_rows * row_bytes, f"row of {in_f}")


def _fp8_values(dtype: str):
    dt = dtypes.numpy_dtype(dtypes.canonical(dtype))

    def values(raw, o):
        o[...] = raw.view(dt)

    return values


def fp8_block_plan(ckpt, info):
    q = info.quant
    w = part(info, "weight")
    s = scale_values(ckpt, info, "weight_scale_inv")
    out, in_f = info.shape[-2], info.shape[-1]
    block = tuple(q["block_size"]) if q.get("block_size") else (out, in_f)
    return row_plan(ckpt, info, row_bytes=in_f, values=_fp8_values(w.dtype), scale=s,
                    block=block, role="weight_scale_inv")


def _ct_block(info) -> tuple[int, int]:
    q = info.quant
    out, in_f = info.shape[-2], info.shape[-1]
    strategy = q.get("strategy")
    if strategy == "tensor":
        return out, in_f
    if strategy == "channel":
        return 1, in_f
    if strategy in ("group", "tensor_group"):
        return 1, q.get("group_size") or in_f
    if strategy == "block" and q.get("block_structure"):
        return tuple(q["block_structure"])
    raise ValueError(f"Tensor {info.name!r}: compressed-tensors strategy {strategy!r} is not "
                     "one this tool decodes.")


def _ct_zeros(ckpt, info, bits: int, packed: bool):
    zp = info.quant.get("weight_zero_point")
    if zp is None or info.quant.get("sym", True):
        return None
    z = stored(ckpt, zp)
    if not packed:
        return z.astype(np.float32)
    # pack-quantized packs zero points along the output axis (packed_dim 0), offset by 2**(bits-1)
    out = info.shape[-2]
    words = np.ascontiguousarray(z.reshape(-1, z.shape[-1]).T).view(np.uint32)
    codes = stream_at(words, bits, np.arange(out)).T.astype(np.float32)
    return codes - np.float32(1 << (bits - 1))


def ct_plan(ckpt, info):
    q = info.quant
    kind = q["kind"]
    in_f = info.shape[-1]
    s = scale_values(ckpt, info, "weight_scale")
    if kind == "ct_pack":
        bits = q["bits"]
        pw = part(info, "weight_packed")
        words = -(-in_f * bits // 32)
        offset = np.float32(1 << (bits - 1))

        def values(raw, o):
            o[...] = unpack_stream(raw.view("<u4"), bits, in_f)
            o -= offset

        return row_plan(ckpt, info, row_bytes=words * 4, values=values, scale=s,
                        block=_ct_block(info), role="weight_scale",
                        zeros=_ct_zeros(ckpt, info, bits, True), main=pw)
    if kind in ("ct_float", "ct_int"):
        w = part(info, "weight")
        dt = dtypes.numpy_dtype(dtypes.canonical(w.dtype))

        def values(raw, o):
            o[...] = raw.view(dt)

        return row_plan(ckpt, info, row_bytes=in_f * dt.itemsize, values=values, scale=s,
                        block=_ct_block(info), role="weight_scale",
                        zeros=_ct_zeros(ckpt, info, 8, False))
    if kind == "ct_nvfp4":
        g = stored(ckpt, part(info, "weight_global_scale")).astype(np.float32).reshape(-1)
        if g.size != 1:
            raise ValueError(f"Tensor {info.name!r}: weight_global_scale should be one value; it "
                             f"has {g.size}.")
        check_scales(info, "weight_global_scale", g)
        s = s / g[0]  # compressed-tensors divides the scale by the global scale first
    if kind in ("ct_nvfp4", "ct_mxfp4"):
        half = E2M1_2X * np.float32(0.5)

        def values(raw, o):  # low nibble first
            o[:, 0::2] = half[raw & 15]
            o[:, 1::2] = half[raw >> 4]

        return row_plan(ckpt, info, row_bytes=in_f // 2, values=values, scale=s,
                        block=(1, q.get("group_size") or (16 if kind == "ct_nvfp4" else 32)),
                        role="weight_scale")
    raise ValueError(f"Tensor {info.name!r}: compressed-tensors kind {kind!r} has no codec.")


def bnb_int8_plan(ckpt, info):
    scb = stored(ckpt, part(info, "SCB")).astype(np.float32).reshape(-1)
    out, in_f = info.shape

    def values(raw, o):
        o[...] = raw.view(np.int8)

    # bitsandbytes: (A * SCB[row]) * (1/127), both in float32: fold 1/127 after the row scale
    plan = row_plan(ckpt, info, row_bytes=in_f, values=values, scale=scb, block=(1, in_f),
                    role="SCB")
    inner = plan.decode

    def decode(raw, idx, o):
        inner(raw, idx, o)
        o *= BNB_INV127

    plan.decode = decode
    return plan


def mxfp4_plan(ckpt, info):
    """gpt-oss experts: X_blocks uint8 [..., G, 16] (low nibble first), X_scales E8M0 [..., G]."""
    s_t = part(info, "scales")
    e = stored(ckpt, s_t).reshape(-1)
    n_rows = math.prod(info.shape[:-1])
    in_f = info.shape[-1]
    groups = in_f // 32
    if e.size != n_rows * groups:
        raise ValueError(f"Tensor {info.name!r}: {s_t.name!r} has {e.size} exponents; "
                         f"{n_rows} rows of {groups} blocks need {n_rows * groups}.")
    e = e.reshape(n_rows, groups)

    def decode(raw, idx, o):
        ex = e[np.asarray(idx, np.int64)]
        if (ex == 255).any():
            raise DecodeError(f"Tensor {info.name!r}: {s_t.name!r} holds the E8M0 NaN exponent "
                             "255; those blocks cannot be dequantized.")
        res = o.reshape(len(raw), groups, 32)
        b = raw.reshape(len(raw), groups, 16)
        res[:, :, 0::2] = E2M1_2X[b & 15]
        res[:, :, 1::2] = E2M1_2X[b >> 4]
        res *= _e8m0_half(ex)[:, :, None]  # (2 v) * 2**(e-128) = v * 2**(e-127), exactly

    def scales(raw, idx):
        return _e8m0_half(e[np.asarray(idx, np.int64)]) * np.float32(2)

    return Plan(info, in_f, groups * 16, n_rows, np.dtype(np.float32), decode, scales,
                n_rows * groups * 16, f"row of {in_f}")
