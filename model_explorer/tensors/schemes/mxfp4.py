"""MXFP4 in safetensors (gpt-oss `X_blocks` / `X_scales`): the GGUF MXFP4 codec's table and
E8M0 exponent (tensors/dequant.py), in another container.

From transformers' convert_moe_packed_tensors (integrations/mxfp4.py): blocks uint8
[..., rows, G, 16], scales uint8 [..., rows, G]; byte k of a block holds values 2k (LOW
nibble) and 2k+1 (high nibble) -- GGUF puts the low nibbles of all 16 bytes first -- and
value = E2M1[code] * 2**(scale - 127). GGUF's table is E2M1 doubled and its exponent
2**(e - 128), so the product is the same. The logical tensor is [..., rows, G*32], as stored
(transformers then transposes the experts' matrices for its matmul).
"""

from __future__ import annotations

import math

import numpy as np

from ..dequant import _MXFP4_VALUES, _e8m0_half
from ..plan import Plan
from .common import F32, Parts, as_index, np_dtype, part, row_offsets, rows_as_bytes, stored


def plan(ckpt, info) -> Plan:
    shape = tuple(info.shape)
    b, s = part(info, "blocks"), part(info, "scales")
    if len(b.shape) < 2 or b.shape[-1] != 16 or not shape or shape[-1] != b.shape[-2] * 32 \
            or tuple(shape[:-1]) != tuple(b.shape[:-2]):
        raise ValueError(f"{b.name!r} is {list(b.shape)}; MXFP4 blocks of {list(shape)} are "
                         f"{list(shape[:-1]) + [shape[-1] // 32 if shape else 0, 16]} uint8.")
    if tuple(s.shape) != tuple(b.shape[:-1]):
        raise ValueError(f"{s.name!r} is {list(s.shape)}; the blocks {list(b.shape)} need one "
                         f"exponent each: {list(b.shape[:-1])}.")
    G = b.shape[-2]
    n_units = math.prod(shape[:-1])
    B = stored(ckpt, b, np_dtype(b, ("U8",), "MXFP4 blocks"), (n_units, G * 16))
    E = stored(ckpt, s, np_dtype(s, ("U8", "F8_E8M0"), "MXFP4 scales"), (n_units, G))
    table = _MXFP4_VALUES.astype(F32)

    def gather(idx):
        return rows_as_bytes(B[as_index(idx)])

    def codes(raw, idx):
        out = np.empty((len(raw), G * 32), np.uint8)
        np.bitwise_and(raw, 15, out=out[:, 0::2])
        np.right_shift(raw, 4, out=out[:, 1::2])
        return out

    def exps(raw, idx):
        return np.asarray(E[as_index(idx)]).view(np.uint8)

    def scales(raw, idx):
        return _e8m0_half(exps(raw, idx)) * F32(2)  # 2**(e - 127): the scale a person quotes

    def decode(raw, idx, o):
        o[...] = table[codes(raw, idx)]
        o.reshape(len(raw), G, 32)[...] *= _e8m0_half(exps(raw, idx))[:, :, None]

    p = Plan(info, G * 32, G * 16, n_units, np.dtype(F32), decode, scales, b.length,
             f"row of {G * 32}")
    p.gather = gather
    p.parts = Parts(codes, scales, None, 32, row_offsets(b, G * 16), 4, scale_name="2^(e-127)")
    return p
