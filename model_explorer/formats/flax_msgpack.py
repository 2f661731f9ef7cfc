"""Flax checkpoints (flax_model.msgpack): a msgpack map of maps whose leaves are numpy arrays in
flax.serialization's ext type, walked byte by byte here (not through the msgpack package) so
every key, shape, dtype name and data run has its absolute offset.

flax.serialization writes an array as ext type 1 whose payload is the msgpack array
(shape, dtype name, raw C-order bytes); a numpy scalar as ext type 3 with the same payload; a
Python complex as ext type 2 holding (real, imag); and an array over 1 GiB as a map
{"__msgpack_chunked_array__": true, "shape": {...}, "chunks": {"0": array, ...}} of flat chunks.
Nested keys are joined with "/" (flax.traverse_util.flatten_dict's separator) into tensor names.
"""

from __future__ import annotations

import math
import struct

from ..records import TensorInfo
from ..spans import Report, short_repr
from . import MAX_RANK
from .catalog_note import note
from .result import FileResult

EXT_NDARRAY, EXT_COMPLEX, EXT_NPSCALAR = 1, 2, 3
CHUNKED_KEY = "__msgpack_chunked_array__"
MAX_DEPTH = 64  # maps inside maps; Flax trees are about 10 deep
MAX_TEXT = 64 * 1024  # a key or a dtype name
MAX_SCALARS = 10_000  # plain values (step counters, hyperparameters) kept in the metadata and labelled
MAX_VALUES = 500_000  # values walked: a real tree has a few per tensor; a file of a million nils does not
BLOCK = 4096  # bytes read at a time while walking the structure (one request each over http)
MAX_TAKE = 1 << 20  # the most one structure read may ask for (keys and dtype names are far shorter)
DTYPES = {"float32": "F32", "float16": "F16", "bfloat16": "BF16", "float64": "F64", "int8": "I8",
          "uint8": "U8", "int16": "I16", "uint16": "U16", "int32": "I32", "uint32": "U32",
          "int64": "I64", "uint64": "U64", "bool": "BOOL", "complex64": "C64",
          "float8_e4m3fn": "F8_E4M3", "float8_e5m2": "F8_E5M2"}
ITEMSIZE = {"F32": 4, "F16": 2, "BF16": 2, "F64": 8, "I8": 1, "U8": 1, "I16": 2, "U16": 2, "I32": 4,
            "U32": 4, "I64": 8, "U64": 8, "BOOL": 1, "C64": 8, "F8_E4M3": 1, "F8_E5M2": 1}


class Bad(Exception):
    """The bytes stop being msgpack: code, words, where."""

    def __init__(self, code: str, message: str, offset: int, length: int = 1):
        super().__init__(message)
        self.code, self.message, self.offset, self.length = code, message, offset, length


class _Bytes:
    """The file's bytes through a small cache: the walk reads headers, never the array data."""

    def __init__(self, source, end: int) -> None:
        self.source, self.end = source, end
        self.block_at, self.block = 0, b""

    def take(self, pos: int, n: int, what: str) -> bytes:
        if pos + n > self.end:
            raise Bad("msgpack_bad_structure", f"The {what} needs {n} bytes at byte {pos}, past the end "
                      f"of the file ({self.end} bytes): the file is truncated.", pos, max(0, self.end - pos))
        if n > MAX_TAKE:
            raise Bad("msgpack_too_large", f"The {what} at byte {pos} claims {n} bytes; no key or "
                      f"dtype name is that long.", pos, 0)
        if not (self.block_at <= pos and pos + n <= self.block_at + len(self.block)):
            self.block_at = pos
            self.block = bytes(self.source.read(pos, min(max(n, BLOCK), self.end - pos)))
        at = pos - self.block_at
        return self.block[at:at + n]


class _Head:
    """One msgpack value's header: its family, its length or value, where its body starts."""

    __slots__ = ("kind", "n", "body", "value", "ext")

    def __init__(self, kind: str, n: int, body: int, value=None, ext: int = 0):
        self.kind, self.n, self.body, self.value, self.ext = kind, n, body, value, ext


_FIXED = {0xC0: ("nil", None), 0xC2: ("bool", False), 0xC3: ("bool", True)}
_SIZED = {0xC4: ("bin", 1), 0xC5: ("bin", 2), 0xC6: ("bin", 4), 0xD9: ("str", 1), 0xDA: ("str", 2),
          0xDB: ("str", 4), 0xDC: ("array", 2), 0xDD: ("array", 4), 0xDE: ("map", 2), 0xDF: ("map", 4),
          0xC7: ("ext", 1), 0xC8: ("ext", 2), 0xC9: ("ext", 4)}
_NUMBERS = {0xCA: ">f", 0xCB: ">d", 0xCC: ">B", 0xCD: ">H", 0xCE: ">I", 0xCF: ">Q", 0xD0: ">b",
            0xD1: ">h", 0xD2: ">i", 0xD3: ">q"}
_FIXEXT = {0xD4: 1, 0xD5: 2, 0xD6: 4, 0xD7: 8, 0xD8: 16}


