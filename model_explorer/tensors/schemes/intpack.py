"""GPTQ and AWQ: integer codes packed into int32 words, group scales and zero points.

Layouts, from the libraries' pack code (AutoGPTQ / GPTQModel QuantLinear.pack, AutoAWQ
WQLinear_GEMM / WQLinear_GEMV.from_linear):
- GPTQ: each qweight column (one output channel) is a little-endian bit stream of `in`
  codes, `bits` each, over its int32 words: code k at bits k*bits.. of the stream. For 3
  bits, codes straddle words (32 codes in 3 words). qzeros packs zero points the same way
  along the output axis, one row per group; checkpoint_format "gptq" stores zero - 1
  (the loader masks the code to `bits` bits, then adds 1), "gptq_v2" stores the zero.
  w[o, i] = scales[g, o] * (q[i, o] - zero[g, o]), g = g_idx[i] (or i // group_size).
- AWQ GEMM: qweight [in, out/8]; word j holds outputs 8j..8j+7 with output 8j+k in the
  nibble AWQ_NIBBLE[k] (pack order [0, 2, 4, 6, 1, 3, 5, 7]); qzeros [groups, out/8]
  likewise. w[o, i] = (q - zero[i // group, o]) * scales[i // group, o].
- AWQ GEMV: qweight [out, in/8], plain nibble order along the input; qzeros [out, zw]
  and scales [out, zw*8] per (output, group), zw padded.
One logical row is one output channel: a GPTQ/AWQ-GEMM column, gathered alone.
"""

from __future__ import annotations

import numpy as np

from ...records import CheckpointRecord, TensorInfo
from ..read import Plan
from .common import check_scales, contiguous, part, stored

AWQ_NIBBLE = np.array([0, 4, 1, 5, 2, 6, 3, 7])  # output k of a word sits in nibble AWQ_NIBBLE[k]


def unpack_stream(words: np.ndarray, bits: int, count: int) -> np.ndarray:
    """(n, W) uint32 words, each row a little-endian bit stream -> (n, count) uint8 codes."""
    n = len(words)
    mask = (1 << bits) - 1
    if 32 % bits == 0:
        per = 32 // bits
        shifts = np.arange(0, 32, bits, dtype=np.uint32)
        codes = (words[:, :, None] >> shifts) & np.uint32(mask)
        return codes.reshape(n, -1)[:, :count].astype(np.uint8) if per else None
    pos = np.arange(count, dtype=np.int64) * bits  # 3 bits (and any width): pairs of words
    w, s = pos // 32, (pos % 32).astype(np.uint64)
    w64 = words.astype(np.uint64)
    nxt = np.concatenate([w64[:, 1:], np.zeros((n, 1), np.uint64)], axis=1)
    pair = w64[:, w] | (nxt[:, w] << np.uint64(32))
    return ((pair >> s) & np.uint64(mask)).astype(np.uint8)


def stream_at(words: np.ndarray, bits: int, idx: np.ndarray) -> np.ndarray:
    """Codes number `idx` of the bit stream in each row of (G, W) uint32 words -> (G, len(idx))."""
    pos = np.asarray(idx, np.int64) * bits
    w, s = pos // 32, (pos % 32).astype(np.uint64)
    lo = words[:, w].astype(np.uint64)
    hi = np.where(w + 1 < words.shape[1], words[:, np.minimum(w + 1, words.shape[1] - 1)], 0)
    return (((hi.astype(np.uint64) << np.uint64(32)) | lo) >> s) & np.uint64((1 << bits) - 1)


def _words(ckpt, t: TensorInfo, what: str) -> np.ndarray:
    arr = stored(ckpt, t)
    if arr.dtype.itemsize != 4 or arr.dtype.kind not in "iu":
        raise ValueError(f"{what} {t.name!r} is {t.dtype}; this codec reads int32 words.")
    order = arr.dtype.byteorder if arr.dtype.byteorder in "<>" else "="
    return arr.view(np.dtype(np.uint32).newbyteorder(order))


def _group_index(ckpt, info: TensorInfo, in_f: int, groups: int) -> np.ndarray:
    q = info.quant
    gi = q.get("g_idx")
    if gi is not None:
        g = stored(ckpt, gi).astype(np.int64).reshape(-1)
        if len(g) != in_f:
            raise ValueError(f"Tensor {info.name!r}: g_idx {gi.name!r} has {len(g)} entries for "
                             f"{in_f} input features.")
        bad = (g < 0) | (g >= groups)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ValueError(f"Tensor {info.name!r}: g_idx {gi.name!r} maps input {i} to group "
                             f"{int(g[i])}, but the scales have {groups} groups (0 to "
                             f"{groups - 1}); the weights cannot be dequantized.")
        return g
    group = q.get("group_size") or in_f
    return np.arange(in_f, dtype=np.int64) // group


