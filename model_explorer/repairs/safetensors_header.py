"""safetensors headers that are wrong while the data is intact: an unpadded header, metadata
values that are not strings, a dtype, shape or byte range that disagrees with the others, gaps
and trailing bytes, and a truncated last tensor (dropped, and said so as an error)."""

from __future__ import annotations

import json
import math
import re

from ..dtypes import SAFETENSORS_BITS, nbytes_for
from ..spans import Finding
from ..units import names_text
from .build import Build, OutFile, OutTensor
from .fix import Fix, Unfixable

# A dtype is re-read only within its family: a float tensor is never reinterpreted as integers.
FAMILIES = (("F64", "F32", "F16", "BF16", "F8_E4M3", "F8_E5M2"), ("I64", "I32", "I16", "I8"),
            ("U64", "U32", "U16", "U8"))


def _by_code(f: OutFile, *codes: str) -> list[Finding]:
    return [x for x in f.result.report.findings if x.code in codes] if f.result else []


def _origin(f: OutFile, name: str) -> OutTensor | None:
    return next((t for t in f.tensors if t.origin == name), None)


def _pattern(name: str) -> str:
    return re.sub(r"\d+", "#", name)


def readings(f: OutFile, t: OutTensor, build: Build) -> list[tuple[str, dict]]:
    """Every way the entry of `t` can be made consistent by changing one thing, where the rest
    of the checkpoint backs it: its byte range (the bytes up to the next tensor fit dtype x
    shape), its dtype (one the other tensors use, same family), or its shape (the shape of a
    sibling such as the same weight in another layer)."""
    out: list[tuple[str, dict]] = []
    bits = SAFETENSORS_BITS.get(t.dtype)
    if bits is None:
        return out
    numel = math.prod(t.shape) if t.shape else 1
    declared = nbytes_for(bits, numel)
    later = [u.src_offset for u in f.tensors if u.src_offset > t.src_offset]
    room = (min(later) if later else f.result.size) - t.src_offset
    if declared == room and declared != t.length:
        out.append((f"data_offsets end moved so the range holds {declared} bytes "
                    f"({t.dtype} {list(t.shape)})", {"length": declared}))
    others = [u for _, u in build.tensors() if u is not t]
    used = {u.dtype for u in others}
    family = next((fam for fam in FAMILIES if t.dtype in fam), ())
    for d in family:
        if d != t.dtype and d in used and nbytes_for(SAFETENSORS_BITS[d], numel) == t.length:
            out.append((f"dtype {t.dtype} -> {d}", {"dtype": d}))
    siblings = {u.shape for u in others if _pattern(u.name) == _pattern(t.name)}
    for s in sorted(siblings):
        if s != t.shape and nbytes_for(bits, math.prod(s) if s else 1) == t.length:
            out.append((f"shape {list(t.shape)} -> {list(s)} (as its siblings)", {"shape": s}))
    return out


def propose(build: Build) -> tuple[list[Fix], list[Unfixable]]:
    fixes: list[Fix] = []
    unfixable: list[Unfixable] = []
    for f in build.files:
        if f.result is None:
            continue
        fixes += _repad(f) + _metadata(f)
        size_fixes, size_unfixable, absorbed = _sizes(f, build)
        fixes += size_fixes
        unfixable += size_unfixable
        fixes += _contiguous(f, absorbed) + _truncated(build, f)
        for x in _by_code(f, "data_overlap"):
            unfixable.append(Unfixable(x.code, x.message, "The header says two tensors share bytes, so "
                                       "at least one range is wrong and nothing says which: "
                                       "re-export the checkpoint.", x))
    return fixes, unfixable


def _repad(f: OutFile) -> list[Fix]:
    """The reference writer pads the header so tensor data starts 8-byte aligned (zero-copy
    loaders need it); the readers accept either, so this is not a finding, only a fix."""
    if not f.tensors or f.result.data_start % 8 == 0:
        return []
    return [Fix("repad_header", f"{f.name}: the header ends at byte {f.result.data_start}, not a "
                "multiple of 8; padded with spaces so tensor data starts 8-byte aligned (tensor "
                "bytes unchanged).", [], {"files": [f.name], "bytes": -f.result.data_start % 8},
                lambda b, f=f: f.touch(), codes=("header_unaligned",))]


