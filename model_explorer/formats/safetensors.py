"""Safetensors reader: 8-byte header length, JSON header, then the data section.

Validation follows the reference Rust reader (header size cap, checked sizes, contiguous
sorted offsets, data ending where the file ends), but every problem becomes a finding and
the reader keeps going with whatever can still be read.
"""

from __future__ import annotations

import math
import struct
import zlib
from functools import partial
from operator import attrgetter
from typing import Any

from ..dtypes import SAFETENSORS_BITS, nbytes_for
from ..records import TensorInfo
from ..sources import basename
from ..spans import Report, Span, short_repr
from ..tensormap import TensorMap
from . import MAX_RANK
from .jsonpos import DuplicateKeys, JSONPositionError, iter_members
from .result import FileResult
from .stcolumns import read_entries, span_kinds, spans_of
from .truncation import find_truncation, report_truncation

MAGIC_LENGTH = 8
# The reference reader refuses headers above 100 MB; so do we, before reading them.
MAX_HEADER_SIZE = 100_000_000
# Header names a tensor so large that its size no longer means anything.
MAX_ELEMENTS = 2**62
# Entries labelled in the hexdump (4 spans each); past this, a hostile header of a million
# entries would cost gigabytes of labels. Real files have fewer than 100,000 tensors.
MAX_LABELLED_ENTRIES = 200_000
# Tensors listed; entries past it are still parsed and checked one by one, but not kept: a
# 100 MB header of a million overlapping entries must open in seconds and under a gigabyte.
MAX_LISTED_TENSORS = 300_000


def read_safetensors(source, fast: bool = True) -> FileResult:
    """Read one file. `fast`: take the columnar path (stcolumns.py) when the header is the plain
    kind it accepts, with the same records and findings; its spans are then made from the
    columns when a view first asks for them (`result.lazy_spans`)."""
    size = source.size
    rep = Report(source.name)
    result = FileResult(source.name, size, rep)
    if size < MAGIC_LENGTH:
        rep.error("truncated", f"A safetensors file starts with an 8-byte header length; this file "
                  f"has only {size} bytes.", 0, size)
        return result
    (n,) = struct.unpack("<Q", source.read(0, 8))
    rep.span(0, 8, "length", "header length", f"u64 = {n}")
    if n > MAX_HEADER_SIZE:
        rep.error("header_too_large", f"The header length says {n} bytes; readers refuse more than "
                  f"{MAX_HEADER_SIZE} bytes. The first 8 bytes are probably not a length: the "
                  "file is damaged or not safetensors.", 0, 8)
        return result
    if 8 + n > size:
        rep.error("header_past_end", f"The header length says {n} bytes of JSON, but only "
                  f"{size - 8} bytes follow the length: the file is truncated or the length "
                  "is wrong.", 0, 8)
        n = size - 8
    raw = bytes(source.prefix(8 + n)[8:8 + n])
    data_start = 8 + n
    result.data_start = data_start
    rep.span(8, n, "json", "JSON header", f"{n} bytes")
    try:
        if not raw.isascii():
            raw.decode("utf-8")
    except UnicodeDecodeError as e:
        rep.error("header_not_utf8", f"The JSON header must be UTF-8; byte {8 + e.start} "
                  f"(0x{raw[e.start]:02x}) is not valid UTF-8.", 8 + e.start, 1)
    text = raw.decode("latin-1")
    ascii_only = raw.isascii()
    crc = zlib.crc32(raw) if fast else 0
    del raw  # a header can be 100 MB: keep one copy
    if fast and not rep.findings and _read_fast(text, ascii_only, crc, result):
        return result
    # Entries are read as the parser yields them, so a header of a million entries never
    # holds them all at once; an error late in the JSON undoes what was read before it.
    mark = rep.mark()
    box: list[int] = []
    try:
        _read_entries(iter_members(text, 0, box), text, rep, result)
        end = box[0]
    except JSONPositionError as e:
        rep.rollback(mark)
        result.tensors.clear()
        result.metadata.clear()
        found = text[e.pos:e.pos + 12].encode("latin-1")
        if _is_other_json(text):
            rep.error("header_not_object", "The header must be a JSON object mapping tensor names "
                      f"to entries; it is valid JSON but starts with {found!r}.", 8, n)
        else:
            rep.error("header_not_json", f"The header is not valid JSON: {e} at byte {8 + e.pos}, "
                      f"found {found!r}.", 8 + e.pos, max(1, len(found)))
        return result
    trailing = text[end:]
    if trailing.strip(" \t\n\r"):  # JSON whitespace is padding, as for the reference reader
        rep.error("header_trailing_garbage", "After the JSON object the header must hold only "
                  f"space padding; found {trailing[:16].encode('latin-1')!r}.", 8 + end, n - end)
    elif trailing:
        rep.span(8 + end, len(trailing), "padding", "header padding (spaces)",
                 f"{len(trailing)} bytes")
    _check_layout(result, data_start)
    return result


