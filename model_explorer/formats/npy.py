"""numpy `.npy` and `.npz` files, read without `np.load`.

`.npy`: the magic `\\x93NUMPY`, a version (1.0, 2.0 or 3.0), a header length (u16 for
version 1, u32 after), a header that is a Python literal
`{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4)}` padded with spaces to a
multiple of 64 bytes, then the raw array bytes. An array of Python objects (`descr` 'O',
alone or inside a structured dtype) stores a *pickle* instead of raw bytes, which
`np.load(allow_pickle=True)` runs: it is read with the same opcode emulator as any pickle
and judged the same way.

`.npz`: a zip of `<key>.npy` members (stored by `np.savez`, deflated by
`np.savez_compressed`); each member is read as above, its tensor named by its key.
"""

from __future__ import annotations

import ast
import math
import struct
import zlib

import numpy as np

from ..records import TensorInfo
from ..spans import Report, short_repr
from . import MAX_RANK
from .pytorch import REDUCERS, WATCH, pickle_details, sort_spans
from .pytorch.numpy_refs import NUMPY_KINDS
from .pytorch.placement import BytesSource
from .pytorch.values import PickleRun
from .pytorch.vm import PickleMachine
from .pytorch.walk import walk
from .pytorch.zipread import read_zip
from .result import FileResult

MAGIC = b"\x93NUMPY"
# numpy refuses longer headers unless allow_pickle=True; a megabyte bounds the literal parse.
MAX_HEADER = 1 << 20
NUMPY_HEADER_LIMIT = 10_000
MAX_INFLATED = 256 * 1024 * 1024
ROOT_NAME = "(root)"


def read_npy(source) -> FileResult:
    rep = Report(source.name)
    result = FileResult(source.name, source.size, rep)
    runs: list[PickleRun] = []
    _read_array(source, 0, source.size, ROOT_NAME, rep, result, runs, compressed=None)
    result.details["npy"] = {"object_array": bool(runs)}
    _finish(result, runs, rep)
    return result


def read_npz(source) -> FileResult:
    rep = Report(source.name)
    result = FileResult(source.name, source.size, rep)
    listing = read_zip(source, rep)
    runs: list[PickleRun] = []
    members = 0
    for name, e in list(listing.entries.items()) + [(e.name, e) for e in listing.shadowed]:
        if not name.endswith(".npy"):
            continue
        members += 1
        key = name[:-4]
        if e.method == 0:
            length = max(0, min(e.compressed_size, source.size - e.data_offset))
            _read_array(source, e.data_offset, length, key, rep, result, runs, compressed=None)
        elif e.method == 8:
            raw = bytes(source.read(e.data_offset, e.compressed_size))
            try:
                data = zlib.decompressobj(-15).decompress(raw, MAX_INFLATED)
            except zlib.error as err:
                rep.error("zip_bad_deflate", f"The member {name!r} does not inflate: {err}.",
                          e.data_offset, 1)
                continue
            _read_array(BytesSource(data), 0, len(data), key, rep, result, runs,
                        compressed=e.header_offset)
        else:
            rep.error("zip_unknown_compression", f"The member {name!r} uses compression method "
                      f"{e.method}, which np.load cannot read.", e.header_offset, 4)
    if not members:
        rep.error("npz_no_arrays", "The zip holds no .npy member, so np.load finds no array in it.",
                  0, min(4, source.size))
    result.details["npz"] = {"members": members, "entries": len(listing.entries)}
    _finish(result, runs, rep)
    return result


def _finish(result: FileResult, runs: list[PickleRun], rep: Report) -> None:
    if runs:  # object arrays: the pickles np.load(allow_pickle=True) would run
        structure = walk(runs[0].value, rep).structure
        result.details["pickle"] = pickle_details(runs, runs[0], structure, rep)
    sort_spans(rep)


