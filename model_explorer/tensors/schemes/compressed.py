"""compressed-tensors (llm-compressor): pack-quantized, int-/naive-quantized, float-quantized
(FP8), nvfp4-pack-quantized and mxfp4-pack-quantized weights.

From compressed_tensors 0.20 (compressors/*, quantization/lifecycle/forward_helpers.py):
- pack-quantized: `weight_packed` int32 [out, ceil(in*bits/32)], each row one little-endian
  bit stream of (q + 2**(bits-1)) (pack_to_int32, dense: codes span words); asymmetric
  group/channel zero points packed the same way down the output dim [ceil(out*bits/32), G];
- int-/naive-quantized: `weight` int8; float-quantized: `weight` FP8 E4M3;
- nvfp4 / mxfp4: `weight_packed` uint8 [out, in/2], two E2M1 codes a byte, the first value in
  the LOW nibble (unpack_fp4_from_uint8); nvfp4 scale = FP8 weight_scale / weight_global_scale
  per 16 values, mxfp4 scale = 2**(u8 - 127) per 32.
value = (q - zero_point) * scale (_dequantize), the scale chosen by strategy: tensor, channel
[out, 1], group / tensor_group [out, in/group], block [ceil(out/r), ceil(in/c)] (edge blocks
partial). The library computes in the scale's dtype; the float32 product here is exact for
those dtypes, so it rounds to the library's value bit for bit.
"""

from __future__ import annotations

import math

import numpy as np

from ...dtypes import numpy_dtype
from ..dequant import _MXFP4_VALUES
from ..plan import Plan
from .common import (
    F32,
    Parts,
    as_array,
    as_index,
    check_scales,
    fields_at,
    np_dtype,
    part,
    row_offsets,
    rows_as_bytes,
    side,
    stored,
    unpack_stream,
)

# E2M1 values by code (sign in bit 3): the GGUF MXFP4 table holds them doubled.
E2M1 = (_MXFP4_VALUES.astype(F32) / F32(2))
E2M1[8] = -0.0
SCALE_DTYPES = ("F32", "F16", "BF16", "F8_E4M3")