def _read_fast(text: str, ascii_only: bool, crc: int, result: FileResult) -> bool:
    """The columnar path; False (and nothing recorded) when the slow reader must look."""
    close = len(text.rstrip(" \t\n\r")) - 1
    if not text.startswith("{") or close < 1 or text[close] != "}" or \
            text.count('"data_offsets"', 0, close) > MAX_LABELLED_ENTRIES:
        return False
    pos, first_sep, meta = 0, "{", None
    if text.startswith('{"__metadata__":'):
        try:
            m = next(iter_members(text, 0))
        except (JSONPositionError, StopIteration):
            return False
        scratch = Report(result.file)
        _read_metadata(m.value, m, scratch, result)
        if scratch.findings or type(m.value) is not dict or m.value_end > close:
            result.metadata.clear()
            return False
        pos, first_sep = m.value_end, ","
        meta = (8 + m.key_start, m.value_end - m.key_start, len(m.value))
    table = read_entries(text, pos, close, first_sep, ascii_only, result.file,
                         result.data_start, result.size, TensorInfo)
    if table is None or len(table) > MAX_LABELLED_ENTRIES:  # past the cap: the slow way
        result.metadata.clear()
        return False
    tensors = TensorMap.from_table(table)
    if len(tensors) != len(table):  # a name twice
        result.metadata.clear()
        return False
    result.tensors = tensors
    result.report.spans.clear()  # the slow reader makes them all again, in order
    # what the header was, so spans built later from the columns are known to describe it
    seal = (result.size, len(text), crc)
    result.lazy_spans = partial(_spans_later, table, meta, seal)
    result.lazy_span_kinds = span_kinds(table, text, meta)
    return True


def _spans_later(table, meta, seal: tuple[int, int, int], source) -> tuple[list[Span], list]:
    """The spans of a file the fast path read, from its columns; a file that no longer holds
    the header it held at open is read again the slow way, which reports what is wrong now."""
    size, n, crc = seal
    head = bytes(source.read(0, 8 + n))
    if source.size == size and len(head) == 8 + n and zlib.crc32(head[8:]) == crc and \
            struct.unpack("<Q", head[:8])[0] == n:
        return spans_of(table, head[8:].decode("latin-1"), meta, size), []
    rep = read_safetensors(source, fast=False).report
    return rep.spans, rep.findings


def _is_other_json(text: str) -> bool:
    import json

    try:
        return not isinstance(json.loads(text), dict)
    except (ValueError, RecursionError):
        return False


