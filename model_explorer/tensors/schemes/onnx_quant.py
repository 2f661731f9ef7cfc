"""ONNX codecs: typed varint fields, QDQ / dynamic int weights, and MatMulNBits blocks.

The format layer (formats/onnx/quant.py) recognises each; these decode:
- onnx_varint: int32_data / int64_data / uint64_data, one varint per value (float16, bfloat16
  and float8 as their bit patterns, as onnx.numpy_helper.to_array reads them).
- onnx_qdq: value = (code - zero_point) * scale, the scale per tensor, per axis or per block
  along one axis (DequantizeLinear's definition; int4 codes packed two per byte, low first).
- onnx_matmul_nbits: onnxruntime's MatMulNBits B [N, blocks, blob]: code k of a row in bits
  k*bits.. of the row's byte stream, value = (code - zero_point) * scale per block of
  block_size along K; zero points packed like the codes (default 2**(bits-1)) or as floats.
A unit is one row (the last axis; one output channel of MatMulNBits), so row reads and samples
decode only their rows. Their parameters are the tensor's `Quant` (records.py): bits, axis,
group_size (ONNX block_size), strategy, varint_field; scale and zero point are its parts.
"""

from __future__ import annotations

import math

import numpy as np

from ... import dtypes
from ...records import Quant, TensorInfo
from ..plan import Plan
from .common import (
    F32,
    MAX_SIDE_BYTES,
    Parts,
    as_array,
    check_scales,
    part,
    row_offsets,
    rows_as_bytes,
    stored,
)

CODE_DTYPES = {"I8": np.int8, "U8": np.uint8, "I16": "<i2", "U16": "<u2", "I32": "<i4"}
VARINT_OUT = {"I8": np.int8, "U8": np.uint8, "I16": np.int16, "U16": np.uint16, "I32": np.int32,
              "I64": np.int64, "U32": np.uint32, "U64": np.uint64, "BOOL": np.bool_}
BIT_PATTERNS = {"F16": np.uint16, "BF16": np.uint16, "F8_E4M3": np.uint8, "F8_E5M2": np.uint8,
                "F8_E4M3FNUZ": np.uint8, "F8_E5M2FNUZ": np.uint8, "F8_E8M0": np.uint8}


def _side(ckpt, t) -> np.ndarray:
    """A scale or zero point, read whole (it may itself be in a typed varint field or packed
    int4), flat. Through the plans here, not tensors/read.py, which imports this module."""
    if t.numel * 8 > MAX_SIDE_BYTES:
        raise ValueError(f"{t.name!r} holds {t.numel:,} values, far more than a scale tensor holds.")
    codec = t.quant.codec if t.quant is not None else None
    if codec in ("onnx_varint", "onnx_packed_int"):
        plan = varint_plan(ckpt, t) if codec == "onnx_varint" else packed_int_plan(ckpt, t)
        if plan.gather is not None:
            raw = plan.gather(range(plan.n_units))
        else:
            if t.offset + t.length > ckpt.byte_source(t.file).size:
                raise ValueError(f"{t.name!r} runs past the end of {t.file}: it is truncated.")
            raw = np.frombuffer(ckpt.read_bytes(t.offset, t.length, t.file), np.uint8)
            raw = raw[:plan.n_units * plan.unit_bytes].reshape(plan.n_units, plan.unit_bytes)
        out = np.empty((plan.n_units, plan.unit_elems), plan.out_dtype)
        plan.decode(raw, range(plan.n_units), out)
        return out.reshape(-1)[:t.numel]
    if codec:
        raise ValueError(f"{t.name!r} is {t.label}; a scale or zero point must be stored plainly.")
    dt = dtypes.numpy_dtype(dtypes.canonical(t.dtype), t.byteorder)
    if dt is None:
        raise ValueError(f"{t.name!r} is {t.dtype}, which cannot hold scales or zero points.")
    return np.asarray(stored(ckpt, t, dt)).reshape(-1)


# -- varints ----------------------------------------------------------------------------------

def decode_varints(raw: np.ndarray, count: int) -> np.ndarray:
    """The first `count` varints of a byte stream as uint64 (vectorised: a varint ends at each
    byte below 0x80)."""
    ends = np.flatnonzero(raw < 0x80)
    if len(ends) < count:
        raise ValueError(f"the field holds {len(ends)} complete varints; {count} are needed")
    ends = ends[:count]
    starts = np.empty_like(ends)
    starts[:1] = 0
    starts[1:] = ends[:-1] + 1
    lens = ends - starts + 1
    if len(lens) and lens.max() > 10:
        raise ValueError("a varint runs past 10 bytes")
    used = raw[:ends[-1] + 1] if count else raw[:0]
    pos = np.arange(len(used)) - np.repeat(starts, lens)
    parts = (used & 0x7F).astype(np.uint64) << (7 * pos).astype(np.uint64)
    return np.add.reduceat(parts, starts) if count else np.empty(0, np.uint64)


