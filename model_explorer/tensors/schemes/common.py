"""What every Hub-quantization codec shares: component bytes as numpy views, bit streams,
scale checks, and the `Parts` a plan carries for the blocks view.

A codec's unit is one logical row (for GPTQ and AWQ, one output channel), so a row slice
decodes only its rows; the companions (scales, zero points, g_idx) are read for those rows.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ... import dtypes
from ...records import CheckpointRecord, TensorInfo

F32 = np.float32
# Side tensors (quant maps, g_idx, global scales, JSON blobs) larger than this are not what
# the scheme writes: refused before reading them whole.
MAX_SIDE_BYTES = 1 << 28


@dataclass
class Parts:
    """A scheme's stored fields per unit, for `blocks()` and the scale histogram.

    codes(raw, idx) -> (n, row) integer codes as stored (table index for float formats);
    scales(raw, idx) -> (n, groups) float32 group scales of those rows;
    zeros(raw, idx) -> (n, groups) zero points, or None for symmetric schemes;
    group: values per group along a row; perm: the column order that makes each group
    contiguous (GPTQ act-order), or None; unit_offset(idx): byte offset of each unit's
    first stored byte; bits: stored bits per code (for block byte sizes).
    """

    codes: Callable[[np.ndarray, np.ndarray], np.ndarray] | None
    scales: Callable[[np.ndarray, np.ndarray], np.ndarray]
    zeros: Callable[[np.ndarray, np.ndarray], np.ndarray] | None
    group: int
    unit_offset: Callable[[np.ndarray], np.ndarray]
    bits: int
    perm: np.ndarray | None = None
    scale_name: str = "scale"


def part(info: TensorInfo, role: str, required: bool = True) -> TensorInfo | None:
    """The component tensor `role` of a grouped logical tensor."""
    t = info.quant.parts.get(role) if info.quant else None
    if t is not None:
        return t
    if required:
        raise ValueError(f"Tensor {info.name!r} is {info.label} but its {role!r} component is "
                         "missing; it cannot be dequantized.")
    return None


def np_dtype(t: TensorInfo, allowed: tuple[str, ...], what: str) -> np.dtype:
    name = dtypes.canonical(t.dtype)
    dt = dtypes.numpy_dtype(name, t.byteorder)
    if name not in allowed or dt is None:
        raise ValueError(f"{what} {t.name!r} is {t.dtype}; expected {' or '.join(allowed)}.")
    return dt


def stored(ckpt: CheckpointRecord, t: TensorInfo, dt: np.dtype, shape=None) -> np.ndarray:
    """The component's stored values as a read-only array (a view of the mmap for local files).

    Its byte range must hold exactly its shape in `dt`, inside the file.
    """
    shape = tuple(t.shape if shape is None else shape)
    n = math.prod(shape) if shape else 1
    need = n * dt.itemsize
    if t.length != need:
        raise ValueError(f"{t.name!r} is {t.dtype} {list(t.shape)}: {need} bytes, but its byte "
                         f"range holds {t.length}.")
    src = ckpt.byte_source(t.file)
    if t.offset + need > src.size:
        raise ValueError(f"{t.name!r} needs bytes {t.offset} to {t.offset + need} of {t.file}, "
                         f"but the file ends at byte {src.size}: it is truncated.")
    buf = getattr(src, "buffer", None)
    if buf is not None:
        arr = np.frombuffer(buf, dtype=dt, count=n, offset=t.offset)
    else:
        arr = np.frombuffer(src.read(t.offset, need), dtype=dt)
    return arr.reshape(shape)


def side(ckpt: CheckpointRecord, t: TensorInfo, allowed: tuple[str, ...], what: str) -> np.ndarray:
    """A small side tensor read whole (quant map, g_idx, global scale)."""
    if t.length > MAX_SIDE_BYTES:
        raise ValueError(f"{what} {t.name!r} is {t.length:,} bytes, far more than such a tensor holds.")
    return np.array(stored(ckpt, t, np_dtype(t, allowed, what)))


def as_index(idx) -> np.ndarray | slice:
    """Unit indices as a slice when they are one ascending run (a view, no copy), else an array."""
    if isinstance(idx, range) and idx.step == 1:
        return slice(idx.start, idx.stop)
    return np.asarray(idx, dtype=np.int64)


def as_array(idx) -> np.ndarray:
    if isinstance(idx, slice):
        return np.arange(idx.start, idx.stop, dtype=np.int64)
    return np.asarray(idx, dtype=np.int64)


def rows_as_bytes(a: np.ndarray) -> np.ndarray:
    """(n, ...) array -> (n, bytes) uint8 (a view when contiguous)."""
    a = np.ascontiguousarray(a)
    return a.view(np.uint8).reshape(len(a), -1)


def unpack_stream(raw: np.ndarray, bits: int, count: int) -> np.ndarray:
    """(n, nbytes) little-endian bit streams -> (n, count) codes of `bits` each, code k at
    bits k*bits .. k*bits+bits-1 (GPTQ's int32 words and compressed-tensors' dense packing
    are this stream: 3-bit codes span words)."""
    n = len(raw)
    want = -(-count // 8) * bits  # whole groups of 8 codes
    if raw.shape[1] < want:
        pad = np.zeros((n, want), np.uint8)
        pad[:, :raw.shape[1]] = raw
        raw = pad
    elif raw.shape[1] > want:
        raw = raw[:, :want]
    codes = dtypes.unpack_bits(np.ascontiguousarray(raw).reshape(-1, bits), bits)
    return codes.reshape(n, -1)[:, :count]


def fields_at(stream: np.ndarray, positions: np.ndarray, bits: int) -> np.ndarray:
    """Codes number `positions` of (m, nbytes) little-endian bit streams -> (m, len(positions))."""
    bitpos = positions.astype(np.int64) * bits
    byte, shift = bitpos // 8, (bitpos % 8).astype(np.uint16)
    padded = np.concatenate([stream, np.zeros((len(stream), 2), np.uint8)], axis=1)
    lo = padded[:, byte].astype(np.uint16)
    hi = padded[:, byte + 1].astype(np.uint16)
    return (((lo | (hi << 8)) >> shift) & ((1 << bits) - 1)).astype(np.uint8)


def check_scales(s: np.ndarray, t: TensorInfo, allow_zero: bool = False) -> None:
    """NaN, Inf or (for multiplicative scales) zero scales are a broken file, not weights."""
    bad = ~np.isfinite(s) if allow_zero else ~np.isfinite(s) | (s == 0)
    if bad.any():
        where = np.argwhere(bad)[0].tolist()
        v = s[tuple(where)]
        raise ValueError(f"{t.name!r} holds a scale of {v!r} (at {where} of the scales read); "
                         f"{'NaN or Inf' if allow_zero else 'NaN, Inf or zero'} scales cannot "
                         "give weights.")


def row_offsets(info: TensorInfo, row_bytes: int) -> Callable[[np.ndarray], np.ndarray]:
    return lambda idx: info.offset + row_bytes * as_array(idx)
