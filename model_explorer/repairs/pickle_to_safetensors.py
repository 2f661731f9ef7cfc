"""PyTorch pickles (.bin, .pt, hostile or not) to safetensors, without running them.

The readers have already placed every tensor's bytes in the file (formats/pytorch walks the
pickle without importing anything), so the conversion copies those byte ranges: contiguous
little-endian tensors byte for byte, views (strides) and big-endian storages through a small
producer. Whatever the pickle would have imported or called is not carried over, and the report
lists it as removed.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterator

import numpy as np

from .. import dtypes
from ..records import CheckpointRecord, TensorInfo
from .build import Build, OutFile, OutTensor, Producer
from .fix import Fix

# The findings the conversion leaves behind, because nothing of the pickle is kept.
PICKLE_CODES = ("dangerous_import", "unknown_import", "needs_author_classes", "torchscript_archive",
                "pickle_trailing_bytes", "several_pickles", "zip_prefix_bytes", "polyglot", "unused_storage", "zip_foreign_entry")
_SHARD = re.compile(r"^pytorch_model(-\d+-of-\d+)\.bin$")


def output_name(name: str) -> str:
    """pytorch_model.bin -> model.safetensors; pytorch_model-00001-of-00002.bin -> model-00001-of-00002..."""
    if name == "pytorch_model.bin":
        return "model.safetensors"
    m = _SHARD.match(name)
    if m:
        return f"model{m[1]}.safetensors"
    return os.path.splitext(name)[0] + ".safetensors"


def _contiguous(info: TensorInfo) -> bool:
    if info.stride is None or not info.shape:
        return True
    acc, expected = 1, []
    for d in reversed(info.shape):
        expected.append(acc)
        acc *= d
    expected.reverse()
    return all(s == e for s, e, d in zip(info.stride, expected, info.shape) if d > 1)


def _strided(info: TensorInfo, dt: np.dtype) -> Producer:
    """A view or a big-endian storage, made contiguous little-endian one tensor at a time."""

    def produce(chunk: int) -> Iterator[bytes]:
        strides = tuple(s * dt.itemsize for s in (info.stride or ()))
        if strides:
            span = sum((d - 1) * s for d, s in zip(info.shape, strides) if d > 0) + dt.itemsize
        else:
            span = info.numel * dt.itemsize
        with open(info.file, "rb") as f:
            raw = np.frombuffer(os.pread(f.fileno(), span, info.offset), dtype=np.uint8)
        arr = np.lib.stride_tricks.as_strided(raw.view(dt), shape=info.shape, strides=strides) \
            if strides else raw.view(dt)[:math.prod(info.shape) if info.shape else 1]
        out = np.ascontiguousarray(arr).astype(dt.newbyteorder("<")).tobytes()
        for i in range(0, len(out), chunk):
            yield out[i:i + chunk]

    return produce


def _problem(info: TensorInfo) -> str | None:
    if info.extra.get("compressed"):
        return "stored compressed inside the zip"
    if info.extra.get("meta"):
        return "on the meta device: the file holds no values"
    if info.length == 0 and info.numel:
        return "without bytes in the file (its storage is missing)"
    if dtypes.canonical(info.dtype) not in dtypes.SAFETENSORS_BITS:
        return f"of dtype {info.dtype}, which safetensors cannot store"
    return None


def base(ckpt: CheckpointRecord, build: Build) -> list[str]:
    """Fill `build` with one safetensors file per pickle; returns the tensors left out (errors)."""
    lost = []
    by_file: dict[str, list[TensorInfo]] = {}
    for info in ckpt.tensors.values():
        by_file.setdefault(info.file, []).append(info)
    for path in ckpt.files:
        out = OutFile(output_name(os.path.basename(path)), None, metadata={"format": "pt"}, verbatim=False)
        for info in by_file.get(path, []):
            why = _problem(info)
            if why:
                lost.append(f"{info.name!r} is {why}; it is not in the output.")
                continue
            dtype = dtypes.canonical(info.dtype)
            numel = info.numel
            length = dtypes.nbytes_for(dtypes.SAFETENSORS_BITS[dtype], numel)
            t = OutTensor(info.name, dtype, tuple(info.shape), info.file, info.offset, length, info.name)
            dt = dtypes.numpy_dtype(dtype, info.byteorder)
            if not _contiguous(info) or (info.byteorder == ">" and dt is not None and dt.itemsize > 1):
                if dt is None:
                    lost.append(f"{info.name!r} is a {dtype} view that cannot be made contiguous here.")
                    continue
                t.produce = _strided(info, dt)
                t.changed.append("made contiguous little-endian (a strided view or a big-endian storage)")
            out.tensors.append(t)
        build.files.append(out)
    if len(build.files) > 1 or build.index_source:
        build.index_name = "model.safetensors.index.json"
        build.index_rewrite = True
    return lost


def fix(ckpt: CheckpointRecord, build: Build) -> Fix:
    removed = [f for f in ckpt.findings if f.code in PICKLE_CODES]
    names = [f.name for f in build.files]

    def apply(b: Build) -> None:
        for f in removed:
            if f.code in ("dangerous_import", "unknown_import"):
                b.notes.append(f"removed: {f.message}")

    return Fix("pickle_to_safetensors", f"{len(ckpt.files)} pickle file(s) written as safetensors "
               f"({', '.join(names)}) without running them; nothing the pickle imports or calls is "
               "kept.", removed, {"files": names + ([build.index_name] if build.index_name else []),
                                  "tensors": len(ckpt.tensors), "bytes": sum(t.length for _, t in build.tensors())},
               apply)
