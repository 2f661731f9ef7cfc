"""GGUF reader: magic, version, counts, typed key/values, tensor infos, then aligned data.

Lengths in the file are never trusted for allocation: every string and array is checked
against the bytes that remain before it is read, and arrays are kept lazy (type, count and
offset; elements decoded on demand), so a 128k-token vocabulary costs one walk, not 128k
Python objects.
"""

from __future__ import annotations

import math
import struct
from array import array
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..ggml import (
    DEFAULT_ALIGNMENT,
    MAGIC,
    MAX_DIMS,
    NUMPY_CODES,
    QUANT_SIZES,
    SCALAR_FORMATS,
    SUPPORTED_VERSIONS,
    Keys,
    ValueType,
    type_name,
)
from ..records import TensorInfo
from ..sources import basename
from ..spans import Report, short_repr
from . import MAX_RANK
from .gguf_strings import FAST_FIRST_WINDOW, FAST_MAX_WINDOW, FAST_MIN_RUN, short_run
from .result import FileResult
from .truncation import find_truncation, report_truncation

MAX_ARRAY_DEPTH = 8  # arrays of arrays deeper than this are not real metadata


class Truncated(Exception):
    """Raised inside the walk when a field would run past the end of the file."""

    def __init__(self, offset: int, need: int, what: str, length_at: int | None = None) -> None:
        super().__init__(what)
        self.offset, self.need, self.what = offset, need, what
        self.length_at = length_at  # where the length that asked for too much was read


class _Stop(Exception):
    """Raised after a finding that leaves the rest of the header impossible to locate."""


class _Cursor:
    """Reads fields in order from a source's prefix, growing the prefix only when needed."""

    def __init__(self, source, byteorder: str) -> None:
        self.source = source
        self.size = source.size
        self.bo = byteorder
        self.buf = source.prefix(64 * 1024)
        self.pos = 0
        self._structs: dict[str, struct.Struct] = {}

    def need(self, n: int, what: str) -> None:
        if self.pos + n > self.size:
            raise Truncated(self.pos, n, what)
        if self.pos + n > len(self.buf):
            self.buf = self.source.prefix(self.pos + n)
            if self.pos + n > len(self.buf):  # the source delivered less than its size says
                raise Truncated(self.pos, n, what)

    def unpack(self, fmt: str, what: str):
        st = self._structs.get(fmt)
        if st is None:
            st = self._structs[fmt] = struct.Struct(self.bo + fmt)
        self.need(st.size, what)
        v = st.unpack_from(self.buf, self.pos)
        self.pos += st.size
        return v[0] if len(v) == 1 else v

    def bytes(self, n: int, what: str) -> bytes:
        self.need(n, what)
        b = bytes(self.buf[self.pos:self.pos + n])
        self.pos += n
        return b

    def string(self, what: str) -> tuple[str, bool]:
        """A u64 length then UTF-8 bytes; returns (text, valid_utf8)."""
        n = self.unpack("Q", what + " length")
        if self.pos + n > self.size:  # checked before reading: the length is not trusted
            raise Truncated(self.pos, n, what, length_at=self.pos - 8)
        raw = self.bytes(n, what)
        try:
            return raw.decode("utf-8"), True
        except UnicodeDecodeError:
            return raw.decode("utf-8", errors="replace"), False