def _read_entries(entries, text: str, rep: Report, result: FileResult) -> None:
    others: dict[str, int] = {}  # keys that made no tensor; tensors know their own offset
    unlisted: set[str] = set()  # keys past MAX_LISTED_TENSORS
    tensors = result.tensors
    base = 8
    add_span, file = rep.spans.append, rep.file  # the hot loop: 90,000 entries in big shards
    labelled = 0
    for m in entries:
        key = m.key
        key_off, entry_len = base + m.key_start, m.value_end - m.key_start
        if not key.isascii() and not _valid_unicode(key):
            rep.error("lone_surrogate", f"The key {short_repr(key)} holds a lone surrogate escape "
                      "(\\ud800-\\udfff without its pair), which is not Unicode; the reference "
                      "reader rejects the file.", key_off, m.key_end - m.key_start, key)
        first = tensors.get(key)
        first_at = first.extra["info_span"][0] if first is not None else others.get(key)
        if first_at is None and key in unlisted:
            first_at = "an earlier entry"
        if first_at is not None:
            rep.error("duplicate_key", f"The header names {key!r} twice (first at byte {first_at}); "
                      "readers disagree on which one wins.", key_off, entry_len, tensor=key)
            continue
        value = m.value
        if isinstance(value, DuplicateKeys):
            rep.error("duplicate_key", f"The entry {key!r} holds the field {_first_repeat(value)!r} twice.",
                      base + m.value_start, m.value_end - m.value_start, tensor=key)
            value = dict(value)
        if key == "__metadata__":
            others[key] = key_off
            rep.span(key_off, entry_len, "metadata", "__metadata__", f"{len(value) if isinstance(value, dict) else '?'} entries")
            _read_metadata(value, m, rep, result)
            continue
        if labelled < MAX_LABELLED_ENTRIES:
            labelled += 1
            path = "tensors > " + key
            add_span(Span(key_off, entry_len, "tensor_info", path, file, None, key))
            shown = key if len(key) <= 80 and "\n" not in key else short_repr(key)
            add_span(Span(key_off, m.key_end - m.key_start, "key", path + " > name", file, shown, key))
            shown = text[m.value_start:min(m.value_end, m.value_start + 80)]  # the entry as written
            if not shown.isascii() or m.value_end - m.value_start > 80:
                shown = short_repr(value)
            add_span(Span(base + m.value_start, m.value_end - m.value_start, "value", path + " > entry",
                          file, shown, key))
        elif labelled == MAX_LABELLED_ENTRIES:
            labelled += 1
            rep.info("header_labels_capped", f"The header has more than {MAX_LABELLED_ENTRIES} "
                     "entries; the ones after it are read and checked but not labelled in the "
                     "hexdump.", key_off, entry_len)
        if len(tensors) >= MAX_LISTED_TENSORS and _well_formed(value):
            unlisted.add(key)  # past the cap a sound entry costs a check, not a TensorInfo
            continue
        info = _tensor_from_entry(key, value, rep, key_off, entry_len, result)
        if info is None:
            others[key] = key_off
        elif len(tensors) < MAX_LISTED_TENSORS:
            tensors[key] = info
        else:
            unlisted.add(key)
    if unlisted:
        rep.warning("header_too_many_entries", f"The header describes {len(tensors) + len(unlisted)} "
                    f"tensors; the first {MAX_LISTED_TENSORS} are listed and laid out, the other "
                    f"{len(unlisted)} are only checked one by one (no real file has this many).",
                    8, 0)


def _well_formed(value) -> bool:
    """The fast path of _tensor_from_entry, without building anything."""
    if type(value) is not dict:
        return False
    dtype, shape, offsets = value.get("dtype"), value.get("shape"), value.get("data_offsets")
    bits = SAFETENSORS_BITS.get(dtype) if type(dtype) is str else None
    if not (bits and type(shape) is list and len(shape) <= MAX_RANK and type(offsets) is list
            and len(offsets) == 2):
        return False
    begin, end = offsets
    if not (type(begin) is int and type(end) is int and 0 <= begin <= end) or \
            [d for d in shape if type(d) is not int or d < 0]:
        return False
    numel = math.prod(shape)
    return numel <= MAX_ELEMENTS and (bits * numel + 7) // 8 == end - begin


def _valid_unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


def _first_repeat(pairs) -> str:
    seen = set()
    for k, _ in pairs:
        if k in seen:
            return k
        seen.add(k)
    return ""