def _metadata(f: OutFile) -> list[Fix]:
    found = _by_code(f, "metadata_not_string")
    meta = f.metadata or {}
    keys = [k for k, v in meta.items() if not isinstance(v, str)]
    if not found or not keys:
        return []

    def apply(build: Build, f=f) -> None:
        changed = []
        for k in list(f.metadata):
            v = f.metadata[k]
            if not isinstance(v, str):
                f.metadata[k] = json.dumps(v)
                changed.append(f"__metadata__ {k}: {json.dumps(v)} -> {json.dumps(f.metadata[k])}")
        build.notes += [f"{f.name}: stringified {c}" for c in changed]
        f.touch()

    return [Fix("stringify_metadata", f"{f.name}: __metadata__ values {names_text(keys)} written as JSON strings.",
                found, {"files": [f.name], "keys": [f"__metadata__.{k}" for k in keys]}, apply)]


def _sizes(f: OutFile, build: Build) -> tuple[list[Fix], list[Unfixable], set[int]]:
    fixes, unfixable, absorbed = [], [], set()
    for x in _by_code(f, "size_mismatch"):
        t = _origin(f, x.tensor)
        if t is None:
            continue
        options = readings(f, t, build)
        if len(options) != 1:
            said = "; ".join(o[0] for o in options) if options else "none"
            unfixable.append(Unfixable(x.code, x.message, f"Readings that fit the bytes: {said}. "
                                       "Only a single reading is repaired; re-export the tensor.", x))
            continue
        what, change = options[0]
        resolves = [x]
        if "length" in change:  # the gap after it was its own bytes
            end = t.src_offset + t.length
            gaps = [g for g in _by_code(f, "data_gap") if g.offset == end]
            resolves += gaps
            absorbed.update(id(g) for g in gaps)

        def apply(build: Build, f=f, name=t.origin, change=change, what=what) -> None:
            u = _origin(f, name)
            for k, v in change.items():
                setattr(u, k, v)
            u.changed.append(what)
            f.touch()

        fixes.append(Fix("fix_entry", f"{f.name}: {t.name!r}: {what}.", resolves,
                         {"files": [f.name], "tensors": [t.name], "bytes": change.get("length", 0)},
                         apply))
    return fixes, unfixable, absorbed


def _contiguous(f: OutFile, absorbed: set[int]) -> list[Fix]:
    # A gap a fixed entry now covers is resolved by that fix, not by this one.
    found = [x for x in _by_code(f, "data_gap", "trailing_bytes") if id(x) not in absorbed]
    if not found:
        return []
    gap_bytes = sum(x.length or 0 for x in found)
    return [Fix("make_contiguous", f"{f.name}: tensors rewritten back to back in offset order "
                f"({gap_bytes} unclaimed bytes dropped, tensor bytes unchanged).", found,
                {"files": [f.name], "bytes": -gap_bytes}, lambda b, f=f: f.touch())]


def _truncated(build: Build, f: OutFile) -> list[Fix]:
    # a file cut short is one `truncated` finding naming its cut tensors; a wrong range is data_past_end
    found = [x for x in _by_code(f, "data_past_end", "truncated")
             if x.code == "data_past_end" or x.extra.get("cut_tensors")]
    if not found:
        return []
    names = [n for x in found for n in (x.extra.get("cut_tensors") or [x.tensor]) if n]

    def apply(b: Build, f=f, names=names) -> None:
        kept = []
        for t in f.tensors:
            if t.origin in names:
                b.errors.append(f"{f.name}: {t.name!r} dropped: its bytes run past the end of the "
                                "file (truncated). Copy or download the file again to get it back.")
            else:
                kept.append(t)
        f.tensors = kept
        f.touch()

    return [Fix("drop_truncated", f"{f.name}: {len(names)} truncated tensor(s) dropped ({names_text(names)}); "
                "the report lists each as an error.", found,
                {"files": [f.name], "tensors": names}, apply)]