class GGUFArray:
    """A GGUF array kept in the file: length first, elements decoded on demand."""

    def __init__(self, source, elem_type: int, count: int, offset: int, length: int,
                 byteorder: str, string_offsets: array | None = None,
                 items: list | None = None) -> None:
        self.source = source
        self.elem_type = elem_type
        self.count = count
        self.offset = offset  # first element
        self.length = length  # bytes of all elements
        self.byteorder = byteorder
        self._string_offsets = string_offsets
        self._items = items  # only for arrays of arrays, which are rare and small

    @property
    def type_name(self) -> str:
        return _value_type_name(self.elem_type)

    def __len__(self) -> int:
        return self.count

    def to_numpy(self) -> np.ndarray:
        """Numeric arrays as a numpy array (a copy, byte order made native)."""
        code = NUMPY_CODES.get(ValueType(self.elem_type)) if self.elem_type in ValueType._value2member_map_ else None
        if code is None:
            raise TypeError(f"a GGUF array of {self.type_name} has no numpy form")
        dt = np.dtype(code).newbyteorder(self.byteorder)  # type: ignore[arg-type]  # "<" or ">"
        raw = self.source.read(self.offset, self.length)
        return np.frombuffer(raw, dtype=dt).astype(dt.newbyteorder("="))

    def _string(self, start: int) -> str:
        """The string whose length field starts at byte `start`."""
        head = self.source.read(start, 8)
        (n,) = struct.unpack(self.byteorder + "Q", head)
        return self.source.read(start + 8, n).decode("utf-8", errors="replace")

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self.count))]
        if index < 0:
            index += self.count
        if not 0 <= index < self.count:
            raise IndexError(index)
        if self._items is not None:
            return self._items[index]
        if self._string_offsets is not None:
            return self._string(int(self._string_offsets[index]))
        fmt = SCALAR_FORMATS[ValueType(self.elem_type)]
        size = struct.calcsize(fmt)
        raw = self.source.read(self.offset + index * size, size)
        return struct.unpack(self.byteorder + fmt, raw)[0]

    def __iter__(self):
        return iter(self.to_list())

    def to_list(self) -> list:
        if self._items is not None:
            return [x.to_list() if isinstance(x, GGUFArray) else x for x in self._items]
        if self._string_offsets is not None:
            raw = self.source.read(self.offset, self.length)
            base, unpack, out = self.offset, struct.Struct(self.byteorder + "Q").unpack_from, []
            for start in self._string_offsets:
                p = start - base
                (n,) = unpack(raw, p)
                out.append(raw[p + 8:p + 8 + n].decode("utf-8", errors="replace"))
            return out
        return self.to_numpy().tolist()

    def __repr__(self) -> str:
        return f"GGUFArray({self.type_name} x {self.count})"


@dataclass(slots=True)
class KeyValue:
    """One GGUF metadata entry with its type and where it lives."""

    key: str
    type: str  # "UINT32", "STRING", "ARRAY[STRING]", ...
    value: Any  # a Python scalar, a str, or a GGUFArray
    offset: int  # start of the key's length prefix
    length: int  # key, type and value together
    index: int
    file: str = ""  # the split that holds it: later splits add their own keys

    def __repr__(self) -> str:
        return f"KeyValue({self.key!r}, {self.type}, {short_repr(self.value, 60)})"


def _value_type_name(code: int) -> str:
    try:
        return ValueType(code).name
    except ValueError:
        return f"TYPE_{code}"


def _detect_byteorder(head: bytes) -> tuple[str, int]:
    """Byte order and version; GGUF has no flag, so a byte-swapped version gives it away."""
    le = struct.unpack_from("<I", head, 4)[0]
    be = struct.unpack_from(">I", head, 4)[0]
    if le & 0xFFFF == 0 and be & 0xFFFF != 0:
        return ">", be
    return "<", le


