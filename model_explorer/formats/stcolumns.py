"""A safetensors header read straight into columns, for the headers writers actually write.

The safetensors library (Rust, Python and every wrapper over it) writes compact JSON:
`{"__metadata__":{...},"name":{"dtype":"BF16","shape":[4096,4096],"data_offsets":[0,33554432]},...}`.
One regular expression (C) takes every entry of that form; numpy checks them all at once:
the entries must tile the header exactly (lengths add up, so nothing else hides between
them), names are unique, numbers have no leading zeros, dtypes are known, shapes of at most
MAX_RANK dimensions need exactly the bytes their offsets give, and the offsets tile the data
section. The same entry byte ranges the slow reader records fall out of the lengths.

Entries with their keys sorted (`{"data_offsets":[..],"dtype":..,"shape":[..]}`, as MLX writes
them) are read the same way. When anything differs (whitespace, escapes, other key orders or a
mix of the two, a problem of any kind) this returns None and the caller reads the header the
slow way, which says what is wrong where: a header this accepts is one the slow reader finds
nothing wrong with.
"""

from __future__ import annotations

import re
from operator import attrgetter

import numpy as np

from ..dtypes import SAFETENSORS_BITS
from ..spans import Span, short_repr
from ..tensormap import TensorTable
from . import MAX_RANK

_NAME = r'([{,])"([^"\\\x00-\x1f]*+)":'
_DTYPE, _SHAPE = r'"dtype":"([A-Za-z0-9_]{1,16}+)"', r'"shape":\[([0-9,]{0,400}+)\]'
_OFFSETS = r'"data_offsets":\[([0-9]{1,18}+),([0-9]{1,18}+)\]'


def _compile(pattern: str) -> re.Pattern:
    try:
        return re.compile(pattern)  # possessive quantifiers: Python 3.11+
    except re.error:  # pragma: no cover - Python 3.10: the same language, some backtracking
        return re.compile(pattern.replace("*+", "*").replace("}+", "}"))


# The safetensors library's order; and sorted keys, as MLX writes them (nlohmann::json keeps
# an object's keys sorted), whose groups are put back in the first order.
_ENTRY = _compile(_NAME + r"\{" + _DTYPE + "," + _SHAPE + "," + _OFFSETS + r"\}")
_SORTED = _compile(_NAME + r"\{" + _OFFSETS + "," + _DTYPE + "," + _SHAPE + r"\}")
# An entry's length without its variable parts (separator, quotes, field names, brackets).
_FIXED = len('{"":{"dtype":"","shape":[],"data_offsets":[,]}')
_CODE = {name: i for i, name in enumerate(SAFETENSORS_BITS)}
_DTYPES = list(SAFETENSORS_BITS)
_BITS = np.array(list(SAFETENSORS_BITS.values()), dtype=np.int64)
_NAME_LEN = np.array([len(n) for n in _DTYPES], dtype=np.int64)
_POW10 = np.array([10**k for k in range(1, 19)], dtype=np.int64)
# Past 2**53 elements a float product is no longer exact: such a header goes the slow way.
_EXACT = 2**53


def _digits(x: np.ndarray) -> np.ndarray:
    return 1 + np.searchsorted(_POW10, x, side="right")