def _read_array(source, base: int, length: int, name: str, rep: Report, result: FileResult,
                runs: list[PickleRun], compressed: int | None) -> None:
    """One .npy at [base, base + length) of `source`. `compressed`: the zip header offset of a
    deflated member, whose bytes have no offsets in the file (findings point at the header)."""
    def at(off: int) -> int:
        return compressed if compressed is not None else base + off

    def span(off: int, n: int, kind: str, path: str, value: str | None = None) -> None:
        if compressed is None:
            rep.span(base + off, n, kind, f"{label}{path}", value)

    label = "" if name == ROOT_NAME else f"{name}.npy > "
    head = bytes(source.read(base, 12))
    if head[:6] != MAGIC:
        rep.error("npy_bad_magic", f"{label or 'The file '}should start with \\x93NUMPY; found "
                  f"{head[:6]!r}.", at(0), min(6, length))
        return
    if len(head) < 8:
        rep.error("npy_truncated", "The file ends inside the .npy version bytes.", at(6), len(head) - 6)
        return
    major, minor = head[6], head[7]
    span(0, 6, "magic", "magic", "\\x93NUMPY")
    span(6, 2, "version", "version", f"{major}.{minor}")
    if major not in (1, 2, 3) or minor != 0:
        rep.error("npy_bad_version", f"The .npy version is {major}.{minor}; numpy writes 1.0, 2.0 "
                  "or 3.0 and refuses others.", at(6), 2)
        return
    size_len = 2 if major == 1 else 4
    if len(head) < 8 + size_len:
        rep.error("npy_truncated", "The file ends inside the .npy header length.", at(8), 0)
        return
    (hlen,) = struct.unpack_from("<H" if major == 1 else "<I", head, 8)
    start = 8 + size_len
    span(8, size_len, "length", "header length", str(hlen))
    if hlen > MAX_HEADER or start + hlen > length:
        rep.error("npy_bad_header", f"The header length says {hlen} bytes; "
                  + ("more than the file holds." if start + hlen > length else
                     f"more than {MAX_HEADER} bytes, which no array needs."), at(8), size_len)
        return
    raw = bytes(source.read(base + start, hlen))
    span(start, hlen, "json", "header", short_repr(raw.decode("latin-1").strip(), 80))
    header = _parse_header(raw, major, rep, at(start), hlen)
    if header is None:
        return
    if hlen > NUMPY_HEADER_LIMIT:
        rep.warning("npy_large_header", f"The header has {hlen} bytes; np.load refuses more than "
                    f"{NUMPY_HEADER_LIMIT} unless allow_pickle=True.", at(start), hlen)
    descr, fortran, shape = header
    data_start = start + hlen
    if (base + data_start) % 64 and compressed is None:
        rep.info("npy_unaligned", f"The array data of {name!r} starts at byte "
                 f"{base + data_start}, not on a 64-byte boundary as numpy writes it.",
                 base + data_start, 0)
    try:
        dtype = np.lib.format.descr_to_dtype(descr)
    except Exception as e:  # any descr numpy cannot turn into a dtype
        rep.error("npy_bad_dtype", f"The descr {short_repr(descr, 60)} is not a numpy dtype "
                  f"({type(e).__name__}: {short_repr(str(e), 80)}).", at(start), hlen)
        return
    if dtype.hasobject:
        _object_array(source, base, data_start, length, name, label, rep, runs, at)
        return
    itemsize = dtype.itemsize
    numel = math.prod(shape)
    nbytes = numel * itemsize
    avail = max(0, length - data_start)
    if nbytes > avail:
        rep.error("npy_truncated", f"Array {name!r} is {dtype} {list(shape)}, {nbytes} bytes, but "
                  f"only {avail} follow its header: the file is truncated.", at(data_start), avail,
                  name)
    elif nbytes < avail:
        rep.warning("npy_trailing_bytes", f"{avail - nbytes} bytes follow the data of {name!r}; "
                    "np.load ignores them.", at(data_start + nbytes), avail - nbytes, name)
    kind = NUMPY_KINDS.get((dtype.kind, itemsize)) if dtype.fields is None else None
    if kind is None:
        rep.info("npy_dtype_not_listed", f"Array {name!r} has dtype {dtype}, which this tool does "
                 "not decode; it is not listed as a tensor.", at(start), hlen, name)
        return
    order = ">" if dtype.byteorder == ">" else "<"
    steps: list[int] = []
    acc = 1
    for d in (shape if fortran else reversed(shape)):
        steps.append(acc)
        acc *= d
    stride = tuple(steps) if fortran else tuple(reversed(steps))
    info = TensorInfo(name, kind, tuple(shape), source.name if compressed is None else result.file,
                      base + data_start, min(nbytes, avail), order, stride,
                      extra={"numpy": True, "fortran_order": fortran})
    if compressed is not None:
        info.offset, info.length = 0, 0
        info.extra["compressed"] = True
    else:
        info.extra.update(storage_start=info.offset, storage_nbytes=info.length)
        span(data_start, min(nbytes, avail), "tensor_data", "data", f"{kind} {list(shape)}")
    result.tensors[name] = info


def _parse_header(raw: bytes, major: int, rep: Report, where: int, n: int):
    """(descr, fortran_order, shape) from the header literal, or None with a finding."""
    try:
        text = raw.decode("utf-8" if major == 3 else "latin-1")
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, UnicodeDecodeError, MemoryError, RecursionError,
            TypeError) as e:
        rep.error("npy_bad_header", f"The header is not a Python literal ({type(e).__name__}: "
                  f"{short_repr(str(e), 60)}); np.load refuses it.", where, n)
        return None
    if not (isinstance(value, dict) and set(value) == {"descr", "fortran_order", "shape"}):
        keys = sorted(map(str, value)) if isinstance(value, dict) else type(value).__name__
        rep.error("npy_bad_header", f"The header must be a dict with exactly descr, fortran_order "
                  f"and shape; found {short_repr(keys, 60)}.", where, n)
        return None
    shape, fortran = value["shape"], value["fortran_order"]
    if not (isinstance(shape, tuple) and len(shape) <= MAX_RANK and all(
            type(d) is int and 0 <= d < 1 << 62 for d in shape)):
        rep.error("npy_bad_header", f"The shape {short_repr(shape, 60)} is not a tuple of at most "
                  f"{MAX_RANK} non-negative integers.", where, n)
        return None
    if math.prod(shape) >= 1 << 62:
        rep.error("npy_bad_header", f"The shape {short_repr(shape, 60)} has more elements than any "
                  "file can hold.", where, n)
        return None
    if not isinstance(fortran, bool):
        rep.error("npy_bad_header", f"fortran_order is {short_repr(fortran, 30)}, not a bool.",
                  where, n)
        return None
    return value["descr"], fortran, shape


def _object_array(source, base: int, data_start: int, length: int, name: str, label: str,
                  rep: Report, runs: list[PickleRun], at) -> None:
    rep.warning("npy_object_array", f"Array {name!r} holds Python objects, stored as a pickle. "
                "np.load refuses it unless allow_pickle=True, which runs that pickle; its imports "
                "are checked here.", at(data_start), max(0, length - data_start), name)
    machine = PickleMachine(rep, f"{label}object array pickle", REDUCERS, watch=WATCH,
                            spans=at(0) == base)
    run = machine.run(source, base + data_start, max(0, length - data_start))
    if at(0) != base:  # a deflated member: point the imports at its zip header
        for g in run.imports:
            g.offset = at(0)
    runs.append(run)