def _read_metadata(value, m, rep: Report, result: FileResult) -> None:
    where = (8 + m.value_start, m.value_end - m.value_start)
    if not isinstance(value, dict):
        rep.error("metadata_not_object", f"__metadata__ must be an object of strings; found "
                  f"{type(value).__name__}.", *where)
        return
    for k, v in value.items():
        if not isinstance(v, str):
            rep.error("metadata_not_string", f"__metadata__[{k!r}] should be a string; found "
                      f"{type(v).__name__} {short_repr(v, 40)}. The reference reader rejects the "
                      "file.", *where)
        elif not v.isascii() and not _valid_unicode(v):
            rep.error("lone_surrogate", f"__metadata__[{k!r}] holds a lone surrogate escape, "
                      "which is not Unicode; the reference reader rejects the file.", *where)
        if not k.isascii() and not _valid_unicode(k):
            rep.error("lone_surrogate", f"The __metadata__ key {short_repr(k)} holds a lone "
                      "surrogate escape; the reference reader rejects the file.", *where)
    result.metadata.update(value)


def _tensor_from_entry(name, value, rep, off, length, result) -> TensorInfo | None:
    # Fast path: a well-formed entry (nearly all of them) costs a few lookups; any doubt falls
    # through to the checks below, which say what is wrong.
    if type(value) is dict:
        dtype: Any
        shape: Any
        offsets: Any
        dtype, shape, offsets = value.get("dtype"), value.get("shape"), value.get("data_offsets")
        bits = SAFETENSORS_BITS.get(dtype) if type(dtype) is str else None
        if bits and type(shape) is list and len(shape) <= MAX_RANK and type(offsets) is list \
                and len(offsets) == 2:
            begin, end = offsets
            if type(begin) is int and type(end) is int and 0 <= begin <= end and \
                    not [d for d in shape if type(d) is not int or d < 0]:
                numel = math.prod(shape)
                if numel <= MAX_ELEMENTS and (bits * numel + 7) // 8 == end - begin:
                    return TensorInfo(name, dtype, tuple(shape), result.file, result.data_start + begin,
                                      end - begin, extra={"info_span": (off, length)})
    if not isinstance(value, dict):
        rep.error("bad_tensor_entry", f"Tensor {name!r} should be described by an object with "
                  f"dtype, shape and data_offsets; found {type(value).__name__}.", off, length, name)
        return None
    missing = [k for k in ("dtype", "shape", "data_offsets") if k not in value]
    if missing:
        rep.error("bad_tensor_entry", f"Tensor {name!r} lacks {', '.join(missing)}.", off, length, name)
        return None
    dtype, shape, offsets = value["dtype"], value["shape"], value["data_offsets"]
    ok = True
    if not isinstance(dtype, str):
        rep.error("bad_dtype", f"Tensor {name!r} has dtype {short_repr(dtype)}; expected a string "
                  "such as \"F32\".", off, length, name)
        dtype, ok = str(dtype), False
    elif dtype not in SAFETENSORS_BITS:
        rep.error("unknown_dtype", f"Tensor {name!r} has dtype {dtype!r}, which the safetensors "
                  f"format does not define (known: {', '.join(SAFETENSORS_BITS)}).", off, length, name)
        ok = False
    if not (isinstance(shape, list) and all(type(d) is int for d in shape)):
        rep.error("bad_shape", f"Tensor {name!r} has shape {short_repr(shape)}; expected a list "
                  "of integers.", off, length, name)
        shape, ok = [], False
    elif len(shape) > MAX_RANK:
        rep.error("shape_too_large", f"Tensor {name!r} has a shape of {len(shape)} dimensions; no "
                  f"real tensor has more than {MAX_RANK}.", off, length, name)
        shape, ok = [], False
    elif any(d < 0 for d in shape):
        rep.error("negative_shape", f"Tensor {name!r} has shape {shape} with a negative size.",
                  off, length, name)
        ok = False
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(type(o) is int for o in offsets)):
        rep.error("bad_offsets", f"Tensor {name!r} has data_offsets {short_repr(offsets)}; expected "
                  "[begin, end] integers.", off, length, name)
        return TensorInfo(name, dtype, tuple(shape), result.file, result.data_start, 0,
                          extra={"info_span": (off, length)})
    begin, end = offsets
    if begin < 0 or end < begin:
        rep.error("bad_offsets", f"Tensor {name!r} has data_offsets [{begin}, {end}]; expected "
                  "0 <= begin <= end.", off, length, name)
        end = begin = max(begin, 0)
    info = TensorInfo(name, dtype, tuple(shape), result.file, result.data_start + begin, end - begin,
                      extra={"info_span": (off, length)})
    numel = math.prod(shape) if shape else 1
    if ok and numel > MAX_ELEMENTS:
        rep.error("shape_too_large", f"Tensor {name!r} has shape {short_repr(shape)}: more than "
                  f"2**62 elements, more than any real tensor.", off, length, name)
    elif ok and nbytes_for(SAFETENSORS_BITS[dtype], numel) != end - begin:
        expected = nbytes_for(SAFETENSORS_BITS[dtype], numel)
        rep.error("size_mismatch", f"Tensor {name!r} is {dtype} {shape}, which needs {expected} "
                  f"bytes, but data_offsets give {end - begin} bytes.", off, length, name)
    return info