def read_gguf(source) -> FileResult:
    rep = Report(source.name)
    result = FileResult(source.name, source.size, rep)
    head = bytes(source.prefix(24)[:24])
    if len(head) < 4 or head[:4] != MAGIC:
        rep.error("bad_magic", f"A GGUF file starts with the bytes 'GGUF'; found {head[:4]!r}.", 0,
                  min(4, len(head)))
        return result
    rep.span(0, 4, "magic", "magic", "GGUF")
    if len(head) < 8:
        rep.error("truncated", f"The file ends after {len(head)} bytes, inside the version field.",
                  0, len(head))
        return result
    bo, version = _detect_byteorder(head)
    rep.span(4, 4, "version", "version", f"u32 = {version}" + (" (big-endian)" if bo == ">" else ""))
    result.details.update(version=version, byteorder=bo)
    if version not in SUPPORTED_VERSIONS:
        rep.error("unsupported_version", f"GGUF version {version} is not supported; this reader "
                  f"knows versions {', '.join(map(str, SUPPORTED_VERSIONS))}.", 4, 4)
        return result
    if bo == ">":
        rep.info("big_endian", "This GGUF file is big-endian; all numbers are read byte-swapped.", 4, 4)
    cur = _Cursor(source, bo)
    cur.pos = 8
    kvs: dict[str, KeyValue] = {}
    infos: list[_RawInfo] = []
    try:
        n_tensors = cur.unpack("Q", "tensor count")
        rep.span(8, 8, "count", "tensor count", f"u64 = {n_tensors}")
        n_kv = cur.unpack("Q", "key/value count")
        rep.span(16, 8, "count", "key/value count", f"u64 = {n_kv}")
        result.details.update(tensor_count=n_tensors, kv_count=n_kv)
        _read_kvs(cur, n_kv, rep, result, kvs)
        alignment = _alignment(kvs, rep)
        _read_tensor_infos(cur, n_tensors, rep, infos)
    except Truncated as t:
        if t.length_at is not None:
            rep.error("string_past_end", f"The {t.what} at byte {t.length_at} says it is {t.need} "
                      f"bytes long, but only {source.size - t.offset} bytes remain in the file.",
                      t.length_at, 8)
        else:
            rep.error("truncated", f"The file ends at byte {source.size}, but the {t.what} at byte "
                      f"{t.offset} needs {t.need} bytes: the header is cut short.", t.offset,
                      max(0, source.size - t.offset))
        _list_unplaced(infos, rep, result)
        return _done(rep, result)
    except _Stop:
        _list_unplaced(infos, rep, result)
        return _done(rep, result)
    header_end = cur.pos
    data_start = -(-header_end // alignment) * alignment
    if data_start > header_end:
        rep.span(header_end, min(data_start, source.size) - header_end, "padding",
                 "padding before tensor data", f"{data_start - header_end} bytes to a multiple of {alignment}")
    result.data_start = data_start
    result.details.update(alignment=alignment, header_end=header_end)
    _place_tensors(infos, data_start, alignment, rep, result)
    return _done(rep, result)


def _done(rep: Report, result: FileResult) -> FileResult:
    rep.spans.sort(key=lambda s: (s.offset, -s.length))  # parents before their fields
    return result


def _list_unplaced(infos: list[_RawInfo], rep: Report, result: FileResult) -> None:
    """Tensor infos read before the header broke off: listed, but where their data starts is
    unknown (it follows the end of the header), so they point at the end of the file."""
    if not infos:
        return
    rep.warning("tensors_unplaced", f"{len(infos)} tensor infos were read before the header broke "
                "off; they are listed, but their data cannot be located.", infos[0].start,
                infos[-1].start + infos[-1].length - infos[0].start)
    for raw in infos:
        info = _tensor_info(raw, result.file, result.size, _tensor_length(raw)[0],
                            result.details["byteorder"])
        info.extra["data_offset"] = raw.rel_offset
        info.extra["unplaced"] = True
        result.tensors.setdefault(raw.name, info)


def _read_kvs(cur: _Cursor, n_kv: int, rep: Report, result: FileResult,
              kvs: dict[str, KeyValue]) -> None:
    for i in range(n_kv):
        start = cur.pos
        key, ok = cur.string(f"key of key/value {i}")
        if not ok:
            rep.warning("bad_utf8", f"Key {i} is not valid UTF-8; shown with replacement characters.",
                        start, cur.pos - start)
        rep.span(start, cur.pos - start, "key", f"KV {i} > {key} > key", f"string, {cur.pos - start - 8} bytes")
        type_pos = cur.pos
        vtype = cur.unpack("I", f"type of {key!r}")
        rep.span(type_pos, 4, "type", f"KV {i} > {key} > type", _value_type_name(vtype))
        value_pos = cur.pos
        try:
            value, tname = _read_value(cur, vtype, key, rep, 0)
        except _UnknownType as u:
            if u.code == ValueType.ARRAY:
                rep.error("array_too_deep", f"Key {key!r} nests arrays more than {MAX_ARRAY_DEPTH} "
                          "deep; no real metadata does. The rest of the header is not read.", u.offset, 4)
            else:
                rep.error("unknown_value_type", f"Key {key!r} has value type {u.code}, which GGUF does "
                          "not define (0 to 12); the rest of the header cannot be located.", u.offset, 4)
            raise _Stop() from None
        rep.span(value_pos, cur.pos - value_pos, "value", f"KV {i} > {key} > value",
                 f"{tname.lower()}, {cur.pos - value_pos} bytes: {short_repr(value, 60)}")
        rep.span(start, cur.pos - start, "kv", f"KV {i} > {key}")
        if key in kvs:
            rep.error("duplicate_key", f"Key {key!r} appears twice: llama.cpp refuses the file, and "
                      "readers that accept it (gguf-py) keep the later value, as shown here.",
                      start, cur.pos - start)
        kvs[key] = result.metadata[key] = KeyValue(key, tname, value, start, cur.pos - start, i,
                                                   cur.source.name)


class _UnknownType(Exception):
    def __init__(self, code: int, offset: int) -> None:
        super().__init__(code)
        self.code, self.offset = code, offset


def _read_value(cur: _Cursor, vtype: int, key: str, rep: Report, depth: int):
    if vtype in SCALAR_FORMATS:
        return cur.unpack(SCALAR_FORMATS[ValueType(vtype)], f"value of {key!r}"), ValueType(vtype).name
    if vtype == ValueType.STRING:
        start = cur.pos
        text, ok = cur.string(f"string value of {key!r}")
        if not ok:
            rep.warning("bad_utf8", f"The value of {key!r} is not valid UTF-8.", start, cur.pos - start)
        return text, "STRING"
    if vtype == ValueType.ARRAY:
        if depth >= MAX_ARRAY_DEPTH:
            raise _UnknownType(vtype, cur.pos - 4)
        return _read_array(cur, key, rep, depth)
    raise _UnknownType(vtype, cur.pos - 4)


def _read_array(cur: _Cursor, key: str, rep: Report, depth: int):
    type_pos = cur.pos
    etype = cur.unpack("I", f"array type of {key!r}")
    count = cur.unpack("Q", f"array length of {key!r}")
    first = cur.pos
    if etype in SCALAR_FORMATS:
        size = struct.calcsize(SCALAR_FORMATS[ValueType(etype)])
        if count * size > cur.size - first:
            rep.error("array_past_end", f"Array {key!r} says {count} elements of {size} bytes, "
                      f"but only {cur.size - first} bytes remain in the file.", type_pos + 4, 8)
            raise _Stop()
        cur.pos += count * size
        arr = GGUFArray(cur.source, etype, count, first, count * size, cur.bo)
    elif etype == ValueType.STRING:
        arr = _walk_strings(cur, etype, count, key, type_pos, rep)
    elif etype == ValueType.ARRAY:
        if count * 12 > cur.size - first:  # each inner array takes at least its type and count
            rep.error("array_past_end", f"Array {key!r} says {count} arrays, which need at least "
                      f"{count * 12} bytes, but only {cur.size - first} bytes remain in the file.",
                      type_pos + 4, 8)
            raise _Stop()
        items = []
        for _ in range(count):
            value, _ = _read_value(cur, ValueType.ARRAY, key, rep, depth + 1)
            items.append(value)
        arr = GGUFArray(cur.source, etype, count, first, cur.pos - first, cur.bo, items=items)
    else:
        raise _UnknownType(etype, type_pos)
    return arr, f"ARRAY[{_value_type_name(etype)}]"


def _walk_strings(cur: _Cursor, etype, count, key, type_pos, rep) -> GGUFArray:
    """Skip `count` length-prefixed strings, recording where each starts (the hot loop).

    Runs of short strings (a vocabulary, its merges) are found with numpy (gguf_strings.py); a
    string it cannot vouch for is stepped over here, with every check, and numpy resumes after
    it. The offsets are the same either way: each one is where the previous string ends."""
    first, size = cur.pos, cur.size
    if count * 8 > size - first:
        rep.error("array_past_end", f"Array {key!r} says {count} strings, which need at least "
                  f"{count * 8} bytes, but only {size - first} bytes remain in the file.", type_pos + 4, 8)
        raise _Stop()
    offsets = array("q")
    append = offsets.append
    unpack = struct.Struct(cur.bo + "Q").unpack_from
    pos, buf = first, cur.buf
    buflen = len(buf)
    done, window, slow_until, slow = 0, FAST_FIRST_WINDOW, 0, FAST_MIN_RUN
    while done < count:
        if done >= slow_until:
            run, after = short_run(buf, pos, count - done, min(buflen, size), window, cur.bo)
            if len(run):
                offsets.frombytes(run.tobytes())
                done += len(run)
                window = min(FAST_MAX_WINDOW, max(FAST_FIRST_WINDOW, 2 * (after - pos)))
                pos = after
            if len(run) < FAST_MIN_RUN:  # long strings, or few left: step over some here first,
                slow_until = done + slow  # more each time numpy comes back with little
                slow = min(2 * slow, 1 << 16)
            else:
                slow = FAST_MIN_RUN
            continue
        for _ in range(min(count, slow_until) - done):
            if pos + 8 > buflen:
                cur.pos = pos
                cur.need(8, f"string in array {key!r}")
                buf = cur.buf
                buflen = len(buf)
            append(pos)
            pos += 8 + unpack(buf, pos)[0]
            if pos > size:
                cur.pos = offsets[-1]
                rep.error("string_past_end", f"A string in array {key!r} at byte {offsets[-1]} says "
                          f"it is {pos - offsets[-1] - 8} bytes long, past the end of the file.",
                          offsets[-1], 8)
                raise _Stop()
        done = min(count, slow_until)
    cur.pos = pos
    cur.need(0, "")
    return GGUFArray(cur.source, etype, count, first, pos - first, cur.bo, string_offsets=offsets)


def _alignment(kvs: dict[str, KeyValue], rep: Report) -> int:
    kv = kvs.get(Keys.ALIGNMENT)
    if kv is None:
        return DEFAULT_ALIGNMENT
    a = kv.value
    if not isinstance(a, int) or isinstance(a, bool) or a <= 0 or a & (a - 1):
        rep.error("bad_alignment", f"general.alignment is {short_repr(a)}; it must be a positive "
                  f"power of two. Using the default {DEFAULT_ALIGNMENT}.", kv.offset, kv.length)
        return DEFAULT_ALIGNMENT
    if kv.type != "UINT32":
        rep.warning("alignment_type", f"general.alignment should be UINT32; found {kv.type}.",
                    kv.offset, kv.length)
    return a


@dataclass(slots=True)
class _RawInfo:
    name: str
    dims: tuple[int, ...]
    ggml_type: int
    rel_offset: int
    start: int
    length: int


def _read_tensor_infos(cur: _Cursor, n: int, rep: Report, infos: list[_RawInfo]) -> None:
    for i in range(n):
        start = cur.pos
        name, ok = cur.string(f"name of tensor info {i}")
        rep.span(start, cur.pos - start, "key", f"tensor {i} > {name} > name", short_repr(name), tensor=name)
        if not ok:
            rep.warning("bad_utf8", f"Tensor name {i} is not valid UTF-8.", start, cur.pos - start, name)
        dpos = cur.pos
        n_dims = cur.unpack("I", f"dimension count of {name!r}")
        if n_dims > MAX_DIMS:
            rep.error("too_many_dims", f"Tensor {name!r} has {n_dims} dimensions; ggml allows at "
                      f"most {MAX_DIMS}." + (" The rest of the header is not read." if n_dims > MAX_RANK
                                             else ""), dpos, 4, name)
            if n_dims > MAX_RANK:  # hostile or damaged: nothing after it can be trusted
                raise _Stop()
        dims = cur.unpack(f"{n_dims}Q", f"dimensions of {name!r}") if n_dims else ()
        dims = (dims,) if isinstance(dims, int) else tuple(dims)
        rep.span(dpos, cur.pos - dpos, "dims", f"tensor {i} > {name} > dims",
                 f"{n_dims} dims: {list(dims)}", tensor=name)
        tpos = cur.pos
        gtype = cur.unpack("I", f"type of {name!r}")
        rep.span(tpos, 4, "type", f"tensor {i} > {name} > type", type_name(gtype), tensor=name)
        opos = cur.pos
        rel = cur.unpack("Q", f"offset of {name!r}")
        rep.span(opos, 8, "offset", f"tensor {i} > {name} > offset", f"u64 = {rel} (from data start)",
                 tensor=name)
        rep.span(start, cur.pos - start, "tensor_info", f"tensor {i} > {name}", tensor=name)
        infos.append(_RawInfo(name, dims, gtype, rel, start, cur.pos - start))


def _tensor_length(raw: _RawInfo) -> tuple[int, int | None]:
    """Bytes of a tensor's data and its block size; (0, None) for an unknown ggml type."""
    sizes = QUANT_SIZES.get(raw.ggml_type)
    if sizes is None:
        return 0, None
    block, block_bytes = sizes
    numel = math.prod(raw.dims) if raw.dims else 1
    return numel // block * block_bytes, block


def _tensor_info(raw: _RawInfo, file: str, offset: int, length: int, byteorder: str) -> TensorInfo:
    info = TensorInfo(raw.name, type_name(raw.ggml_type), tuple(reversed(raw.dims)), file, offset, length,
                      byteorder)
    info.extra["ggml_dims"] = raw.dims
    info.extra["info_span"] = (raw.start, raw.length)
    return info


def _place_tensors(infos, data_start, alignment, rep: Report, result: FileResult) -> None:
    size = result.size
    for raw in infos:
        name = raw.name
        dtype = type_name(raw.ggml_type)
        length, block = _tensor_length(raw)
        if block is None:
            rep.error("unknown_tensor_type", f"Tensor {name!r} has ggml type {raw.ggml_type}, which "
                      "this reader does not know; its size cannot be computed. Other tensors are "
                      "unaffected.", raw.start, raw.length, name)
        elif raw.dims and raw.dims[0] % block:
            rep.error("bad_block_shape", f"Tensor {name!r} is {dtype} with rows of {raw.dims[0]} "
                      f"elements, not a multiple of its {block}-element block.",
                      raw.start, raw.length, name)
        offset = data_start + raw.rel_offset
        if raw.rel_offset % alignment:
            rep.error("misaligned", f"Tensor {name!r} starts at data offset {raw.rel_offset}, not "
                      f"a multiple of the alignment {alignment}.", offset, length, name)
        if name in result.tensors:
            rep.error("duplicate_tensor", f"Two tensor infos are named {name!r}; the second one "
                      "hides the first.", raw.start, raw.length, name)
        result.tensors[name] = _tensor_info(raw, result.file, offset, length, result.details["byteorder"])
    ordered = sorted(result.tensors.values(), key=lambda t: t.offset)
    # A file cut short is one finding, not a data_past_end error for every tensor after the cut.
    cut = find_truncation(ordered, data_start, size, result.file, alignment)
    if cut is not None:
        report_truncation(rep, cut, basename(result.file))
        result.details["truncated"] = cut.to_dict()
    prev = None
    for t in ordered:
        if prev is not None and t.offset < prev.end:
            rep.error("data_overlap", f"Tensor {t.name!r} starts at byte {t.offset}, inside "
                      f"{prev.name!r} which ends at byte {prev.end}.", t.offset,
                      min(prev.end, t.end) - t.offset, t.name)
        if t.end > size and cut is None:
            rep.error("data_past_end", f"Tensor {t.name!r} needs bytes {t.offset} to {t.end}, "
                      f"past the end of the file ({size} bytes): the file is truncated.",
                      t.offset, t.length, t.name)
        if t.offset < size:
            rep.span(t.offset, min(t.end, size) - t.offset, "tensor_data", f"data > {t.name}",
                     f"{t.dtype} {list(t.shape)}", tensor=t.name)
        if prev is None or t.end > prev.end:
            prev = t