def _head(buf: _Bytes, pos: int) -> _Head:
    b = buf.take(pos, 1, "value")[0]
    if b <= 0x7F:
        return _Head("int", 0, pos + 1, b)
    if b >= 0xE0:
        return _Head("int", 0, pos + 1, b - 0x100)
    if b <= 0x8F:
        return _Head("map", b & 0x0F, pos + 1)
    if b <= 0x9F:
        return _Head("array", b & 0x0F, pos + 1)
    if b <= 0xBF:
        return _Head("str", b & 0x1F, pos + 1)
    if b in _FIXED:
        kind, value = _FIXED[b]
        return _Head(kind, 0, pos + 1, value)
    if b in _NUMBERS:
        fmt = _NUMBERS[b]
        size = struct.calcsize(fmt)
        (value,) = struct.unpack(fmt, buf.take(pos + 1, size, "number"))
        return _Head("float" if fmt[1] in "fd" else "int", 0, pos + 1 + size, value)
    if b in _FIXEXT:
        return _Head("ext", _FIXEXT[b], pos + 2, ext=buf.take(pos + 1, 1, "ext type")[0])
    if b in _SIZED:
        kind, width = _SIZED[b]
        n = int.from_bytes(buf.take(pos + 1, width, f"{kind} length"), "big")
        if kind == "ext":
            return _Head("ext", n, pos + 2 + width, ext=buf.take(pos + 1 + width, 1, "ext type")[0])
        return _Head(kind, n, pos + 1 + width)
    raise Bad("msgpack_bad_structure", f"Byte 0x{b:02x} at {pos} starts no msgpack value (0xc1 is "
              "never used).", pos)


def read_flax_msgpack(source) -> FileResult:
    rep = Report(source.name)
    result = FileResult(source.name, source.size, rep)
    walk = _Walk(_Bytes(source, source.size), result)
    try:
        end = walk.value(0, "", 0)
    except Bad as e:
        note(rep, e.code, e.message, e.offset, e.length)
        end = None
    if end is not None and end < source.size:
        note(rep, "msgpack_trailing_bytes", f"{source.size - end} bytes follow the msgpack value that "
             "holds the parameter tree; flax.serialization reads only that value.", end, source.size - end)
    if walk.chunked:
        note(rep, "msgpack_chunked_array", f"{len(walk.chunked)} array(s) over 1 GiB are stored in flat "
             f"chunks (the first: {walk.chunked[0]}); each chunk is listed as a tensor of its own.", 0, 0,
             walk.chunked[0])
    result.details["flax"] = {"tensors": len(result.tensors), "chunked_arrays": walk.chunked[:100]}
    rep.spans.sort(key=lambda s: s.offset)
    return result


