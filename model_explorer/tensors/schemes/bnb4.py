"""bitsandbytes 4-bit (NF4, FP4): two codes a byte, high nibble first, in the flat order of
the [out, in] weight; each code looks up the 16-entry code book stored beside it
(`quant_map`) and is multiplied by its block's absmax (one per `blocksize` values).

With double quantization the absmax values are themselves uint8 codes:
absmax = nested_quant_map[code] * nested_absmax[block // nested_blocksize] + nested_offset,
in float32, as bitsandbytes' dequantize_4bit computes them before the 4-bit lookup.
"""

from __future__ import annotations

import numpy as np

from ..read import DecodeError, Plan
from .common import check_scales, part, stored


def bnb4_plan(ckpt, info):
    q = info.quant
    shape = tuple(info.shape)
    in_f = shape[-1]
    n = info.numel
    rows = n // in_f if in_f else 0
    if in_f % 2 or not rows:
        raise ValueError(f"Tensor {info.name!r}: a bitsandbytes 4-bit weight of shape "
                         f"{list(shape)} does not split into rows of whole bytes.")
    bs = q["blocksize"]
    code = stored(ckpt, part(info, "quant_map")).astype(np.float32).reshape(-1)
    if code.size != 16:
        raise ValueError(f"Tensor {info.name!r}: its quant_map has {code.size} values, not 16.")
    am = stored(ckpt, part(info, "absmax")).reshape(-1)
    n_blocks = -(-n // bs)
    if am.size != n_blocks:
        raise ValueError(f"Tensor {info.name!r}: {am.size} absmax values for {n} weights in "
                         f"blocks of {bs} (needs {n_blocks}).")
    if q.get("nested"):
        nbs = q.get("nested_blocksize")
        offset = q.get("nested_offset")
        if not isinstance(offset, (int, float)) or isinstance(offset, bool):
            raise ValueError(f"Tensor {info.name!r}: its quant state has nested_offset "
                             f"{offset!r}, not a number.")
        ncode = stored(ckpt, part(info, "nested_quant_map")).astype(np.float32).reshape(-1)
        nabs = stored(ckpt, part(info, "nested_absmax")).astype(np.float32).reshape(-1)
        if ncode.size != 256 or nabs.size != -(-n_blocks // nbs) or am.dtype != np.uint8:
            raise ValueError(f"Tensor {info.name!r}: double quantization needs uint8 absmax codes, "
                             f"a 256-entry nested_quant_map and {-(-n_blocks // nbs)} "
                             f"nested_absmax values; found {am.dtype}, {ncode.size} and {nabs.size}.")
        off = np.float32(offset)

        def absmax(blocks):
            a = ncode[am[blocks]] * nabs[blocks // nbs]
            a += off
            return a
    else:
        def absmax(blocks):
            return am[blocks].astype(np.float32)

    aligned = in_f % bs == 0
    b = np.arange(256)
    pairs = np.stack([code[b >> 4], code[b & 15]], axis=1)  # high nibble first

    def row_scales(idx):
        idx = np.asarray(idx, np.int64)
        if aligned:
            per = in_f // bs
            blocks = idx[:, None] * per + np.arange(per)
        else:
            blocks = (idx[:, None] * in_f + np.arange(in_f)) // bs
        a = absmax(blocks)
        check_scales(info, "absmax", a, zero_ok=True)  # an all-zero block has absmax 0
        return a

    def decode(raw, idx, o):
        a = row_scales(idx)
        o.reshape(len(raw), -1, 2)[...] = pairs[raw]  # one lookup per byte: both codes
        if aligned:
            o.reshape(len(raw), -1, bs)[...] *= a[:, :, None]
        else:
            o *= a

    def scales(raw, idx):
        return row_scales(idx) if aligned else row_scales(idx)[:, ::bs]

    if not np.isfinite(code).all():
        raise DecodeError(f"Tensor {info.name!r}: its quant_map holds non-finite values.")
    return Plan(info, in_f, in_f // 2, rows, np.dtype(np.float32), decode, scales,
                rows * in_f // 2, f"row of {in_f}")
