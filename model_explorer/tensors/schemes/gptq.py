"""GPTQ (AutoGPTQ / GPTQModel): integer codes packed down the columns of int32 words.

Layout, from AutoGPTQ's QuantLinear.pack and GPTQModel's TorchQuantLinear:
- qweight [in*bits/W, out] of W-bit words (W = 32 for int32): column c holds the codes of
  output channel c as one little-endian bit stream over the inputs (code i at bits
  i*bits..; 3-bit codes span words, as AutoGPTQ's `<< 30` / `>> 2` steps write them);
- qzeros [groups, out*bits/W]: each row the same stream over the output channels;
- scales [groups, out] (fp16); g_idx [in]: the group of each input (act-order permutes it).
weight[c, i] = scales[g, c] * (q[c, i] - z[g, c]) with g = g_idx[i]; checkpoint_format
"gptq" stores z - 1 (AutoGPTQ adds the 1 back to each field), "gptq_v2" stores z.

Computed in float32: the product of an fp16 scale and a small integer is exact there, so
rounding our value to fp16 gives the libraries' fp16 result bit for bit.
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
    fields_at,
    np_dtype,
    part,
    rows_as_bytes,
    side,
    stored,
    unpack_stream,
)

WORD_BITS = {"I32": 32, "U32": 32, "I16": 16, "I8": 8, "I64": 64}
SCALE_DTYPES = ("F16", "BF16", "F32")


def group_map(info, g_idx_part, in_f: int, groups: int, group_size, ckpt) -> np.ndarray:
    """The group of every input feature, checked against the number of scale rows."""
    if g_idx_part is not None:
        g = side(ckpt, g_idx_part, ("I32", "I64", "I16"), "GPTQ g_idx").reshape(-1).astype(np.int64)
        if g.shape != (in_f,):
            raise ValueError(f"{g_idx_part.name!r} has {g.size} entries; g_idx maps each of the "
                             f"{in_f} input features of {info.name!r} to a group.")
        bad = (g < 0) | (g >= groups)
        if bad.any():
            i = int(np.argmax(bad))
            raise ValueError(f"{g_idx_part.name!r}[{i}] = {int(g[i])} is out of range: "
                             f"{info.name!r} has {groups} groups of scales (0..{groups - 1}).")
        return g
    gs = group_size if isinstance(group_size, int) and group_size > 0 else in_f
    g = np.arange(in_f, dtype=np.int64) // gs
    if in_f and int(g[-1]) >= groups:
        raise ValueError(f"{info.name!r}: {in_f} inputs in groups of {gs} need "
                         f"{int(g[-1]) + 1} rows of scales; there are {groups}.")
    return g


def contiguous_group(g: np.ndarray, groups: int) -> int | None:
    """The group size when groups are runs of equal length in input order (no act-order)."""
    n = len(g)
    if groups <= 0 or n % groups:
        return None
    gs = n // groups
    return gs if np.array_equal(g, np.arange(n) // gs) else None


def regular_order(g: np.ndarray, groups: int) -> tuple[np.ndarray | None, int]:
    """Act-order: the column order that makes each group contiguous, when every group has the
    same number of members (the last may be short)."""
    counts = np.bincount(g, minlength=groups)
    gs = int(counts.max()) if len(counts) else 0
    if gs and np.all(counts[:-1] == gs) and counts[-1] <= gs and len(g) % gs == 0:
        return np.argsort(g, kind="stable"), gs
    return None, 0


def apply_groups(out: np.ndarray, z: np.ndarray | None, s: np.ndarray, g: np.ndarray,
                 gs: int | None) -> None:
    """out (n, in) codes as float32 -> (codes - z[group]) * s[group] in place."""
    n, groups = s.shape
    if gs:
        o = out.reshape(n, groups, gs)
        if z is not None:
            o -= z[:, :, None]
        o *= s[:, :, None]
    else:  # act-order: np.take gathers columns ~2.5x faster than z[:, g]
        if z is not None:
            out -= np.take(z, g, axis=1)
        out *= np.take(s, g, axis=1)


def plan(ckpt, info) -> Plan:
    q = info.quant
    if len(info.shape) != 2:
        raise ValueError(f"GPTQ tensor {info.name!r} has shape {list(info.shape)}; expected [out, in].")
    out_f, in_f = info.shape
    bits = q.bits
    if bits not in (2, 3, 4, 8):
        raise ValueError(f"GPTQ tensor {info.name!r} has bits = {bits!r}; GPTQ packs 2, 3, 4 or 8.")
    qw, qz, sc = part(info, "qweight"), part(info, "qzeros"), part(info, "scales")
    gi = part(info, "g_idx", required=False)
    w_dt = np_dtype(qw, tuple(WORD_BITS), "GPTQ qweight")
    z_dt = np_dtype(qz, tuple(WORD_BITS), "GPTQ qzeros")
    s_dt = np_dtype(sc, SCALE_DTYPES, "GPTQ scales")
    word = WORD_BITS[qw.dtype]
    if (in_f * bits) % word or tuple(qw.shape) != (in_f * bits // word, out_f):
        raise ValueError(f"{qw.name!r} is {qw.dtype} {list(qw.shape)}; {info.name!r} [{out_f}, "
                         f"{in_f}] at {bits} bits packs into [{in_f * bits / word:g}, {out_f}] words.")
    if len(sc.shape) != 2 or sc.shape[1] != out_f or sc.shape[0] < 1:
        raise ValueError(f"{sc.name!r} is {list(sc.shape)}; GPTQ scales are [groups, {out_f}].")
    groups = sc.shape[0]
    zword = WORD_BITS[qz.dtype]
    zcols = -(-out_f * bits // zword)
    if tuple(qz.shape) != (groups, zcols):
        raise ValueError(f"{qz.name!r} is {list(qz.shape)}; {groups} groups of {out_f} {bits}-bit "
                         f"zero points pack into [{groups}, {zcols}].")
    fmt = q.checkpoint_format or "gptq"
    if fmt not in ("gptq", "gptq_v2"):
        raise ValueError(f"GPTQ checkpoint_format {fmt!r} of {info.name!r} is not decoded "
                         "(decoded: 'gptq', 'gptq_v2').")
    plus = 1 if fmt == "gptq" else 0  # v1 stores z - 1; AutoGPTQ adds 1 to each field
    g = group_map(info, gi, in_f, groups, q.group_size, ckpt)
    gs = contiguous_group(g, groups)
    perm, block = (None, gs) if gs else regular_order(g, groups)

    cache: dict[str, np.ndarray] = {}

    def arr(key):
        if key not in cache:
            t, dt = {"w": (qw, w_dt), "z": (qz, z_dt), "s": (sc, s_dt)}[key]
            cache[key] = stored(ckpt, t, dt)
        return cache[key]

    def gather(idx):
        return rows_as_bytes(arr("w")[:, as_index(idx)].T)

    def codes(raw, idx):
        return unpack_stream(raw, bits, in_f)

    def zeros(raw, idx):
        zs = fields_at(rows_as_bytes(arr("z")), as_array(idx), bits)  # (groups, n)
        return zs.T.astype(F32) + F32(plus)

    def scales(raw, idx):
        s = np.asarray(arr("s")[:, as_index(idx)], dtype=F32).T
        check_scales(s, sc)
        return s

    def decode(raw, idx, o):
        o[...] = codes(raw, idx)
        apply_groups(o, zeros(raw, idx), scales(raw, idx), g, gs)

    p = Plan(info, in_f, qw.shape[0] * word // 8, out_f, np.dtype(F32), decode, scales,
             qw.length, f"row of {in_f}")
    p.gather = gather
    p.parts = Parts(codes, scales, zeros, block or 0,
                    lambda idx: qw.offset + (word // 8) * as_array(idx), bits, perm)
    return p