class _Walk:
    def __init__(self, buf: _Bytes, result: FileResult) -> None:
        self.buf, self.result, self.rep = buf, result, result.report
        self.chunked: list[str] = []
        self.walked = self.scalars = 0

    def value(self, pos: int, name: str, depth: int) -> int:
        """Walk the value at `pos` (named `name` in the tree); returns where it ends."""
        self.walked += 1
        if self.walked > MAX_VALUES:
            raise Bad("msgpack_too_large", f"The file holds more than {MAX_VALUES} values; no parameter "
                      "tree has that many. The rest is not read.", pos, 0)
        h = _head(self.buf, pos)
        if h.kind in ("map", "array"):
            return self._container(pos, h, name, depth)
        if h.kind == "ext":
            end = self._fits(h, pos, "ext value")
            if h.ext in (EXT_NDARRAY, EXT_NPSCALAR):
                self._array(pos, h, name or "(root)")
            else:
                what = "complex number" if h.ext == EXT_COMPLEX else f"ext type {h.ext}"
                self.rep.span(pos, end - pos, "value", f"{name} > {what}", None)
            return end
        if h.kind in ("str", "bin"):
            end = self._fits(h, pos, h.kind)
            if h.kind == "str" and h.n <= 256:
                self._scalar(name, self._text(h, "string"), pos, end)
            return end
        self._scalar(name, h.value, pos, h.body)
        return h.body

    def _fits(self, h: _Head, pos: int, what: str) -> int:
        end = h.body + h.n
        if end > self.buf.end:
            raise Bad("msgpack_bad_structure", f"A {what} at byte {pos} claims {h.n} bytes, past the end "
                      f"of the file ({self.buf.end} bytes): the file is truncated.", pos, h.body - pos)
        return end

    def _container(self, pos: int, h: _Head, name: str, depth: int) -> int:
        if depth >= MAX_DEPTH:
            raise Bad("msgpack_too_deep", f"{'/' + name if name else 'The root'} nests maps {depth} deep; "
                      f"nothing below {MAX_DEPTH} levels is read.", pos, h.body - pos)
        least = (2 if h.kind == "map" else 1) * h.n  # every entry takes at least a byte per value
        if h.body + least > self.buf.end:
            raise Bad("msgpack_too_large", f"A {h.kind} at byte {pos} claims {h.n} entries, more than the "
                      f"{self.buf.end - h.body} bytes after it can hold.", pos, h.body - pos)
        self.rep.span(pos, h.body - pos, "count", f"{name or '(root)'} > {h.kind} header", f"{h.n} entries")
        at = h.body
        if h.kind == "array":
            for i in range(h.n):
                at = self.value(at, _join(name, str(i)), depth + 1)
            return at
        start = at
        for _ in range(h.n):
            kh = _head(self.buf, at)
            key = self._text(kh, "key") if kh.kind in ("str", "bin") else short_repr(kh.value)
            key_end = self._fits(kh, at, "key") if kh.kind in ("str", "bin") else kh.body
            self.rep.span(at, key_end - at, "key", f"{_join(name, key)} > key", short_repr(key))
            if key == CHUNKED_KEY and at == start:
                self.chunked.append(name)
            at = self.value(key_end, _join(name, key), depth + 1)
        return at

    def _text(self, h: _Head, what: str) -> str:
        if h.n > MAX_TEXT:
            raise Bad("msgpack_too_large", f"A {what} at byte {h.body} claims {h.n} bytes; no {what} is "
                      "that long.", h.body, 0)
        return self.buf.take(h.body, h.n, what).decode("utf-8", "replace")

    def _scalar(self, name: str, value, pos: int, end: int) -> None:
        self.scalars += 1
        if self.scalars > MAX_SCALARS:
            return  # past the cap plain values are walked, not labelled
        self.rep.span(pos, end - pos, "value", f"{name} > value", short_repr(value))
        if name and "/" + CHUNKED_KEY not in "/" + name:
            self.result.metadata[name] = short_repr(value, 200)

    def _array(self, pos: int, h: _Head, name: str) -> None:
        """An ndarray ext: its payload is the array (shape, dtype name, data)."""
        end = h.body + h.n
        rep = self.rep
        rep.span(pos, end - pos, "tensor_info", f"{name} > ndarray", None, name)
        try:
            tup = _head(self.buf, h.body)
            if tup.kind != "array" or tup.n != 3:
                raise Bad("msgpack_bad_array", f"The ndarray {name} should hold (shape, dtype, data); its "
                          f"payload is a {tup.kind} of {tup.n} entries.", h.body, 1)
            shape, at = self._shape(tup.body, name, end)
            dh = _head(self.buf, at)
            if dh.kind not in ("str", "bin") or dh.body + dh.n > end:
                raise Bad("msgpack_bad_array", f"The dtype of the ndarray {name} is not a string.", at, 1)
            dtype_name = self._text(dh, "dtype name")
            rep.span(at, dh.body + dh.n - at, "type", f"{name} > dtype", dtype_name, name)
            at = dh.body + dh.n
            bh = _head(self.buf, at)
            if bh.kind not in ("bin", "str") or bh.body + bh.n > end:
                raise Bad("msgpack_bad_array", f"The data of the ndarray {name} is not a byte string that "
                          "ends inside the ext value.", at, 1)
        except Bad as e:
            note(rep, e.code, e.message, e.offset, e.length, name)
            return
        rep.span(at, bh.body - at, "msgpack_data_header", f"{name} > data length", f"{bh.n} bytes", name)
        dtype = DTYPES.get(dtype_name)
        if dtype is None:
            note(rep, "msgpack_dtype_not_read", f"The array {name} is {short_repr(dtype_name)}, a dtype this "
                 "tool does not decode.", pos, end - pos, name)
            return
        need = math.prod(shape) * ITEMSIZE[dtype]
        if need != bh.n:
            note(rep, "msgpack_bad_array", f"The array {name} is {dtype_name} {list(shape)}, which needs "
                 f"{need} bytes, but its data holds {bh.n}.", at, bh.body - at, name)
            return
        rep.span(bh.body, bh.n, "tensor_data", "data > " + name, f"{dtype} {list(shape)}", name)
        info = TensorInfo(name, dtype, shape, self.result.file, bh.body, bh.n,
                          extra={"info_span": (pos, end - pos)})
        if h.ext == EXT_NPSCALAR:
            info.extra["scalar"] = True
        self.result.tensors[name] = info

    def _shape(self, pos: int, name: str, end: int) -> tuple[tuple[int, ...], int]:
        sh = _head(self.buf, pos)
        if sh.kind != "array" or sh.n > MAX_RANK:
            raise Bad("msgpack_bad_array", f"The shape of the ndarray {name} should be an array of at most "
                      f"{MAX_RANK} sizes; found a {sh.kind} of {sh.n}.", pos, 1)
        dims, at = [], sh.body
        for _ in range(sh.n):
            d = _head(self.buf, at)
            if d.kind != "int" or d.value < 0 or d.body > end:
                raise Bad("msgpack_bad_array", f"The shape of the ndarray {name} holds something other "
                          "than a size.", at, 1)
            dims.append(d.value)
            at = d.body
        self.rep.span(pos, at - pos, "dims", f"{name} > shape", str(dims), name)
        return tuple(dims), at


def _join(name: str, key: str) -> str:
    return f"{name}/{key}" if name else key
