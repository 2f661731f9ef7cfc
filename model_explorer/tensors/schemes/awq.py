"""AWQ (AutoAWQ): 4-bit codes in int32 words, GEMM's interleaved order and GEMV's plain one.

From AutoAWQ's WQLinear_GEMM.from_linear: qweight [in, out/8] int32, word j of input row i
holds output channels 8j..8j+7, nibble k (bits 4k..4k+3) holding channel 8j + [0, 2, 4, 6,
1, 3, 5, 7][k]; qzeros [in/group, out/8] the same way; scales [in/group, out].
WQLinear_GEMV.from_linear: qweight [out, in/8] with nibble k of word j holding input 8j+k
(plain order), qzeros [out, zw] (group g in nibble g), scales [out, zw*8] (group g in column
g), zw = calculate_zeros_width padded. weight = (q - z) * s (AutoAWQ's dequantize_gemm).
GEMV-fast (`scaled_zeros`) interleaves for its kernel and is not decoded here.
"""

from __future__ import annotations

import numpy as np

from ..plan import Plan
from .common import (
    F32,
    Parts,
    as_array,
    as_index,
    check_scales,
    np_dtype,
    part,
    row_offsets,
    rows_as_bytes,
    stored,
    unpack_stream,
)
from .gptq import SCALE_DTYPES, apply_groups

# nibble k of a GEMM word holds channel ORDER[k]; channel j sits in nibble REVERSE[j]
ORDER = np.array([0, 2, 4, 6, 1, 3, 5, 7])
REVERSE = np.argsort(ORDER)


def plan(ckpt, info) -> Plan:
    q = info.quant
    version = (q.version or "gemm").lower()
    if len(info.shape) != 2:
        raise ValueError(f"AWQ tensor {info.name!r} has shape {list(info.shape)}; expected [out, in].")
    if q.bits != 4:
        raise ValueError(f"AWQ tensor {info.name!r} has bits = {q.bits!r}; AutoAWQ packs "
                         "only 4-bit weights.")
    if version == "gemm":
        return _gemm(ckpt, info)
    if version == "gemv":
        return _gemv(ckpt, info)
    raise ValueError(f"AWQ version {version!r} of {info.name!r} is recognised but not decoded: "
                     "its packed layout (interleaved for its kernel) has no documented "
                     "dequantization this tool can check against.")


def _parts(ckpt, info):
    qw, qz, sc = part(info, "qweight"), part(info, "qzeros"), part(info, "scales")
    dts = (np_dtype(qw, ("I32", "U32"), "AWQ qweight"), np_dtype(qz, ("I32", "U32"), "AWQ qzeros"),
           np_dtype(sc, SCALE_DTYPES, "AWQ scales"))
    cache: dict[int, np.ndarray] = {}

    def arr(i):
        if i not in cache:
            cache[i] = stored(ckpt, (qw, qz, sc)[i], dts[i])
        return cache[i]

    return qw, qz, sc, arr


def _gemm(ckpt, info) -> Plan:
    out_f, in_f = info.shape
    qw, qz, sc, arr = _parts(ckpt, info)
    if out_f % 8 or tuple(qw.shape) != (in_f, out_f // 8):
        raise ValueError(f"{qw.name!r} is {list(qw.shape)}; AWQ GEMM packs [{out_f}, {in_f}] "
                         f"as [{in_f}, {out_f / 8:g}] int32.")
    if len(sc.shape) != 2 or sc.shape[1] != out_f or not sc.shape[0] or in_f % sc.shape[0]:
        raise ValueError(f"{sc.name!r} is {list(sc.shape)}; AWQ scales are [groups, {out_f}] with "
                         f"groups dividing {in_f}.")
    groups = sc.shape[0]
    gs = in_f // groups
    if tuple(qz.shape) != (groups, out_f // 8):
        raise ValueError(f"{qz.name!r} is {list(qz.shape)}; {groups} groups need "
                         f"[{groups}, {out_f // 8}] packed zero points.")
    g = np.arange(in_f) // gs

    def gather(idx):
        cols = as_array(idx) // 8  # the word column holding each channel (shared by 8)
        return rows_as_bytes(arr(0)[:, cols].T)

    def shifts(idx):
        return (4 * REVERSE[as_array(idx) % 8]).astype(np.uint32)

    def codes(raw, idx):
        words = raw.view("<u4")
        return ((words >> shifts(idx)[:, None]) & 15).astype(np.uint8)

    def zeros(raw, idx):
        z = (arr(1)[:, as_array(idx) // 8].astype(np.uint32) >> shifts(idx)[None, :]) & 15
        return z.T.astype(F32)

    def scales(raw, idx):
        s = np.asarray(arr(2)[:, as_index(idx)], dtype=F32).T
        check_scales(s, sc)
        return s

    def decode(raw, idx, o):
        o[...] = codes(raw, idx)
        apply_groups(o, zeros(raw, idx), scales(raw, idx), g, gs)

    p = Plan(info, in_f, in_f * 4, out_f, np.dtype(F32), decode, scales, qw.length, f"row of {in_f}")
    p.gather = gather
    p.parts = Parts(codes, scales, zeros, gs, lambda idx: qw.offset + 4 * (as_array(idx) // 8), 4)
    return p


def _gemv(ckpt, info) -> Plan:
    out_f, in_f = info.shape
    qw, qz, sc, arr = _parts(ckpt, info)
    gs = info.quant.group_size or 128
    if in_f % 8 or in_f % gs or tuple(qw.shape) != (out_f, in_f // 8):
        raise ValueError(f"{qw.name!r} is {list(qw.shape)}; AWQ GEMV packs [{out_f}, {in_f}] in "
                         f"groups of {gs} as [{out_f}, {in_f / 8:g}] int32.")
    groups = in_f // gs
    if len(qz.shape) != 2 or qz.shape[0] != out_f or qz.shape[1] * 8 < groups:
        raise ValueError(f"{qz.name!r} is {list(qz.shape)}; {groups} zero points per row need "
                         f"[{out_f}, >= {-(-groups // 8)}].")
    if len(sc.shape) != 2 or sc.shape[0] != out_f or sc.shape[1] < groups:
        raise ValueError(f"{sc.name!r} is {list(sc.shape)}; {groups} scales per row need "
                         f"[{out_f}, >= {groups}].")
    g = np.arange(in_f) // gs

    def gather(idx):
        return rows_as_bytes(arr(0)[as_index(idx)])

    def codes(raw, idx):
        return unpack_stream(raw, 4, in_f)

    def zeros(raw, idx):
        z = rows_as_bytes(arr(1)[as_index(idx)])
        return unpack_stream(z, 4, groups).astype(F32)

    def scales(raw, idx):
        s = np.asarray(arr(2)[as_index(idx), :groups], dtype=F32)
        check_scales(s, sc)
        return s

    def decode(raw, idx, o):
        o[...] = codes(raw, idx)
        apply_groups(o, zeros(raw, idx), scales(raw, idx), g, gs)

    p = Plan(info, in_f, in_f // 2, out_f, np.dtype(F32), decode, scales, qw.length, f"row of {in_f}")
    p.gather = gather
    p.parts = Parts(codes, scales, zeros, gs, row_offsets(qw, in_f // 2), 4)
    return p
