"""Decode tensors to numpy: whole, by rows, in bounded chunks, or as a sample of whole blocks.

Every tensor is seen as `n_units` equal units of bytes (a GGUF block, one element of a plain
dtype, 8 packed sub-byte floats, one packed MLX row) that decode independently. Reads, slices,
streaming and sampling are all "decode these units", so none of them touches more bytes than
it needs and memory stays bounded by the chunk size.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np

from .. import dtypes
from ..records import CheckpointRecord, TensorInfo
from ..spans import Finding
from .dequant import CODECS, GGML_PLAIN, UNSUPPORTED
from .plan import Plan

# Formats whose tensors are ggml types (legacy GGML/GGJT: formats/ggml_legacy.py).
GGML_FORMATS = ("gguf", "ggml")
# Elements decoded per step when streaming: big enough for numpy, small enough for the cache.
CHUNK_ELEMENTS = 1 << 18
# A PyTorch view with zero strides may claim far more elements than it stores; expanding more
# than this many from a file that small is refused (the shape is not to be trusted).
MAX_EXPANDED = 1 << 28


def tensor_info(ckpt: CheckpointRecord, name: str | TensorInfo) -> TensorInfo:
    if isinstance(name, TensorInfo):
        return name
    info = ckpt.tensors.get(name)
    if info is None:
        raise KeyError(f"No tensor named {name!r} in {ckpt.source!r}.")
    return info


def plan_for(ckpt: CheckpointRecord, info: TensorInfo) -> Plan:
    """The decoding plan of one tensor; ValueError when its dtype cannot be decoded."""
    if info.numel >= 1 << 62:
        raise ValueError(f"Tensor {info.name!r} claims shape {list(info.shape)}: "
                         f"{info.numel:,} elements, more than any file holds.")
    if info.quant and info.quant.codec == "mlx_affine":
        return _mlx_plan(ckpt, info)
    if info.quant:  # every scheme, or a clear refusal: never packed codes shown as weights
        from .schemes import scheme_plan  # GPTQ, AWQ, bitsandbytes, compressed-tensors, FP8, MXFP4

        return scheme_plan(ckpt, info)
    if ckpt.format in GGML_FORMATS and info.dtype in CODECS:
        return _gguf_plan(info)
    if ckpt.format in GGML_FORMATS and info.dtype in UNSUPPORTED:
        raise ValueError(f"Tensor {info.name!r} is {info.dtype}, which cannot be decoded: "
                         f"{UNSUPPORTED[info.dtype]}.")
    name = GGML_PLAIN.get(info.dtype, info.dtype) if ckpt.format in GGML_FORMATS else info.dtype
    name = dtypes.canonical(name)
    if name in dtypes.SUBBYTE:
        return _subbyte_plan(info, name)
    dt = dtypes.numpy_dtype(name, info.byteorder)
    if dt is None:
        raise ValueError(f"Tensor {info.name!r} has dtype {info.dtype!r}, which this tool cannot "
                         "decode.")
    return _plain_plan(info, dt)


def _plain_plan(info: TensorInfo, dt: np.dtype) -> Plan:
    if dt.kind == "c":
        out = np.dtype(np.complex64)
    elif dt.kind in "biu":
        out = dt.newbyteorder("=")  # integers and bools keep their type
    else:
        out = np.dtype(np.float32)  # every float, ml_dtypes ones included

    def decode(raw, idx, o):
        o[...] = raw.view(dt)

    words = np.dtype(np.uint16).newbyteorder(dt.byteorder if dt.byteorder in "<>" else "=")

    def decode_bf16(raw, idx, o):  # bf16 is the top half of a float32: a shift, not a cast
        bits = o.view(np.uint32)
        bits[...] = raw.view(words)
        bits <<= 16

    if dt.name == "bfloat16":
        decode = decode_bf16
    plan = Plan(info, 1, dt.itemsize, info.numel, out, decode, None, info.numel * dt.itemsize,
                "element")
    strided = _strides(info, dt.itemsize)
    if strided is not None:
        plan.strided = strided
    return plan


def _strides(info: TensorInfo, itemsize: int) -> tuple | None:
    """A PyTorch view whose strides are not the C-contiguous ones: (shape, byte strides)."""
    if info.stride is None or not info.shape:
        return None
    expected, acc = [], 1
    for dim in reversed(info.shape):
        expected.append(acc)
        acc *= dim
    expected.reverse()
    real = tuple(s for s, d in zip(info.stride, info.shape, strict=False) if d > 1)
    if real == tuple(s for s, d in zip(expected, info.shape, strict=False) if d > 1):
        return None
    return tuple(info.shape), tuple(s * itemsize for s in info.stride)


def _subbyte_plan(info: TensorInfo, name: str) -> Plan:
    bits = dtypes.SUBBYTE[name][1]

    def decode(raw, idx, o):
        o[...] = dtypes.decode_subbyte(name, raw)

    return Plan(info, 8, bits, -(-info.numel // 8), np.dtype(np.float32), decode, None,
                dtypes.nbytes_for(bits, info.numel), "group of 8 packed values")


def _gguf_plan(info: TensorInfo) -> Plan:
    codec = CODECS[info.dtype]
    if info.numel % codec.block_elems:
        raise ValueError(f"Tensor {info.name!r} is {info.dtype} with {info.numel} elements, not a "
                         f"whole number of {codec.block_elems}-element blocks.")

    def decode(raw, idx, o):
        codec.decode(raw, o)

    scales = (lambda raw, idx: codec.scales(raw)) if codec.scales else None
    n = info.numel // codec.block_elems
    plan = Plan(info, codec.block_elems, codec.block_bytes, n, np.dtype(np.float32), decode, scales,
                n * codec.block_bytes, f"block of {codec.block_elems}")
    if scales is None:  # IQ1_M: still quantized, but without a single block scale to show
        plan.scales = lambda raw, idx: np.empty(0, np.float32)
    return plan


def _mlx_plan(ckpt: CheckpointRecord, info: TensorInfo) -> Plan:
    """One unit = one packed row of the weight; its scales and biases rows come with it."""
    q = info.quant
    bits, group = q.bits, q.group_size
    scales_info, biases_info = q.parts.get("scales"), q.parts.get("biases")
    if biases_info is None:
        raise ValueError(f"Tensor {info.name!r} is MLX-quantized but its biases are missing.")
    packed = tuple(info.extra.get("packed_shape", info.shape))
    cols = info.shape[-1]
    n_rows = math.prod(packed[:-1]) if len(packed) > 1 else 1
    row_bytes = packed[-1] * 4
    s_plan = plan_for(ckpt, scales_info)
    b_plan = plan_for(ckpt, biases_info)
    n_groups = cols // group

    def side_rows(plan: Plan, idx: np.ndarray) -> np.ndarray:
        # scales/biases rows of the same units: n_groups values per weight row
        grouped = _grouped(plan, n_groups)
        sel = slice(idx.start, idx.stop) if isinstance(idx, range) else idx
        return decode_units(ckpt, grouped, sel).astype(np.float32)

    def decode(raw, idx, o):
        codes = dtypes.unpack_bits(raw.reshape(-1, bits), bits).reshape(len(raw), n_groups, group)
        s = side_rows(s_plan, idx)[:, :, None]
        b = side_rows(b_plan, idx)[:, :, None]
        out = o.reshape(len(raw), n_groups, group)
        out[...] = codes  # then s * q + b in float32, as the definition says
        out *= s
        out += b

    def scales(raw, idx):
        return side_rows(s_plan, idx)

    if cols % group or cols * bits != row_bytes * 8:
        raise ValueError(f"Tensor {info.name!r}: {cols} columns at {bits} bits in groups of {group} "
                         f"do not fit packed rows of {row_bytes} bytes.")
    return Plan(info, cols, row_bytes, n_rows, np.dtype(np.float32), decode, scales,
                n_rows * row_bytes, f"row of {cols}")


def _grouped(plan: Plan, k: int) -> Plan:
    """The same tensor seen as units of `k` consecutive plain elements (one row of scales)."""
    inner = plan.decode
    ub = plan.unit_bytes

    def decode(raw, idx, o):
        inner(raw.reshape(-1, ub), idx, o.reshape(-1, 1))

    return Plan(plan.info, k, ub * k, plan.numel // k, plan.out_dtype, decode, None,
                plan.data_bytes, f"row of {k}")


# -- bytes ---------------------------------------------------------------------------------

def _check_stored(info: TensorInfo) -> None:
    """The file holds the tensor's bytes as they are (not compressed, not a meta tensor)."""
    if info.extra.get("compressed"):
        raise ValueError(f"Tensor {info.name!r} is stored compressed inside the zip; its bytes "
                         "cannot be read in place.")
    if info.extra.get("meta"):
        raise ValueError(f"Tensor {info.name!r} is on the meta device: the file holds no values.")