def _check_layout(result: FileResult, data_start: int) -> None:
    """Offsets must tile the data section: sorted, no gaps, no overlaps, inside the file."""
    rep = result.report
    size = result.size
    add_span, file = rep.spans.append, rep.file
    cursor = data_start
    prev = None
    labels = MAX_LABELLED_ENTRIES
    ordered = sorted(result.tensors.values(), key=attrgetter("offset", "length"))
    # A file cut short is one finding, not a data_past_end error for every tensor after the cut.
    cut = find_truncation(ordered, data_start, size, result.file)
    if cut is not None:
        report_truncation(rep, cut, basename(result.file))
        result.details["truncated"] = cut.to_dict()
    for t in ordered:
        start, end = t.offset, t.offset + t.length
        if start > cursor:
            if rep.capped("data_gap"):  # only counted: skip the message and the span
                rep.error("data_gap", "", cursor, start - cursor, t.name)
            else:
                rep.error("data_gap", f"{start - cursor} bytes between "
                      f"{'the header' if prev is None else repr(prev.name)} and {t.name!r} belong "
                          "to no tensor; the reference reader rejects such files.", cursor,
                          start - cursor, t.name)
                if cursor < size:  # spans only cover bytes the file has
                    rep.span(cursor, min(start, size) - cursor, "gap", "unclaimed bytes")
        elif start < cursor and prev is not None:
            rep.error("data_overlap", "" if rep.capped("data_overlap") else
                      f"{t.name!r} starts at data offset {start - data_start}, "
                      f"inside {prev.name!r} which ends at {prev.end - data_start}.", start,
                      min(cursor, end) - start, t.name)
        if end > size and cut is None:
            rep.error("data_past_end", "" if rep.capped("data_past_end") else
                      f"{t.name!r} ends at byte {end}, past the end of the file "
                      f"({size} bytes): the file is truncated.", start, t.length, t.name)
        if (start < size or (start == size and not t.length)) and labels:
            labels -= 1
            add_span(Span(start, min(end, size) - start, "tensor_data", "data > " + t.name, file,
                          f"{t.dtype} {list(t.shape)}", t.name))
        if end >= cursor:
            cursor, prev = end, t
    if cursor < size and size > data_start:
        rep.warning("trailing_bytes", f"{size - cursor} bytes after the last tensor belong "
                    "to no tensor; the reference reader rejects such files.", cursor, size - cursor)
        rep.span(cursor, size - cursor, "gap", "trailing bytes")
    # Spans are emitted nearly in order, parents before their fields: a stable sort by offset
    # alone puts them in file order and costs little on 90,000-tensor headers.
    rep.spans.sort(key=attrgetter("offset"))
