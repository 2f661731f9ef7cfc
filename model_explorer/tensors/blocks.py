"""Quantized blocks taken apart: per-block scales and mins, integer codes, decoded values, error.

`Checkpoint.blocks(name, reference=None, start=0, count=16)` answers "what is stored in
block i and how far is it from the original": the fields of each block as the file holds
them, next to the values they decode to and, given the unquantized tensor, the error.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..dtypes import unpack_bits
from ..records import CheckpointRecord, TensorInfo
from ..safe_text import escape_deep
from . import dequant as dq
from .read import decode_raw, decode_units, plan_for, raw_units, tensor_info


@dataclass
class QuantBlocks:
    """Blocks `start` .. `start + n` of one quantized tensor (GGUF blocks or MLX groups)."""

    name: str
    dtype: str
    block_elems: int
    n_blocks: int  # in the whole tensor
    start: int
    offsets: np.ndarray  # absolute byte offset of each block in its file
    block_bytes: int
    scale: np.ndarray | None  # (n,) main scale d (MLX: the group scale)
    min: np.ndarray | None  # (n,) block min / bias where the type has one
    sub_scales: np.ndarray | None  # (n, k) integer sub-block scales of k-quants
    sub_mins: np.ndarray | None
    # (n, block_elems) integer codes with the type's offset applied, so value = scale * code
    # (+ min) for the simple types, scale * sub_scale * code (- ...) for k-quants; lookup
    # types (IQ4_*, MXFP4) give the table index; None for the grid IQ types.
    codes: np.ndarray | None
    values: np.ndarray  # (n, block_elems) float32, decoded
    error: np.ndarray | None = None  # values - reference, when a reference was given
    # Hub schemes with zero points (GPTQ, AWQ, asymmetric compressed-tensors):
    # value = scale * (code - zero_point)
    zero_point: np.ndarray | None = None
    scale_name: str = "scale"  # what the scale is called in the file ("absmax", "scale_inv"...)

    def table(self):
        """One row per block: index, offset, scale, min, max |error| and RMS error."""
        import pandas as pd

        n = len(self.values)
        rows = {"block": np.arange(self.start, self.start + n), "offset": self.offsets}
        if self.scale is not None:
            rows["scale"] = self.scale
        if self.min is not None:
            rows["min"] = self.min
        if self.zero_point is not None:
            rows["zero_point"] = self.zero_point
        rows["abs_max"] = np.nanmax(np.abs(self.values), axis=1) if n else []
        if self.error is not None:
            rows["max_abs_error"] = np.nanmax(np.abs(self.error), axis=1)  # NaN: padding of an
            rows["rms_error"] = np.sqrt(np.nanmean(self.error.astype(np.float64) ** 2, axis=1))  # edge block
        return pd.DataFrame(escape_deep(rows))

    def to_dict(self) -> dict:
        def lst(a):
            if a is None:
                return None
            a = np.asarray(a)
            if a.dtype.kind == "f":
                a = a.astype(np.float64)
                return np.where(np.isfinite(a), a, None).tolist()
            return a.tolist()

        return {"name": self.name, "dtype": self.dtype, "block_elems": self.block_elems,
                "block_bytes": self.block_bytes, "n_blocks": self.n_blocks, "start": self.start,
                "offsets": lst(self.offsets), "scale": lst(self.scale), "min": lst(self.min),
                "sub_scales": lst(self.sub_scales), "sub_mins": lst(self.sub_mins),
                "codes": lst(self.codes), "values": lst(self.values), "error": lst(self.error),
                "zero_point": lst(self.zero_point), "scale_name": self.scale_name}


def _f16(blocks, at):
    return dq._f16(blocks, at).ravel()


def _fields(name: str, b: np.ndarray) -> dict:
    """The stored fields of GGUF blocks of one type: codes, d, min, sub-scales."""
    n = len(b)
    if name == "Q4_0":
        return {"codes": dq.codes_q4_0(b), "scale": _f16(b, 0)}
    if name == "IQ4_NL":
        return {"codes": dq.nibbles(b[:, 2:]).reshape(n, 32), "scale": _f16(b, 0)}
    if name == "Q4_1":
        return {"codes": dq.codes_q4_1(b), "scale": _f16(b, 0), "min": _f16(b, 2)}
    if name == "Q5_0":
        return {"codes": dq.codes_q5_0(b), "scale": _f16(b, 0)}
    if name == "Q5_1":
        return {"codes": dq.codes_q5_1(b), "scale": _f16(b, 0), "min": _f16(b, 2)}
    if name == "Q8_0":
        return {"codes": b[:, 2:].view(np.int8), "scale": _f16(b, 0)}
    if name == "Q8_K":
        return {"codes": b[:, 4:260].view(np.int8), "scale": b[:, :4].view("<f4").ravel()}
    if name == "Q2_K":
        return {"codes": dq.codes_q2_k(b), "scale": _f16(b, 80), "min": _f16(b, 82),
                "sub_scales": b[:, :16] & 0xF, "sub_mins": b[:, :16] >> 4}
    if name == "Q3_K":
        return {"codes": dq.codes_q3_k(b), "scale": _f16(b, 108), "sub_scales": dq.scales_q3_k(b)}
    if name in ("Q4_K", "Q5_K"):
        sc, m = dq.k_scale_min(b[:, 4:16])
        codes = dq.codes_q4_k(b) if name == "Q4_K" else dq.codes_q5_k(b)
        return {"codes": codes, "scale": _f16(b, 0), "min": _f16(b, 2), "sub_scales": sc, "sub_mins": m}
    if name == "Q6_K":
        return {"codes": dq.codes_q6_k(b), "scale": _f16(b, 208), "sub_scales": b[:, 192:208].view(np.int8)}
    if name == "IQ4_XS":
        return {"codes": dq.codes_iq4_xs(b), "scale": _f16(b, 0), "sub_scales": dq.scales_iq4_xs(b)}
    if name == "TQ2_0":
        return {"codes": dq.codes_tq2_0(b), "scale": _f16(b, 64)}
    if name == "MXFP4":
        return {"codes": dq.nibbles(b[:, 1:]).reshape(n, 32), "scale": dq._e8m0_half(b[:, 0])}
    codec = dq.CODECS[name]
    return {"codes": None, "scale": codec.scales(b) if codec.scales else None}


def blocks(ckpt: CheckpointRecord, name: str | TensorInfo, reference=None, start: int = 0,
           count: int = 16) -> QuantBlocks:
    """Blocks `start` .. `start + count` of a quantized tensor, taken apart.

    `reference`: the unquantized tensor (any array with the same number of elements, e.g.
    the original float weights); the result then carries `error = values - reference`.
    """
    info = tensor_info(ckpt, name)
    plan = plan_for(ckpt, info)
    if plan.scales is None:
        raise ValueError(f"Tensor {info.name!r} is {info.label}, not quantized: it has no blocks.")
    mlx = bool(info.quant and info.quant.codec == "mlx_affine")
    if mlx:
        return _mlx_blocks(ckpt, info, plan, reference, start, count)
    if plan.parts is not None:
        return _scheme_blocks(ckpt, info, plan, reference, start, count)
    n_total = plan.n_units
    start = max(0, min(int(start), n_total))
    stop = min(n_total, start + max(0, int(count)))
    raw = raw_units(ckpt, plan, start, stop)
    values = decode_raw(plan, raw, range(start, stop))
    f = _fields(info.dtype, raw)
    offsets = info.offset + plan.unit_bytes * np.arange(start, stop, dtype=np.int64)
    out = QuantBlocks(info.name, info.label, plan.unit_elems, n_total, start, offsets, plan.unit_bytes,
                      f.get("scale"), f.get("min"), f.get("sub_scales"), f.get("sub_mins"),
                      None if f.get("codes") is None else np.asarray(f["codes"]), values)
    out.error = _error(values, reference, start * plan.unit_elems, info)
    return out


def _error(values: np.ndarray, reference, first: int, info: TensorInfo) -> np.ndarray | None:
    if reference is None:
        return None
    ref = np.asarray(reference, dtype=np.float32).reshape(-1)
    if ref.size != info.numel:
        raise ValueError(f"The reference has {ref.size} elements; {info.name!r} has {info.numel}.")
    return values - ref[first:first + values.size].reshape(values.shape)


def _mlx_blocks(ckpt, info, plan, reference, start, count) -> QuantBlocks:
    """MLX: a block is one group of `group_size` values sharing a scale and a bias."""
    bits, group = info.quant.bits, info.quant.group_size
    cols = info.shape[-1]
    per_row = cols // group
    n_total = plan.n_units * per_row
    start = max(0, min(int(start), n_total))
    stop = min(n_total, start + max(0, int(count)))
    if stop <= start:
        r0 = r1 = 0
    else:
        r0, r1 = start // per_row, (stop - 1) // per_row + 1
    raw = raw_units(ckpt, plan, r0, r1)
    values = decode_raw(plan, raw, range(r0, r1)).reshape(-1, group)
    codes = unpack_bits(raw.reshape(-1, bits), bits).reshape(-1, group)
    scales = plan.scales(raw, range(r0, r1)).reshape(-1)
    from .read import _grouped

    b_plan = _grouped(plan_for(ckpt, info.quant.parts["biases"]), per_row)
    biases = decode_units(ckpt, b_plan, slice(r0, r1)).astype(np.float32).reshape(-1)
    sel = slice(start - r0 * per_row, stop - r0 * per_row)
    group_bytes = group * bits // 8
    offsets = info.offset + group_bytes * np.arange(start, stop, dtype=np.int64)
    out = QuantBlocks(info.name, info.label, group, n_total, start, offsets, group_bytes,
                      scales[sel], biases[sel], None, None, codes[sel], values[sel])
    out.error = _error(out.values, reference, start * group, info)
    return out


def _scheme_blocks(ckpt, info, plan, reference, start, count) -> QuantBlocks:
    """Hub schemes: a block is one group of a logical row sharing a scale (and zero point):
    a GPTQ/AWQ group, a bitsandbytes absmax block, an FP8 block's slice of the row, an MXFP4
    block of 32. GPTQ act-order groups are gathered from their columns (g_idx order)."""
    parts = plan.parts
    gw, row = parts.group, plan.unit_elems
    if not gw:
        raise ValueError(f"Tensor {info.name!r}: its groups are not equal runs of a row "
                         "(irregular act-order or blocks across rows); no blocks view.")
    per_row = -(-row // gw)
    n_total = plan.n_units * per_row
    start = max(0, min(int(start), n_total))
    stop = min(n_total, start + max(0, int(count)))
    r0, r1 = (start // per_row, (stop - 1) // per_row + 1) if stop > start else (0, 0)
    idx = range(r0, r1)
    raw = raw_units(ckpt, plan, r0, r1)
    values = decode_raw(plan, raw, idx)
    codes = np.asarray(parts.codes(raw, idx)) if parts.codes is not None else None
    err = None
    if reference is not None:
        ref = np.asarray(reference, dtype=np.float32).reshape(-1)
        if ref.size != info.numel:
            raise ValueError(f"The reference has {ref.size} elements; {info.name!r} has {info.numel}.")
        err = values - ref[r0 * row:r1 * row].reshape(values.shape)

    def per_group(a, fill):
        if a is None:
            return None
        if parts.perm is not None:
            a = a[:, parts.perm]
        if per_row * gw != row:  # a partial last group (FP8 edge block): padded
            a = np.concatenate([a, np.full((len(a), per_row * gw - row), fill, a.dtype)], axis=1)
        return a.reshape(-1, gw)

    def per_block(a):
        if a is None:
            return None
        a = np.asarray(a, dtype=np.float32)
        if a.shape[1] == 1 and per_row > 1:
            a = np.repeat(a, per_row, axis=1)
        return a.reshape(-1)

    scales = per_block(parts.scales(raw, idx))
    zeros = per_block(parts.zeros(raw, idx)) if parts.zeros is not None else None
    sel = slice(start - r0 * per_row, stop - r0 * per_row)
    rows = np.repeat(np.arange(r0, r1), per_row)[sel]
    groups = np.tile(np.arange(per_row), r1 - r0)[sel]
    offsets = np.asarray(parts.unit_offset(rows), dtype=np.int64)
    if parts.perm is None and plan.gather is not None and parts.unit_offset(np.array([1]))[0] - \
            parts.unit_offset(np.array([0]))[0] == plan.unit_bytes:  # row-major bytes
        offsets = offsets + groups * gw * parts.bits // 8
    label = info.label
    vals = per_group(values, np.nan)[sel]
    out = QuantBlocks(info.name, label, gw, n_total, start, offsets, gw * parts.bits // 8,
                      None if scales is None else scales[sel], None, None, None,
                      None if codes is None else per_group(codes, 0)[sel], vals,
                      None if err is None else per_group(err, np.nan)[sel],
                      None if zeros is None else zeros[sel], parts.scale_name)
    return out