def _check_length(plan: Plan) -> None:
    info = plan.info
    _check_stored(info)
    if info.length < plan.data_bytes:
        raise ValueError(f"Tensor {info.name!r} needs {plan.data_bytes} bytes for {info.label} "
                         f"{list(info.shape)}, but its byte range holds only {info.length}.")


def raw_units(ckpt: CheckpointRecord, plan: Plan, start: int, stop: int) -> np.ndarray:
    """Units [start, stop) as uint8 (n, unit_bytes): a view of the mmap for local files."""
    _check_length(plan)
    if plan.gather is not None:
        return plan.gather(range(start, max(start, stop)))
    info, ub = plan.info, plan.unit_bytes
    src = ckpt.byte_source(info.file)
    lo = info.offset + start * ub
    want = (stop - start) * ub
    have = max(0, min(want, plan.data_bytes - start * ub))  # sub-byte tensors end mid-unit
    if lo + have > src.size:
        raise _cut_short(info, lo, lo + have, src.size)
    buf = getattr(src, "buffer", None)
    if buf is not None:
        data = np.frombuffer(buf, dtype=np.uint8, count=have, offset=lo)
    else:
        data = np.frombuffer(src.read(lo, have), dtype=np.uint8)
    if have < want:
        data = np.concatenate([data, np.zeros(want - have, np.uint8)])
    return data.reshape(stop - start, ub)