def read_entries(text: str, pos: int, close: int, first_sep: str, ascii_only: bool, file: str,
                 data_start: int, size: int, make) -> TensorTable | None:
    """The entries of `text[pos:close]` (a header read as Latin-1, one character per byte) as a
    table, or None when they are not all plain, sound and laid out edge to edge."""
    found = _ENTRY.findall(text, pos, close)
    if not found and _SORTED.match(text, pos, close):
        found = [(sep, name, dtype, shape, b, e) for sep, name, b, e, dtype, shape
                 in _SORTED.findall(text, pos, close)]
    n = len(found)
    if n == 0:
        bare = close == pos + (first_sep == "{")  # "{}", or "__metadata__" alone
        return _empty(file, make) if bare and size == data_start else None
    seps, names, dtypes, shapes, begins, ends = zip(*found)
    if seps[0] != first_sep or seps.count(",") != n - (first_sep == "{"):
        return None
    if "__metadata__" in names or not set(dtypes) <= _CODE.keys():
        return None
    joined_shapes = ";".join(shapes)
    b_text, e_text = ",".join(begins), ",".join(ends)
    # Empty list items; a leading zero ("01") makes the lengths below disagree instead.
    if ",," in joined_shapes or ";," in joined_shapes or ",;" in joined_shapes or \
            joined_shapes.startswith(",") or joined_shapes.endswith(","):
        return None
    codes = np.array([_CODE[d] for d in dtypes], dtype=np.uint8)
    begin = np.fromstring(b_text, dtype=np.int64, sep=",")
    end = np.fromstring(e_text, dtype=np.int64, sep=",")
    rank, dims = _shapes(joined_shapes, shapes, n)
    if rank is None or len(begin) != n or len(end) != n:
        return None
    dim_start = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(rank, out=dim_start[1:])
    # Lengths: the entries must cover text[pos:close] exactly, each one where the last ended.
    # Each is counted from the numbers as parsed, so digits they do not need ("007") or a
    # number too long to parse make the sum too small.
    name_len = np.fromiter(map(len, names), dtype=np.int64, count=n)
    digits = _digits(dims)
    shape_len = np.zeros(n, dtype=np.int64)
    if len(dims):
        has = rank > 0
        shape_len[has] = np.add.reduceat(digits, dim_start[:-1][has]) + rank[has] - 1
    entry_len = _FIXED + name_len + _NAME_LEN[codes] + shape_len + _digits(begin) + _digits(end)
    if pos + int(entry_len.sum()) != close:
        return None
    length = end - begin
    numel = _numel(dims, dim_start, rank)
    if (length < 0).any() or numel is None or \
            not ((_BITS[codes] * numel + 7) // 8 == length).all():  # bits × elements, in bytes
        return None
    if not _tiles(begin, length, size - data_start):
        return None
    if not ascii_only:  # read as Latin-1 for byte positions; the UTF-8 was checked before
        names = tuple(s if s.isascii() else s.encode("latin-1").decode("utf-8") for s in names)
    starts = np.empty(n, dtype=np.int64)
    starts[0] = pos
    np.cumsum(entry_len[:-1], out=starts[1:])
    if n > 1:
        starts[1:] += pos
    table = TensorTable(make, file, list(names), _DTYPES, codes, dims, dim_start,
                        data_start + begin, length, 8 + starts + 1, entry_len - 1)
    table.numel = numel
    return table


def _empty(file: str, make) -> TensorTable:
    z = np.zeros(0, dtype=np.int64)
    table = TensorTable(make, file, [], _DTYPES, np.zeros(0, np.uint8), z, np.zeros(1, np.int64),
                        z, z, z, z)
    table.numel = z
    return table


def _shapes(joined: str, shapes: tuple[str, ...], n: int):
    """Rank of every shape and all their dimensions in one array, or (None, None)."""
    raw = np.frombuffer(joined.encode("ascii"), dtype=np.uint8)
    segment = np.cumsum(raw == ord(";"))
    commas = np.bincount(segment[raw == ord(",")], minlength=n)
    filled = np.bincount(segment[raw != ord(";")], minlength=n) > 0
    rank = (commas + filled).astype(np.int64)
    if len(rank) != n or (n and rank.max() > MAX_RANK):
        return None, None
    flat = ",".join(filter(None, shapes))
    dims = np.fromstring(flat, dtype=np.int64, sep=",") if flat else np.zeros(0, np.int64)
    if len(dims) != int(rank.sum()) or (len(dims) and dims.max() >= 10**18):  # 10**19 saturates
        return None, None
    return rank, dims


def _numel(dims, dim_start, rank) -> np.ndarray | None:
    """Elements of every shape; None past 2**53 (where float products stop being exact)."""
    n = len(rank)
    numel = np.ones(n, dtype=np.int64)
    if len(dims):
        has = rank > 0
        at = dim_start[:-1][has]
        if (np.multiply.reduceat(dims.astype(np.float64), at) >= _EXACT).any():
            return None
        numel[has] = np.multiply.reduceat(dims, at)
    return numel


def _tiles(begin, length, data_size: int) -> bool:
    """Sorted by (offset, length), each tensor starts where the ones before it end, the first
    at 0, and the last ends where the file does: no gap, overlap or byte past the end."""
    order = np.lexsort((length, begin))
    b, e = begin[order], (begin + length)[order]
    reach = np.maximum.accumulate(e)
    return bool(b[0] == 0 and (b[1:] == reach[:-1]).all() and reach[-1] == data_size)


def span_kinds(table: TensorTable, text: str, meta) -> tuple[str, ...]:
    """The kinds of span `spans_of` will make for this header, known before it makes them (the
    hexdump's legend lists what the file holds, not what a file could)."""
    kinds = ["length", "json"]
    if meta is not None:
        kinds.append("metadata")
    if len(table):
        kinds += ["tensor_info", "key", "value", "tensor_data"]
    if len(text.rstrip(" \t\n\r")) < len(text):
        kinds.append("padding")
    return tuple(kinds)


def spans_of(table: TensorTable, text: str, meta: tuple[int, int, int] | None,
             size: int) -> list[Span]:
    """The spans the slow reader labels a header with that `read_entries` accepted, made from
    the columns (`text`: the same header read as Latin-1; `meta`: the __metadata__ member's
    byte offset, length and entry count). tests/foundation/test_lazy_open.py holds the two
    equal."""
    file, names, n_json = table.file, table.names, len(text)
    out = [Span(0, 8, "length", "header length", file, f"u64 = {n_json}"),
           Span(8, n_json, "json", "JSON header", file, f"{n_json} bytes")]
    if meta is not None:
        out.append(Span(meta[0], meta[1], "metadata", "__metadata__", file, f"{meta[2]} entries"))
    at, ln = table.info_at.tolist(), table.info_len.tolist()
    key_bytes = [len(k) if k.isascii() else len(k.encode("utf-8")) for k in names]
    for k, a, n, kb in zip(names, at, ln, key_bytes):
        path = "tensors > " + k
        vs, vl = a + kb + 3, n - kb - 3  # after the quoted key and its colon
        shown = text[vs - 8:vs - 8 + vl] if vl <= 80 else short_repr(_entry_value(text[vs - 8:vs - 8 + vl]))
        out += (Span(a, n, "tensor_info", path, file, None, k),
                Span(a, kb + 2, "key", path + " > name", file, k if len(k) <= 80 else short_repr(k), k),
                Span(vs, vl, "value", path + " > entry", file, shown, k))
    close = len(text.rstrip(" \t\n\r"))
    if close < n_json:
        out.append(Span(8 + close, n_json - close, "padding", "header padding (spaces)", file,
                        f"{n_json - close} bytes"))
    offset, length = table.offset, table.length
    dims, start, codes = table.dims.tolist(), table.dim_start.tolist(), table.codes.tolist()
    off, lens, dtypes = offset.tolist(), length.tolist(), table.dtype_names
    for r in np.lexsort((length, offset)).tolist():
        k = names[r]
        out.append(Span(off[r], lens[r], "tensor_data", "data > " + k, file,
                        f"{dtypes[codes[r]]} {dims[start[r]:start[r + 1]]}", k))
    out.sort(key=attrgetter("offset"))
    return out


def _entry_value(text: str) -> dict:
    """An entry as json reads it (for the label of one longer than 80 bytes)."""
    import json

    return json.loads(text)