def gptq_plan(ckpt: CheckpointRecord, info: TensorInfo) -> Plan:
    q = info.quant
    bits = q["bits"]
    out, in_f = info.shape
    qw = _words(ckpt, part(info, "qweight"), "GPTQ qweight")
    qz = _words(ckpt, part(info, "qzeros"), "GPTQ qzeros")
    sc_info = part(info, "scales")
    groups = sc_info.shape[0] if len(sc_info.shape) == 2 else 0
    if qw.shape != (in_f * bits // 32, out) or in_f * bits % 32 or tuple(sc_info.shape) != (groups, out) \
            or qz.shape[0] != groups or qz.shape[1] * 32 < out * bits:
        raise ValueError(f"Tensor {info.name!r}: qweight {list(qw.shape)}, qzeros "
                         f"{list(qz.shape)} and scales {list(sc_info.shape)} do not fit a "
                         f"{bits}-bit GPTQ [{out}, {in_f}] weight.")
    g = _group_index(ckpt, info, in_f, groups)
    plus = 1 if q.get("checkpoint_format", "gptq") != "gptq_v2" else 0
    run = g.reshape(-1, q["group_size"]) if q.get("group_size") and in_f % q["group_size"] == 0 \
        and groups == in_f // q["group_size"] and np.array_equal(
            g, np.arange(in_f) // q["group_size"]) else None  # groups in order: broadcast

    def gather(ckpt_, idx):
        cols = qw[:, contiguous(idx)]
        return unpack_stream(np.ascontiguousarray(cols.T), bits, in_f)

    def side(idx):
        s = stored(ckpt, sc_info)[:, contiguous(idx)].astype(np.float32)
        check_scales(info, "scales", s)
        z = stream_at(qz, bits, idx).astype(np.float32) + plus  # masked code, then + 1 (v1)
        return s.T, z.T  # (n, groups) each

    def decode(raw, idx, o):
        s, z = side(np.asarray(idx, np.int64))
        if run is not None:
            n, gs = len(raw), in_f // groups
            codes = raw.reshape(n, groups, gs)
            res = o.reshape(n, groups, gs)
            np.subtract(codes, z[:, :, None], out=res, dtype=np.float32)
            res *= s[:, :, None]
        else:
            np.subtract(raw, z[:, g], out=o, dtype=np.float32)
            o *= s[:, g]

    def scales(raw, idx):
        return side(np.asarray(idx, np.int64))[0]

    return Plan(info, in_f, in_f, out, np.dtype(np.float32), decode, scales, info.length,
                f"output channel of {in_f}", gather=gather)


def awq_plan(ckpt: CheckpointRecord, info: TensorInfo) -> Plan:
    q = info.quant
    version = q.get("version", "gemm")
    if q.get("bits") != 4 or version not in ("gemm", "gemv"):
        raise ValueError(f"Tensor {info.name!r} is AWQ {version} at {q.get('bits')} bits, whose "
                         "packing this tool does not decode (GEMM and GEMV 4-bit are); its stored "
                         "values are packed codes, not weights.")
    out, in_f = info.shape
    qw = _words(ckpt, part(info, "qweight"), "AWQ qweight")
    qz = _words(ckpt, part(info, "qzeros"), "AWQ qzeros")
    sc_info = part(info, "scales")
    sc = stored(ckpt, sc_info)
    if version == "gemm":
        groups = sc.shape[0]
        if qw.shape != (in_f, out // 8) or out % 8 or sc.shape != (groups, out) or not groups \
                or in_f % groups or qz.shape != (groups, out // 8):
            raise ValueError(f"Tensor {info.name!r}: qweight {list(qw.shape)}, qzeros "
                             f"{list(qz.shape)} and scales {list(sc.shape)} do not fit an AWQ GEMM "
                             f"[{out}, {in_f}] weight.")
    else:
        group = q.get("group_size") or 128
        groups = -(-in_f // group)
        if qw.shape != (out, in_f // 8) or in_f % group or sc.shape[0] != out \
                or sc.shape[1] < groups or qz.shape[0] != out or qz.shape[1] * 8 < groups:
            raise ValueError(f"Tensor {info.name!r}: qweight {list(qw.shape)}, qzeros "
                             f"{list(qz.shape)} and scales {list(sc.shape)} do not fit an AWQ GEMV "
                             f"[{out}, {in_f}] weight in groups of {group}.")
    gs = in_f // groups
    shifts = np.arange(0, 32, 4, dtype=np.uint32)

    def gather(ckpt_, idx):
        if version == "gemv":
            rows = qw[contiguous(idx)]
            return ((rows[:, :, None] >> shifts) & np.uint32(15)).reshape(len(idx), in_f).astype(np.uint8)
        words = qw[:, idx // 8]  # (in, n): each output's word column, then its nibble
        nib = (AWQ_NIBBLE[idx % 8] * 4).astype(np.uint32)
        return np.ascontiguousarray(((words >> nib) & np.uint32(15)).astype(np.uint8).T)

    def side(idx):
        if version == "gemv":
            s = sc[idx, :groups].astype(np.float32)
            z = (qz[idx][:, np.arange(groups) // 8] >> (np.arange(groups) % 8 * 4).astype(np.uint32)) & 15
        else:
            s = sc[:, idx].astype(np.float32).T
            z = ((qz[:, idx // 8] >> (AWQ_NIBBLE[idx % 8] * 4).astype(np.uint32)) & 15).T
        check_scales(info, "scales", s)
        return s, z.astype(np.float32)

    def decode(raw, idx, o):
        s, z = side(np.asarray(idx, np.int64))
        n = len(raw)
        res = o.reshape(n, groups, gs)
        np.subtract(raw.reshape(n, groups, gs), z[:, :, None], out=res, dtype=np.float32)
        res *= s[:, :, None]

    def scales(raw, idx):
        return side(np.asarray(idx, np.int64))[0]

    return Plan(info, in_f, in_f, out, np.dtype(np.float32), decode, scales, info.length,
                f"output channel of {in_f}", gather=gather)