def raw_picked(ckpt: CheckpointRecord, plan: Plan, idx: np.ndarray, k: int = 1) -> np.ndarray:
    """Units idx*k .. idx*k+k for each index: (len(idx) * k, unit_bytes), gathered in one go."""
    idx = np.asarray(idx, dtype=np.int64)
    if plan.gather is not None:
        _check_length(plan)
        return plan.gather((idx[:, None] * k + np.arange(k)).reshape(-1))
    src = ckpt.byte_source(plan.info.file)
    if getattr(src, "buffer", None) is not None and len(idx):
        # Gather from a view of the mmap. A group the data ends inside (sub-byte tensors end
        # mid-unit) is read on its own: padding it in the view would copy the whole tensor.
        width = k * plan.unit_bytes
        whole = min(int(idx.max()) + 1, plan.data_bytes // width)
        groups = raw_units(ckpt, plan, 0, whole * k).reshape(whole, width)
        inside = idx < whole
        out = np.empty((len(idx), width), np.uint8)
        out[inside] = groups[idx[inside]]
        for j in np.flatnonzero(~inside):
            out[j] = raw_units(ckpt, plan, int(idx[j]) * k, int(idx[j]) * k + k).reshape(-1)
        return out.reshape(len(idx) * k, plan.unit_bytes)
    parts = [raw_units(ckpt, plan, int(i) * k, int(i) * k + k) for i in idx]
    return np.concatenate(parts) if parts else np.empty((0, plan.unit_bytes), np.uint8)


def decode_units(ckpt: CheckpointRecord, plan: Plan, idx: np.ndarray | slice, k: int = 1,
                 into: np.ndarray | None = None) -> np.ndarray:
    """Decode units (a slice, or an index array of groups of `k` units) to (n, unit_elems) values
    (written into `into`, a contiguous array of that shape and the plan's dtype, when given)."""
    if k > 1 and not isinstance(idx, slice):
        groups = np.asarray(idx, dtype=np.int64)
        raw = raw_picked(ckpt, plan, groups, k)
        index = (groups[:, None] * k + np.arange(k)).reshape(-1)
    elif isinstance(idx, slice):
        start, stop, _ = idx.indices(plan.n_units)
        raw = raw_units(ckpt, plan, start, max(start, stop))
        index = range(start, max(start, stop))  # MLX side tensors read the same rows
    else:
        index = np.asarray(idx, dtype=np.int64)
        raw = raw_picked(ckpt, plan, index)
    return decode_raw(plan, raw, index, into)


def decode_raw(plan: Plan, raw: np.ndarray, index, into: np.ndarray | None = None) -> np.ndarray:
    """Decode units already read, (n, unit_bytes), numbered `index`, to (n, unit_elems) values."""
    out = np.empty((len(raw), plan.unit_elems), dtype=plan.out_dtype) if into is None else into
    if len(raw):
        with np.errstate(over="ignore", invalid="ignore"):  # inf and NaN are data, not errors
            plan.decode(raw, index, out)
    return out


# -- elements ------------------------------------------------------------------------------

def _decode_range(ckpt: CheckpointRecord, plan: Plan, e0: int, e1: int, out: np.ndarray) -> None:
    """Elements [e0, e1) into the flat array `out`, a bounded chunk of units at a time."""
    ue = plan.unit_elems
    step = max(1, CHUNK_ELEMENTS // ue)
    u, last = e0 // ue, -(-e1 // ue)
    pos = 0
    while pos < e1 - e0:
        u1 = min(last, u + step)
        first = e0 + pos - u * ue
        take = min((u1 - u) * ue - first, e1 - e0 - pos)
        if first == 0 and take == (u1 - u) * ue and out.dtype == plan.out_dtype:
            # whole units: decode in place, not through a temporary and a copy
            decode_units(ckpt, plan, slice(u, u1), into=out[pos:pos + take].reshape(u1 - u, ue))
        else:
            vals = decode_units(ckpt, plan, slice(u, u1)).reshape(-1)
            out[pos:pos + take] = vals[first:first + take]
        pos += take
        u = u1


def _read_strided(ckpt: CheckpointRecord, plan: Plan) -> np.ndarray:
    shape, strides = plan.strided
    info = plan.info
    _check_stored(info)
    itemsize = plan.unit_bytes
    span = sum((d - 1) * s for d, s in zip(shape, strides, strict=True) if d > 0) + itemsize
    if any(s < 0 for s in strides):
        raise ValueError(f"Tensor {info.name!r} has negative strides {info.stride}.")
    if 0 in shape:
        return np.empty(shape, plan.out_dtype)
    if info.numel > 4 * (span // itemsize) and info.numel > MAX_EXPANDED:
        raise ValueError(f"Tensor {info.name!r} is a view of {info.numel:,} elements over only "
                         f"{span:,} stored bytes (strides {list(info.stride)}); it is not expanded "
                         "here.")
    src = ckpt.byte_source(info.file)
    if info.offset + span > src.size:
        raise ValueError(f"Tensor {info.name!r} needs bytes {info.offset} to {info.offset + span}, "
                         f"but the file ends at byte {src.size}: it is truncated.")
    raw = np.frombuffer(src.read(info.offset, span), dtype=np.uint8)
    dt = dtypes.numpy_dtype(dtypes.canonical(info.dtype), info.byteorder)
    view = np.lib.stride_tricks.as_strided(raw.view(dt), shape=shape, strides=strides)
    return view.astype(plan.out_dtype)


class Undecodable(ValueError):
    """A tensor whose bytes cannot be decoded; `finding` says why, at the tensor's bytes."""

    def __init__(self, message: str, finding: Finding) -> None:
        super().__init__(message)
        self.finding = finding


def checked_plan(ckpt: CheckpointRecord, info: TensorInfo) -> Plan:
    """`plan_for`; when the tensor cannot be decoded, an `Undecodable` carrying the finding
    (the caller decides whether to keep it: the tensor code never edits the record)."""
    try:
        return plan_for(ckpt, info)
    except ValueError as e:
        raise Undecodable(str(e), Finding.of("undecodable", str(e), info.offset,
                                             info.length, info.name, info.file)) from None


def check_range(ckpt: CheckpointRecord, plan: Plan, e0: int, e1: int) -> None:
    """Refuse before allocating: the units holding elements [e0, e1) must be in the file."""
    _check_length(plan)
    if e1 <= e0:
        return
    info = plan.info
    u0, u1 = e0 // plan.unit_elems, -(-e1 // plan.unit_elems)
    end = info.offset + min(u1 * plan.unit_bytes, plan.data_bytes)
    size = ckpt.byte_source(info.file).size
    if end > size:
        raise _cut_short(info, info.offset + u0 * plan.unit_bytes, end, size)


def _cut_short(info: TensorInfo, start: int, end: int, size: int) -> Undecodable:
    """A tensor whose bytes run past the end of a file cut short: undecodable, at its bytes."""
    message = (f"Tensor {info.name!r} needs bytes {start} to {end} of {info.file}, but the file "
               f"ends at byte {size}: it is truncated.")
    return Undecodable(message, Finding.of("undecodable", message, info.offset,
                                           info.length, info.name, info.file))


def read(ckpt: CheckpointRecord, name: str | TensorInfo, rows: slice | int | None = None,
         out: np.ndarray | None = None) -> np.ndarray:
    """Decode one tensor: float32 for float and quantized dtypes, integers and bools as stored.

    `rows` selects along the first axis (a slice or one index); only the blocks that hold
    those rows are read and decoded. `out`: a C-contiguous array of the result's shape and
    dtype to decode into (a caller that reads block after block reuses one buffer); returned.
    """
    info = tensor_info(ckpt, name)
    plan = checked_plan(ckpt, info)
    if out is not None:
        return _read_into(ckpt, plan, rows, out)
    if plan.strided is not None:
        arr = _read_strided(ckpt, plan)
        return arr if rows is None else arr[rows]
    shape = tuple(info.shape)
    if rows is None:
        check_range(ckpt, plan, 0, plan.numel)
        out = np.empty(plan.numel, dtype=plan.out_dtype)
        _decode_range(ckpt, plan, 0, plan.numel, out)
        return out.reshape(shape)
    if not shape:
        raise ValueError(f"Tensor {info.name!r} is a scalar; it has no rows to select.")
    inner = math.prod(shape[1:])
    if isinstance(rows, (int, np.integer)):
        r = int(rows) + (shape[0] if rows < 0 else 0)
        if not 0 <= r < shape[0]:
            raise IndexError(f"Row {rows} is out of range for {info.name!r} with {shape[0]} rows.")
        check_range(ckpt, plan, r * inner, (r + 1) * inner)
        out = np.empty(inner, dtype=plan.out_dtype)
        _decode_range(ckpt, plan, r * inner, (r + 1) * inner, out)
        return out.reshape(shape[1:])
    start, stop, step = rows.indices(shape[0])
    picked = range(start, stop, step)
    if len(picked):  # (min/max of a range would walk it: use its ends)
        first, last = sorted((picked[0], picked[-1]))
        check_range(ckpt, plan, first * inner, (last + 1) * inner)
    out = np.empty((len(picked), inner), dtype=plan.out_dtype)
    if not out.size:  # no rows, or rows of nothing (a [n, 0] tensor): nothing to decode
        return out.reshape((len(picked),) + shape[1:])
    if step == 1:
        _decode_range(ckpt, plan, start * inner, stop * inner, out.reshape(-1))
    else:
        _decode_stepped(ckpt, plan, picked, inner, out)
    return out.reshape((len(picked),) + shape[1:])


def _read_into(ckpt: CheckpointRecord, plan: Plan, rows: slice | int | None, out: np.ndarray) -> np.ndarray:
    """`read` into the caller's buffer: rows None or a slice of step 1."""
    shape = tuple(plan.info.shape)
    start, stop = 0, shape[0] if shape else 1
    if isinstance(rows, slice):
        start, stop, step = rows.indices(shape[0] if shape else 0)
        if step != 1:
            raise ValueError("reading into a buffer takes a slice of consecutive rows")
        stop = max(start, stop)
    elif rows is not None:
        raise ValueError("reading into a buffer takes a slice of rows, not one index")
    want = ((stop - start,) + shape[1:]) if rows is not None else shape
    if out.shape != want or out.dtype != plan.out_dtype or not out.flags.c_contiguous:
        raise ValueError(f"the buffer is {out.dtype} {list(out.shape)}; {plan.info.name!r} rows "
                         f"{start}:{stop} need a contiguous {plan.out_dtype} {list(want)}")
    if plan.strided is not None:
        arr = _read_strided(ckpt, plan)
        out[...] = arr if rows is None else arr[start:stop]
        return out
    inner = math.prod(shape[1:]) if rows is not None else plan.numel
    e0, e1 = start * inner, stop * inner if rows is not None else plan.numel
    check_range(ckpt, plan, e0, e1)
    if e1 > e0:
        _decode_range(ckpt, plan, e0, e1, out.reshape(-1))
    return out


def _decode_stepped(ckpt: CheckpointRecord, plan: Plan, picked: range, inner: int, out: np.ndarray) -> None:
    """Every |step|-th row: decode runs of rows a bounded chunk at a time and keep the picked ones."""
    asc = picked if picked.step > 0 else picked[::-1]
    dest = out if picked.step > 0 else out[::-1]
    s = abs(picked.step)
    group = max(1, CHUNK_ELEMENTS // (inner * s))
    for j in range(0, len(asc), group):
        r0, r1 = asc[j], asc[min(j + group, len(asc)) - 1] + 1
        tmp = np.empty((r1 - r0) * inner, dtype=plan.out_dtype)
        _decode_range(ckpt, plan, r0 * inner, r1 * inner, tmp)
        rows = tmp.reshape(r1 - r0, inner)[::s]
        dest[j:j + len(rows)] = rows


def iter_chunks(ckpt: CheckpointRecord, name: str | TensorInfo,
                chunk_elements: int = CHUNK_ELEMENTS) -> Iterator[tuple[int, np.ndarray]]:
    """Yield (first element index, flat values) over the whole tensor, one bounded chunk at a time."""
    info = tensor_info(ckpt, name)
    plan = plan_for(ckpt, info)
    if plan.strided is not None:
        yield 0, _read_strided(ckpt, plan).reshape(-1)
        return
    step = max(1, chunk_elements // plan.unit_elems)
    for u in range(0, plan.n_units, step):
        vals = decode_units(ckpt, plan, slice(u, u + step)).reshape(-1)
        start = u * plan.unit_elems
        yield start, vals[:max(0, plan.numel - start)]