def _scale_geometry(info, sc, shape, strategy, q):
    """(scale rows as (k, G) float array getter, unit -> scale row, values per group)."""
    *lead, out_f, in_f = shape
    L = math.prod(lead) if lead else 1
    n = sc.numel
    s_shape = tuple(sc.shape)
    if strategy is None:  # no config: the scale's shape says
        if n == 1:
            strategy = "tensor"
        elif s_shape[-2:] == (out_f, 1):
            strategy = "channel"
        elif len(s_shape) >= 2 and s_shape[-2] == out_f:
            strategy = "group"
        else:
            strategy = "block"
    if strategy == "tensor":
        if n != 1 and n != L:
            raise ValueError(f"{sc.name!r} has {n} values; a per-tensor scale is one.")
        return (n, 1), (lambda u: (u // out_f) if n == L and n > 1 else np.zeros_like(u)), in_f
    if strategy == "channel":
        if n != L * out_f:
            raise ValueError(f"{sc.name!r} is {list(s_shape)}; per-channel scales of "
                             f"{list(shape)} are {lead + [out_f, 1]}.")
        return (L * out_f, 1), (lambda u: u), in_f
    if strategy in ("group", "tensor_group"):
        gs = q.group_size
        G = s_shape[-1] if s_shape else 0
        if not (isinstance(gs, int) and gs > 0):
            gs = -(-in_f // G) if G else 0
        if not gs or n != L * out_f * -(-in_f // gs) or G != -(-in_f // gs):
            raise ValueError(f"{sc.name!r} is {list(s_shape)}; group scales of {list(shape)} in "
                             f"groups of {gs} are {lead + [out_f, -(-in_f // max(gs, 1))]}.")
        return (L * out_f, G), (lambda u: u), gs
    if strategy == "block":
        br, bc = q.block or (None, None)
        if not (isinstance(br, int) and isinstance(bc, int) and br > 0 and bc > 0):
            if len(s_shape) < 2 or not all(s_shape[-2:]):
                raise ValueError(f"{sc.name!r} is {list(s_shape)}: no block structure fits.")
            br, bc = -(-out_f // s_shape[-2]), -(-in_f // s_shape[-1])
        sr, scn = -(-out_f // br), -(-in_f // bc)
        if n != L * sr * scn or (len(s_shape) >= 2 and s_shape[-1] != scn):
            raise ValueError(f"{sc.name!r} is {list(s_shape)}; {list(shape)} in blocks of "
                             f"{br}x{bc} needs {lead + [sr, scn]} scales.")
        return (L * sr, scn), (lambda u: (u // out_f) * sr + (u % out_f) // br), bc
    raise ValueError(f"{info.name!r} has strategy {strategy!r}; decoded: tensor, channel, "
                     "group, tensor_group, block.")


def apply_row_groups(o: np.ndarray, z: np.ndarray | None, s: np.ndarray, group: int) -> None:
    """o (n, in) codes -> (o - z) * s, s and z (n, G) with `group` values each (last partial)."""
    n, cols = o.shape
    G = s.shape[1]
    if G == 1:
        if z is not None:
            o -= z
        o *= s
        return
    if G * group == cols:
        v = o.reshape(n, G, group)
        if z is not None:
            v -= z[:, :, None]
        v *= s[:, :, None]
        return
    g = np.arange(cols) // group  # a short last group: np.take gathers the columns' group fast
    if z is not None:
        o -= np.take(z, g, axis=1)
    o *= np.take(s, g, axis=1)


def scale_values(ckpt, t, codec: str) -> np.ndarray:
    """A scale tensor as float32, E8M0 exponents (mxfp4) as 2**(e - 127)."""
    if codec == "ct_mxfp4":
        dt = np_dtype(t, ("U8", "F8_E8M0"), "MXFP4 weight_scale")
        a = stored(ckpt, t, dt)
        if t.dtype == "U8":
            a = a.view(numpy_dtype("F8_E8M0"))
        return a
    return stored(ckpt, t, np_dtype(t, SCALE_DTYPES, "weight_scale"))


def plan(ckpt, info) -> Plan:
    q = info.quant
    codec = q.codec
    shape = tuple(info.shape)
    if len(shape) < 2:
        raise ValueError(f"{info.name!r} has shape {list(shape)}; a quantized weight is [out, in].")
    *lead, out_f, in_f = shape
    n_units = math.prod(shape[:-1])
    sc = part(info, "weight_scale")
    s_all = scale_values(ckpt, sc, codec)
    s_shape, scale_row, group = _scale_geometry(info, sc, shape, q.strategy, q)
    S = s_all.reshape(s_shape)
    gscale = None
    if codec == "ct_nvfp4":
        gt = part(info, "weight_global_scale")
        gv = side(ckpt, gt, ("F32", "F16", "BF16"), "weight_global_scale").reshape(-1).astype(F32)
        if gv.size != 1:
            raise ValueError(f"{gt.name!r} has {gv.size} values; the global scale is one.")
        check_scales(gv, gt)
        gscale = gv[0]

    if codec == "ct_pack":
        main = part(info, "weight_packed")
        bits = q.bits
        if bits not in range(1, 9):
            raise ValueError(f"{info.name!r} is pack-quantized with bits = {bits!r}; 1 to 8 expected.")
        width = -(-in_f * bits // 32)
        W = stored(ckpt, main, np_dtype(main, ("I32",), "weight_packed"), (n_units, width))
        if tuple(main.shape[-1:]) != (width,):
            raise ValueError(f"{main.name!r} is {list(main.shape)}; {list(shape)} at {bits} bits "
                             f"packs into rows of {width} int32.")
        offset = 1 << (bits - 1)

        def codes(raw, idx):
            return unpack_stream(raw, bits, in_f)

        def values(raw, idx, o):
            o[...] = codes(raw, idx)
            o -= F32(offset)
        unit_bytes, cbits = width * 4, bits
    elif codec in ("ct_nvfp4", "ct_mxfp4"):
        main = part(info, "weight_packed")
        if in_f % 2:
            raise ValueError(f"{info.name!r} has {in_f} columns; FP4 packs two per byte.")
        W = stored(ckpt, main, np_dtype(main, ("U8",), "weight_packed"), (n_units, in_f // 2))

        def codes(raw, idx):
            out = np.empty((len(raw), in_f), np.uint8)
            np.bitwise_and(raw, 15, out=out[:, 0::2])
            np.right_shift(raw, 4, out=out[:, 1::2])
            return out

        def values(raw, idx, o):
            o[...] = E2M1[codes(raw, idx)]
        unit_bytes, cbits = in_f // 2, 4
    else:  # ct_int, ct_float: one stored value per weight
        main = part(info, "weight")
        allowed = ("I8",) if codec == "ct_int" else ("F8_E4M3", "F8_E5M2")
        dt = np_dtype(main, allowed, "compressed-tensors weight")
        W = stored(ckpt, main, dt, (n_units, in_f))

        def codes(raw, idx):
            return raw.view(np.int8) if codec == "ct_int" else raw

        table = np.arange(256, dtype=np.uint8).view(dt).astype(F32) if dt.itemsize == 1 \
            and codec == "ct_float" else None

        def values(raw, idx, o):
            if table is not None:  # FP8: one lookup per byte
                np.take(table, raw, out=o)
            else:
                o[...] = raw.view(dt)
        unit_bytes, cbits = in_f * dt.itemsize, 8 * dt.itemsize

    zp_t = part(info, "weight_zero_point", required=False)
    Z = None
    if zp_t is not None:
        Z = _zero_points(ckpt, info, zp_t, s_shape, shape, q, codec)

    def gather(idx):
        return rows_as_bytes(W[as_index(idx)])

    def scales(raw, idx):
        s = np.asarray(S[scale_row(as_array(idx))], dtype=F32)
        check_scales(s, sc)
        if gscale is not None:
            s = s / gscale  # the library's scale / global_scale, in float32
        return s

    def zeros(raw, idx):
        return None if Z is None else Z(as_array(idx))

    def decode(raw, idx, o):
        values(raw, idx, o)
        apply_row_groups(o, zeros(raw, idx), scales(raw, idx), group)

    p = Plan(info, in_f, unit_bytes, n_units, np.dtype(F32), decode, scales, main.length,
             f"row of {in_f}")
    p.gather = gather
    p.parts = Parts(codes, scales, zeros if Z is not None else None, group,
                    row_offsets(main, unit_bytes), cbits)
    return p


def _zero_points(ckpt, info, t, s_shape, shape, q, codec):
    """unit indices -> (n, G) float32 zero points: packed down the output dim (pack-quantized
    group/channel), or one per scale."""
    *lead, out_f, in_f = shape
    L = math.prod(lead) if lead else 1
    bits = q.bits or 8
    packed_rows = -(-out_f * bits // 32)
    G = s_shape[1]
    if codec == "ct_pack" and t.dtype == "I32" and t.numel == L * packed_rows * G and s_shape[0] == L * out_f:
        cols = stored(ckpt, t, np.dtype("<i4"), (L, packed_rows, G))
        offset = F32(1 << (bits - 1))

        def zp(u):
            lidx, r = u // out_f, u % out_f
            out = np.empty((len(u), G), F32)
            for li in np.unique(lidx):
                sel = lidx == li
                stream = rows_as_bytes(np.ascontiguousarray(cols[li].T))  # (G, bytes) per group
                out[sel] = fields_at(stream, r[sel], bits).T.astype(F32) - offset
            return out
        return zp
    if t.numel != s_shape[0] * s_shape[1]:
        raise ValueError(f"{t.name!r} is {list(t.shape)}; zero points follow the scales "
                         f"({s_shape[0] * s_shape[1]} values).")
    z = stored(ckpt, t, np_dtype(t, ("I8", "I32", "I64", "F32", "F16", "BF16", "U8"),
                                 "weight_zero_point")).reshape(s_shape)
    n_scale_rows = s_shape[0]

    def zp_plain(u):
        rows = u if n_scale_rows == L * out_f else (u // out_f) * (n_scale_rows // L) + \
            (u % out_f) // max(1, -(-out_f // (n_scale_rows // L)))
        if n_scale_rows == 1:
            rows = np.zeros_like(u)
        return z[rows].astype(F32)
    return zp_plain