def varint_plan(ckpt, info) -> Plan:
    name = info.dtype
    where = info.quant.varint_field
    if info.length > MAX_SIDE_BYTES:
        raise ValueError(f"Tensor {info.name!r} keeps {info.length:,} bytes of varints; past "
                         f"{MAX_SIDE_BYTES:,} they are not decoded.")
    cache: list[np.ndarray] = []

    def values() -> np.ndarray:
        if not cache:
            src = ckpt.byte_source(info.file)
            raw = np.frombuffer(src.read(info.offset, info.length), np.uint8)
            words = decode_varints(raw, info.numel)
            if name in BIT_PATTERNS:
                bits = words.astype(BIT_PATTERNS[name]).view(dtypes.numpy_dtype(name))
                cache.append(bits.astype(F32))
            elif name in ("I8", "I16", "I32", "I64"):  # negatives are 10-byte two's complement
                cache.append(words.view(np.int64).astype(VARINT_OUT[name]))
            elif name in VARINT_OUT:
                cache.append(words.astype(VARINT_OUT[name]))
            else:
                raise ValueError(f"Tensor {info.name!r} is {name} in {where}, which "
                                 "is not decoded here.")
        return cache[0]

    if info.numel > info.length:  # every varint takes a byte at least: dims that lie
        raise ValueError(f"Tensor {info.name!r} claims {info.numel:,} values but its "
                         f"{where} holds only {info.length:,} bytes.")
    if name not in BIT_PATTERNS and name not in VARINT_OUT:
        raise ValueError(f"Tensor {info.name!r} is {name} stored in {where}, which "
                         "is not decoded here.")
    out = np.dtype(F32) if name in BIT_PATTERNS else np.dtype(VARINT_OUT[name])

    def gather(idx):
        return values()[as_array(idx)].view(np.uint8).reshape(-1, out.itemsize)

    def decode(raw, idx, o):
        o[...] = raw.view(out).reshape(o.shape)

    p = Plan(info, 1, out.itemsize, info.numel, out, decode, None, info.length,
             f"value of {where}")
    p.gather = gather
    return p


