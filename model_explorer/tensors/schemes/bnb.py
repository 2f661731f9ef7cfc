"""bitsandbytes: 4-bit NF4 / FP4 (Linear4bit) and LLM.int8 (Linear8bitLt).

4-bit, from bitsandbytes' quantize_4bit / dequantize_4bit (default and CPU backends): the
weight flattened in C order, two codes a byte with the FIRST value in the HIGH nibble;
value = quant_map[code] * absmax[i // blocksize] in float32. Double quantization stores
absmax as uint8 codes: absmax = nested_quant_map[code] * nested_absmax[j // nested_blocksize]
+ nested_offset (dequantize_blockwise, then `absmax += offset`). Shape, blocksize and offset
come from the quant-state JSON blob.
LLM.int8: value = int8 * SCB[row] * 7.874015718698502e-3 (bitsandbytes' int8_vectorwise_dequant,
the reciprocal of 127 as float32).
"""

from __future__ import annotations

import json
import math

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
    side,
    stored,
)

INV_127 = F32(7.874015718698502e-3)
MAX_STATE = 1 << 16


def quant_state(ckpt, info) -> dict:
    """The quant-state JSON of a 4-bit layer (the grouping may already have copied it)."""
    t = part(info, "quant_state")
    if t.length > MAX_STATE:
        raise ValueError(f"{t.name!r} is {t.length:,} bytes; a bitsandbytes quant state is a "
                         "short JSON blob.")
    try:
        state = json.loads(bytes(ckpt.read_bytes(t.offset, t.length, t.file)).decode("utf-8"))
    except (OSError, ValueError, RecursionError) as e:
        raise ValueError(f"{t.name!r} does not hold the quant state as JSON ({type(e).__name__}); "
                         f"{info.name!r} cannot be dequantized.") from None
    if not isinstance(state, dict):
        raise ValueError(f"{t.name!r} holds JSON but not an object.")
    return state


def _int(v, what: str, info) -> int:
    if type(v) is not int or v <= 0:
        raise ValueError(f"The quant state of {info.name!r} has {what} = {v!r}; expected a "
                         "positive integer.")
    return v


