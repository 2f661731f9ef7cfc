"""Shared pieces of the Hub-quantization codecs: stored components read in place, checks on
scales, and the Plan every codec returns (so read, stats and blocks work unchanged)."""

from __future__ import annotations

import numpy as np

from ... import dtypes
from ...records import CheckpointRecord, TensorInfo
from ..read import DecodeError


def stored(ckpt: CheckpointRecord, t: TensorInfo, what: str = "") -> np.ndarray:
    """A component as its stored dtype and shape: a view of the mmap for local files (so
    indexing reads only the pages it touches), its bytes read once otherwise."""
    name = dtypes.canonical(t.dtype)
    dt = dtypes.numpy_dtype(name, t.byteorder)
    if dt is None:
        raise ValueError(f"{what or 'Component'} {t.name!r} has dtype {t.dtype!r}, which this "
                         "tool cannot read.")
    n = t.numel
    need = n * dt.itemsize
    if t.length < need:
        raise ValueError(f"{t.name!r} needs {need} bytes for {t.dtype} {list(t.shape)}, but its "
                         f"byte range holds only {t.length}.")
    src = ckpt.byte_source(t.file)
    if t.offset + need > src.size:
        raise ValueError(f"{t.name!r} needs bytes {t.offset} to {t.offset + need} of {t.file}, "
                         f"but the file ends at byte {src.size}: it is truncated.")
    buf = getattr(src, "buffer", None)
    if buf is not None:
        arr = np.frombuffer(buf, dtype=dt, count=n, offset=t.offset)
    else:
        arr = np.frombuffer(src.read(t.offset, need), dtype=dt)
    return arr.reshape(tuple(t.shape))


def as_f32(ckpt: CheckpointRecord, t: TensorInfo) -> np.ndarray:
    """A float component (fp16, bf16, fp32, FP8) as float32 values."""
    arr = stored(ckpt, t)
    if arr.dtype.kind == "V" or arr.dtype.name == "bfloat16" or arr.dtype.kind == "f":
        return arr.astype(np.float32)
    raise ValueError(f"{t.name!r} should hold float scales; it is {t.dtype}.")


def check_scales(info: TensorInfo, role: str, s: np.ndarray, zero_ok: bool = False) -> None:
    """NaN, Inf or zero scales make every weight of their group meaningless: refuse, naming
    the tensor and where, rather than show NaN or flat zeros as weights."""
    bad = ~np.isfinite(s) if zero_ok else ~np.isfinite(s) | (s == 0)
    if bad.any():
        at = np.argwhere(bad)[0].tolist()
        raise DecodeError(f"Tensor {info.name!r}: its {role} {info.quant[role].name!r} holds "
                         f"{int(bad.sum())} {'non-finite' if zero_ok else 'zero or non-finite'} "
                         f"value(s) (first at {at}: {s[tuple(at)]!r}); the weights they scale "
                         "cannot be dequantized.")


def part(info: TensorInfo, role: str) -> TensorInfo:
    t = info.quant.get(role)
    if t is None:
        raise ValueError(f"Tensor {info.name!r} ({info.quant.get('label')}) has no {role!r} "
                         "component; it cannot be dequantized.")
    return t


def contiguous(idx: np.ndarray):
    """A slice when the unit indices are one ascending run (a strided view instead of a copy)."""
    if len(idx) and idx[-1] - idx[0] == len(idx) - 1 and (len(idx) < 3 or np.all(np.diff(idx) == 1)):
        return slice(int(idx[0]), int(idx[-1]) + 1)
    return idx