def packed_int_plan(ckpt, info) -> Plan:
    """INT4/UINT4/INT2/UINT2 raw_data: codes packed low bits first across the flat tensor."""
    bits = 4 if info.dtype in ("I4", "U4") else 2
    per = 8 // bits
    signed = info.dtype.startswith("I")

    def decode(raw, idx, o):
        q = dtypes.unpack_bits(_pad8(raw, bits), bits).reshape(len(raw), -1)[:, :per]
        o[...] = (q.astype(np.int8) ^ (1 << (bits - 1))) - (1 << (bits - 1)) if signed else q

    out = np.dtype(np.int8 if signed else np.uint8)
    return Plan(info, per, 1, -(-info.numel // per), out, decode, None,
                dtypes.nbytes_for(bits, info.numel), f"byte of {per} codes")


# -- QDQ --------------------------------------------------------------------------------------

def _codes(name: str, raw: np.ndarray, count: int) -> np.ndarray:
    """(n, unit_bytes) stored codes -> (n, count) numbers (int4 low nibble first)."""
    if name in ("I4", "U4"):
        q = np.empty((len(raw), raw.shape[1], 2), np.uint8)
        np.bitwise_and(raw, 15, out=q[..., 0])
        np.right_shift(raw, 4, out=q[..., 1])
        q = q.reshape(len(raw), -1)[:, :count]
        return (q.astype(np.int8) ^ 8) - 8 if name == "I4" else q
    if name in CODE_DTYPES:
        return raw.view(np.dtype(CODE_DTYPES[name]))
    return raw.view(dtypes.numpy_dtype(name)).astype(F32)  # float8 codes


def qdq_plan(ckpt, info) -> Plan:
    q = info.quant
    x, s = info, part(info, "scale")  # the codes are the tensor's own bytes
    z = part(info, "zero_point", required=False)
    shape = tuple(info.shape) or (1,)
    cols = shape[-1]
    bits = q.bits
    if cols == 0:
        raise ValueError(f"Tensor {info.name!r} has no columns.")
    unit_elems = cols if (cols * bits) % 8 == 0 else math.lcm(cols, 8 // math.gcd(bits, 8))
    unit_bytes = unit_elems * bits // 8
    n_units = -(-info.numel // unit_elems)
    need = dtypes.nbytes_for(bits, info.numel)
    if x.length < need and not q.varint_field:
        raise ValueError(f"Tensor {info.name!r} needs {need} bytes but holds {x.length}.")
    S = _side(ckpt, s).astype(F32)
    check_scales(S, s)
    Z = _side(ckpt, z).astype(F32) if z is not None else None
    axis, block, mode = q.axis, q.group_size or 0, q.strategy
    s_shape = list(shape)
    if mode == "group":
        s_shape[axis] = -(-shape[axis] // block)
    last = axis == len(shape) - 1
    group = 1 if mode == "channel" and last else block if mode == "group" and last else unit_elems

    def index(idx) -> np.ndarray:
        """The scale index of every element of these units."""
        e = as_array(idx)[:, None] * unit_elems + np.arange(unit_elems)
        np.minimum(e, info.numel - 1, out=e)
        if mode == "tensor":
            return np.zeros_like(e)
        coord = np.unravel_index(e, shape)
        if mode == "channel":
            return coord[axis]
        coord = list(coord)
        coord[axis] = coord[axis] // block
        return np.ravel_multi_index(coord, s_shape)

    def codes(raw, idx):
        return _codes(x.dtype, raw, unit_elems)

    def scales(raw, idx):
        return S[index(idx)[:, ::group]]

    def zeros(raw, idx):
        return Z[index(idx)[:, ::group]] if Z is not None else None

    def decode(raw, idx, o):
        where = index(idx)
        o[...] = codes(raw, idx)
        if Z is not None:
            o -= Z[where]
        o *= S[where]

    p = Plan(info, unit_elems, unit_bytes, n_units, np.dtype(F32), decode, scales,
             x.length if q.varint_field else need, f"row of {unit_elems}")
    if q.varint_field:  # codes in a typed varint field (onnx.helper.make_tensor writes int8 so)
        p.gather = _varint_codes(ckpt, x, q.varint_field, unit_elems, n_units)
    p.parts = Parts(codes, scales, zeros if Z is not None else None, group,
                    row_offsets(x, unit_bytes), bits)
    return p


def _varint_codes(ckpt, x, field: str, unit_elems: int, n_units: int):
    """Units of codes decoded from their varint field, whole (such fields are small)."""
    if x.dtype not in CODE_DTYPES:
        raise ValueError(f"{x.name!r} keeps {x.dtype} codes in {field}, which is not decoded here.")
    if x.numel > x.length:
        raise ValueError(f"{x.name!r} claims {x.numel:,} codes but its {field} "
                         f"holds only {x.length:,} bytes.")
    plain = TensorInfo(x.name, x.dtype, x.shape, x.file, x.offset, x.length,
                       quant=Quant(codec="onnx_varint", label=x.dtype, varint_field=field))
    flat = np.zeros(n_units * unit_elems, np.dtype(CODE_DTYPES[x.dtype]))
    flat[:x.numel] = _side(ckpt, plain)
    units = flat.reshape(n_units, unit_elems)
    return lambda idx: rows_as_bytes(units[as_array(idx)])


# -- MatMulNBits ------------------------------------------------------------------------------

def nbits_plan(ckpt, info) -> Plan:
    q = info.quant
    b, s = part(info, "B"), part(info, "scales")
    z = part(info, "zero_points", required=False)
    (N, K), bits, block = info.shape, q.bits, q.group_size  # the logical [N, K]
    blocks = -(-K // block)
    row_bytes = blocks * block * bits // 8
    if b.length != N * row_bytes:
        raise ValueError(f"{b.name!r} holds {b.length} bytes; [{N}, {blocks}, "
                         f"{block * bits // 8}] needs {N * row_bytes}.")
    S = _side(ckpt, s).astype(F32).reshape(N, blocks)
    check_scales(S, s, allow_zero=True)  # a block of zeros has scale 0
    if z is None:
        Z = np.full((N, blocks), 2 ** (bits - 1), F32)
    elif z.dtype == "U8":
        zb = _side(ckpt, z).astype(np.uint8).reshape(N, -1)
        Z = dtypes.unpack_bits(_pad8(zb, bits), bits).reshape(N, -1)[:, :blocks].astype(F32) \
            if bits != 8 else zb[:, :blocks].astype(F32)
    else:
        Z = _side(ckpt, z).astype(F32).reshape(N, blocks)

    def codes(raw, idx):
        if bits == 8:
            return raw[:, :K]
        return dtypes.unpack_bits(raw.reshape(-1, bits), bits).reshape(len(raw), -1)[:, :K]

    def scales(raw, idx):
        return S[as_array(idx)]

    def zeros(raw, idx):
        return Z[as_array(idx)]

    def decode(raw, idx, o):
        rows = as_array(idx)
        full = np.empty((len(raw), blocks, block), F32)
        c = codes(raw, idx)
        full.reshape(len(raw), -1)[:, :K] = c
        full -= Z[rows][:, :, None]
        full *= S[rows][:, :, None]
        o[...] = full.reshape(len(raw), -1)[:, :K]

    p = Plan(info, K, row_bytes, N, np.dtype(F32), decode, scales, N * row_bytes, f"row of {K}")
    p.parts = Parts(codes, scales, zeros, block, row_offsets(b, row_bytes), bits)
    return p


def _pad8(rows: np.ndarray, bits: int) -> np.ndarray:
    """Rows of packed bytes padded to whole groups of `bits` bytes (8 codes) for unpack_bits."""
    width = -(-rows.shape[1] // bits) * bits
    out = np.zeros((len(rows), width), np.uint8)
    out[:, :rows.shape[1]] = rows
    return out.reshape(-1, bits)
