"""Tensor names and orientation: strip a wrapper's prefix, rename one to one, write lm_head as a
copy of the embedding, and write transposed weights back in the orientation the model expects.

Every action takes explicit parameters (the prefix, the renames, the tensors to transpose);
`plan.py` decides which apply. Names are the source's names: each fix finds its tensors by
where they came from, so the fixes compose whatever order they run in.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np

from ..dtypes import SAFETENSORS_BITS
from .build import Build, OutTensor, Producer
from .fix import Fix

_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def by_origin(build: Build, origin: str) -> tuple | None:
    for f, t in build.tensors():
        if t.origin == origin:
            return f, t
    return None


def _renamer(renames: dict[str, str], why: str):
    def apply(b: Build) -> None:
        for old, new in renames.items():
            hit = by_origin(b, old)
            if hit is None:
                continue
            f, t = hit
            t.name = new
            t.changed.append(f"{why}: {old!r} -> {new!r}")
            f.touch()
        b.index_rewrite = b.index_rewrite or b.index_name is not None
    return apply


def strip_prefix(names: list[str], prefix: str) -> Fix | None:
    renames = {n: n[len(prefix):] for n in names if n.startswith(prefix) and len(n) > len(prefix)}
    if not renames:
        return None
    return Fix("strip_prefix", f"{len(renames)} tensor names lose the prefix {prefix!r} "
               f"(e.g. {next(iter(renames))!r} -> {next(iter(renames.values()))!r}).",
               changes={"tensors": sorted(renames)[:20], "keys": [prefix], "bytes": 0},
               apply=_renamer(renames, f"prefix {prefix!r} stripped"), renames=renames,
               codes=("key_prefix", "key_prefix_doubled"))


def rename(names: list[str], mapping: dict[str, str]) -> Fix | None:
    renames = {a: b for a, b in mapping.items() if a in names and a != b}
    if not renames:
        return None
    return Fix("rename", f"{len(renames)} tensor(s) renamed: " +
               ", ".join(f"{a!r} -> {b!r}" for a, b in list(renames.items())[:5]) + ".",
               changes={"tensors": sorted(renames), "bytes": 0},
               apply=_renamer(renames, "renamed"), renames=renames)


def copy_head(embed: str, head: str, length: int) -> Fix:
    """lm_head written as a byte copy of the embedding, in the embedding's file."""

    def apply(b: Build) -> None:
        hit = by_origin(b, embed)
        if hit is None:
            return
        f, t = hit
        f.tensors.append(OutTensor(head, t.dtype, t.shape, t.src_file, t.src_offset, t.length,
                                   embed, changed=[f"written as a copy of {t.name!r}"]))
        f.touch()
        b.index_rewrite = b.index_rewrite or b.index_name is not None

    return Fix("tie_lm_head", f"{head!r} written as a copy of {embed!r} ({length} bytes).",
               changes={"tensors": [head], "bytes": length}, apply=apply, codes=("lm_head_missing",))


def _transposed_chunks(path: str, offset: int, shape: tuple[int, int], itemsize: int) -> Producer:
    rows, cols = shape  # the source's shape; the output is (cols, rows)

    def produce(chunk: int) -> Iterator[bytes]:
        src = np.memmap(path, dtype=_UINT[itemsize], mode="r", offset=offset, shape=(rows, cols))
        step = max(1, chunk // max(1, rows * itemsize))
        for c in range(0, cols, step):
            yield np.ascontiguousarray(src[:, c:c + step].T).tobytes()
        del src

    return produce


def transpose(build: Build, names: list[str]) -> tuple[Fix | None, list[str]]:
    """Write 2-D tensors back transposed; returns the fix and notes on names it cannot take."""
    notes, ok = [], []
    for name in names:
        hit = by_origin(build, name)
        if hit is None:
            notes.append(f"transpose: no tensor {name!r}; skipped.")
            continue
        t = hit[1]
        bits = SAFETENSORS_BITS.get(t.dtype, 0)
        if len(t.shape) != 2 or bits % 8 or bits // 8 not in _UINT:
            notes.append(f"transpose: {name!r} is {t.dtype} {list(t.shape)}, not a 2-D tensor of "
                         "whole-byte elements; skipped.")
            continue
        ok.append(name)
    if not ok:
        return None, notes

    def apply(b: Build) -> None:
        for name in ok:
            f, t = by_origin(b, name)
            itemsize = SAFETENSORS_BITS[t.dtype] // 8
            if math.prod(t.shape) * itemsize != t.length:
                continue
            t.produce = _transposed_chunks(t.src_file, t.src_offset, t.shape, itemsize)
            t.changed.append(f"transposed {list(t.shape)} -> {list(t.shape[::-1])}")
            t.shape = t.shape[::-1]
            f.touch()

    return Fix("transpose", f"{len(ok)} tensor(s) written transposed to the expected orientation: "
               f"{ok[:5]}.", changes={"tensors": ok, "bytes": 0}, apply=apply,
               codes=("transposed_weight",)), notes
