"""Fine-grained FP8 (quant_method "fp8": DeepSeek-V3/R1, Qwen3-FP8).

From transformers' FP8Linear and Fp8Dequantize (integrations/finegrained_fp8.py): `weight`
float8_e4m3fn [..., out, in] and `weight_scale_inv` float32 (or UE8M0 exponents, 2**(e - 127))
[..., ceil(out/br), ceil(in/bc)] for weight_block_size [br, bc], one value without it;
value = float32(weight) * scale of its block, in float32. Edge blocks are partial.
"""

from __future__ import annotations

import math

import numpy as np

from ...dtypes import numpy_dtype
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
)
from .compressed import apply_row_groups


def plan(ckpt, info) -> Plan:
    q = info.quant
    shape = tuple(info.shape)
    if len(shape) < 2:
        raise ValueError(f"FP8 tensor {info.name!r} has shape {list(shape)}; expected [out, in].")
    *lead, out_f, in_f = shape
    L = math.prod(lead) if lead else 1
    n_units = L * out_f
    w = part(info, "weight")
    dt = np_dtype(w, ("F8_E4M3", "F8_E5M2"), "FP8 weight")
    W = stored(ckpt, w, dt, (n_units, in_f))
    st = part(info, "weight_scale_inv")
    sdt = np_dtype(st, ("F32", "BF16", "F16", "F8_E8M0", "U8"), "weight_scale_inv")
    S = stored(ckpt, st, sdt)
    if st.dtype == "U8":  # UE8M0 exponents stored as bytes (scale_fmt "ue8m0")
        S = S.view(numpy_dtype("F8_E8M0"))
    block = q.block
    if block is None:
        if S.size not in (1, L):
            raise ValueError(f"{st.name!r} is {list(st.shape)}; without weight_block_size the "
                             "scale is one value per tensor.")
        S2 = S.reshape(-1, 1)
        per = S.size

        def scale_row(u):
            return u // out_f if per == L and per > 1 else np.zeros_like(u)
        group = in_f
    else:
        br, bc = block
        sr, sc = -(-out_f // br), -(-in_f // bc)
        if S.size != L * sr * sc or tuple(st.shape[-2:]) != (sr, sc):
            raise ValueError(f"{st.name!r} is {list(st.shape)}; {list(shape)} in blocks of "
                             f"{br}x{bc} needs {lead + [sr, sc]} scales.")
        S2 = S.reshape(L * sr, sc)

        def scale_row(u):
            return (u // out_f) * sr + (u % out_f) // br
        group = bc

    def gather(idx):
        return rows_as_bytes(W[as_index(idx)])

    def codes(raw, idx):
        return raw

    def scales(raw, idx):
        s = np.asarray(S2[scale_row(as_array(idx))], dtype=F32)
        check_scales(s, st)
        return s

    table = np.arange(256, dtype=np.uint8).view(dt).astype(F32)  # every FP8 pattern, once

    def decode(raw, idx, o):
        np.take(table, raw, out=o)
        apply_row_groups(o, None, scales(raw, idx), group)

    p = Plan(info, in_f, in_f, n_units, np.dtype(F32), decode, scales, w.length, f"row of {in_f}")
    p.gather = gather
    p.parts = Parts(codes, scales, None, group, row_offsets(w, in_f), 8, scale_name="scale_inv")
    return p