def _absmax(ckpt, info, state: dict, n_blocks: int):
    """absmax as a lazy float32 array: plain, or double-quantized codes decoded in full
    (one value per block: 1/64 of the weights, cheap next to them)."""
    am = part(info, "absmax")
    nested = am.dtype == "U8" or "nested_blocksize" in state
    if not nested:
        a = stored(ckpt, am, np_dtype(am, ("F32", "F16", "BF16"), "bitsandbytes absmax"))
        if a.size != n_blocks:
            raise ValueError(f"{am.name!r} has {a.size} values; {info.name!r} has {n_blocks} blocks.")
        return lambda: a.reshape(-1).astype(F32)
    codes = stored(ckpt, am, np_dtype(am, ("U8",), "double-quantized absmax")).reshape(-1)
    if codes.size != n_blocks:
        raise ValueError(f"{am.name!r} has {codes.size} codes; {info.name!r} has {n_blocks} blocks.")
    nb = _int(state.get("nested_blocksize"), "nested_blocksize", info)
    nmap = side(ckpt, part(info, "nested_quant_map"), ("F32",), "nested_quant_map").reshape(-1)
    nabs_t = part(info, "nested_absmax")
    nabs = side(ckpt, nabs_t, ("F32",), "nested_absmax").reshape(-1)
    if nmap.size != 256:
        raise ValueError(f"nested_quant_map of {info.name!r} has {nmap.size} values; expected 256.")
    if nabs.size != -(-n_blocks // nb):
        raise ValueError(f"{nabs_t.name!r} has {nabs.size} values; {n_blocks} absmax codes in "
                         f"blocks of {nb} need {-(-n_blocks // nb)}.")
    offset = state.get("nested_offset", info.quant.nested_offset)
    if not isinstance(offset, (int, float)) or isinstance(offset, bool) or not math.isfinite(offset):
        raise ValueError(f"The quant state of {info.name!r} has nested_offset = {offset!r}.")
    check_scales(nabs, nabs_t, allow_zero=True)
    done: list[np.ndarray] = []

    def full():
        if not done:
            a = nmap[codes].astype(F32)
            a.reshape(-1)[:] *= np.repeat(nabs, nb)[:n_blocks]
            a += F32(offset)
            done.append(a)
        return done[0]

    return full


def plan_4bit(ckpt, info) -> Plan:
    state = quant_state(ckpt, info)
    shape = tuple(info.shape)
    n = math.prod(shape) if shape else 1
    if list(shape) != list(state.get("shape") or shape):
        raise ValueError(f"{info.name!r} has shape {list(shape)} but its quant state says "
                         f"{state.get('shape')!r}.")
    bs = _int(state.get("blocksize", info.quant.group_size), "blocksize", info)
    w = part(info, "weight")
    if w.length != -(-n // 2):
        raise ValueError(f"{w.name!r} holds {w.length} bytes; {n} 4-bit codes need {-(-n // 2)}.")
    qm_t = part(info, "quant_map")
    qmap = side(ckpt, qm_t, ("F32",), "quant_map").reshape(-1)
    if qmap.size != 16 or not np.all(np.isfinite(qmap)):
        raise ValueError(f"{qm_t.name!r} should be 16 finite float32 values; it has {qmap.size}.")
    n_blocks = -(-n // bs)
    absmax = _absmax(ckpt, info, state, n_blocks)
    packed = stored(ckpt, w, np.dtype(np.uint8), (w.length,))
    # a unit is one row when rows are whole bytes; otherwise the whole tensor
    row = shape[-1] if len(shape) >= 2 and shape[-1] % 2 == 0 else n
    n_units = n // row if row else 0
    ub = -(-row // 2)

    def gather(idx):
        return packed.reshape(n_units, ub)[as_index(idx)]

    def codes(raw, idx):
        out = np.empty((len(raw), 2 * ub), np.uint8)
        np.right_shift(raw, 4, out=out[:, 0::2])
        np.bitwise_and(raw, 15, out=out[:, 1::2])
        return out[:, :row]

    def scales(raw, idx):
        """absmax per row: (n, row/bs) whole blocks, (n, 1) when a block spans rows, else
        one per value (rows that cut blocks)."""
        a = absmax()
        if row % bs == 0:
            s = a.reshape(-1, row // bs)[as_index(idx)]
        elif bs % row == 0:
            s = a[as_array(idx) * row // bs][:, None]
        else:
            s = a[(as_array(idx)[:, None] * row + np.arange(row)) // bs]
        check_scales(s, part(info, "absmax"), allow_zero=True)
        return s

    # one lookup per byte: its two values, high nibble first
    pairs = np.stack([qmap[np.arange(256) >> 4], qmap[np.arange(256) & 15]], axis=1).astype(F32)

    def decode(raw, idx, o):
        if row % 2 == 0:
            np.take(pairs, raw, axis=0, out=o.reshape(len(raw), row // 2, 2))
        else:
            o[...] = qmap[codes(raw, idx)]
        s = scales(raw, idx)
        k = s.shape[1]
        o.reshape(len(raw), k, row // k)[...] *= s[:, :, None]

    p = Plan(info, row, ub, n_units, np.dtype(F32), decode,
             scales, w.length, f"row of {row}")
    p.gather = gather
    p.parts = Parts(codes, scales, None, bs if row % bs == 0 else 0, row_offsets(w, ub), 4,
                    scale_name="absmax")
    return p


def plan_int8(ckpt, info) -> Plan:
    if len(info.shape) != 2:
        raise ValueError(f"LLM.int8 tensor {info.name!r} has shape {list(info.shape)}; expected [out, in].")
    out_f, in_f = info.shape
    w, scb_t = part(info, "weight"), part(info, "SCB")
    weight = stored(ckpt, w, np_dtype(w, ("I8",), "LLM.int8 weight"), (out_f, in_f))
    scb = stored(ckpt, scb_t, np_dtype(scb_t, ("F32", "F16", "BF16"), "LLM.int8 SCB")).reshape(-1)
    if scb.size != out_f:
        raise ValueError(f"{scb_t.name!r} has {scb.size} row scales; {info.name!r} has {out_f} rows.")
    fmt_t = part(info, "weight_format", required=False)
    if fmt_t is not None:
        fmt = side(ckpt, fmt_t, ("U8", "I8", "I32", "I64"), "weight_format").reshape(-1)
        if fmt.size != 1 or int(fmt[0]) != 0:
            raise ValueError(f"{fmt_t.name!r} = {fmt.tolist()}; only the row-major layout (0) of "
                             "LLM.int8 weights is decoded (col32/turing/ampere tiles are GPU kernel "
                             "layouts).")

    def gather(idx):
        return rows_as_bytes(weight[as_index(idx)])

    def codes(raw, idx):
        return raw.view(np.int8)

    def scales(raw, idx):
        s = scb[as_index(idx)].astype(F32)[:, None]
        check_scales(s, scb_t, allow_zero=True)
        return s

    def decode(raw, idx, o):
        o[...] = raw.view(np.int8)
        o *= scales(raw, idx)
        o *= INV_127

    p = Plan(info, in_f, in_f, out_f, np.dtype(F32), decode, scales, w.length, f"row of {in_f}")
    p.gather = gather
    p.parts = Parts(codes, scales, None, in_f, row_offsets(w, in_f), 8, scale_name="SCB")
    return p
