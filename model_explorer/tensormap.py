"""Tensor records kept as columns until asked for, and spans built per file on first use.

A 90,000-tensor index costs 90,000 `TensorInfo` objects and 360,000 spans if everything is
built when it opens; the Explorer shows a few dozen. A reader that has columns (names, dtype
codes, shapes, offsets) puts a `TensorTable` into a `TensorMap`: the map answers `len`, `in`
and iteration over names at once, and builds one `TensorInfo` the first time its name is
looked up (then keeps it, so the same object comes back and annotations on it stay).
`SpanList` holds a file's spans as a builder until a view asks for them.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, MutableMapping
from typing import Any

import numpy as np

from .gcpause import no_gc
from .spans import Finding, Span

# A row of a table is stored in the map as one int: the table's serial above ROW_BITS, the row
# below, so merging maps copies dict entries without touching the columns.
ROW_BITS = 32
_serials = itertools.count(1)


class TensorTable:
    """The tensors of one file as columns; `build(row)` makes one `TensorInfo`.

    offset: absolute byte offset of each tensor's data; length: its byte length;
    shape of row i: dims[dim_start[i]:dim_start[i + 1]]; info_at/info_len: the entry's byte
    range in the file's header (TensorInfo.extra["info_span"])."""

    __slots__ = ("make", "serial", "file", "names", "dtype_names", "codes", "dims", "dim_start",
                 "offset", "length", "info_at", "info_len", "numel")

    def __init__(self, make: Callable[..., Any], file: str, names: list[str], dtype_names: list[str], codes: np.ndarray,
                 dims: np.ndarray, dim_start: np.ndarray, offset: np.ndarray, length: np.ndarray,
                 info_at: np.ndarray, info_len: np.ndarray) -> None:
        self.make = make  # records.TensorInfo, passed in: records.py sits above this module
        self.serial = next(_serials)
        self.file, self.names, self.dtype_names, self.codes = file, names, dtype_names, codes
        self.dims, self.dim_start = dims, dim_start
        self.offset, self.length, self.info_at, self.info_len = offset, length, info_at, info_len
        self.numel: np.ndarray | None = None  # elements per row, when the reader counted them

    def __len__(self) -> int:
        return len(self.names)

    def keys(self) -> range:
        """The map values of every row, in row order."""
        base = self.serial << ROW_BITS
        return range(base, base + len(self.names))

    def build(self, row: int) -> Any:
        a, b = int(self.dim_start[row]), int(self.dim_start[row + 1])
        return self.make(self.names[row], self.dtype_names[self.codes[row]],
                          tuple(self.dims[a:b].tolist()), self.file, int(self.offset[row]),
                          int(self.length[row]),
                          extra={"info_span": (int(self.info_at[row]), int(self.info_len[row]))})

    def build_rows(self, rows: list[int]) -> list[Any]:
        """Many rows at once: one conversion of each column to Python values, not one per row."""
        dims, start = self.dims.tolist(), self.dim_start.tolist()
        offset, length = self.offset.tolist(), self.length.tolist()
        at, ln, codes = self.info_at.tolist(), self.info_len.tolist(), self.codes.tolist()
        names, dtypes, file, make = self.names, self.dtype_names, self.file, self.make
        return [make(names[r], dtypes[codes[r]], tuple(dims[start[r]:start[r + 1]]), file,
                           offset[r], length[r], extra={"info_span": (at[r], ln[r])})
                for r in rows]


class TensorMap(MutableMapping):
    """name -> TensorInfo, in file order, like the dict it replaces; rows of a `TensorTable`
    become `TensorInfo` objects when first looked up."""

    __slots__ = ("_d", "_tables")

    def __init__(self, items: Any = None) -> None:
        self._d: dict[str, Any] = {}
        self._tables: dict[int, TensorTable] = {}
        if items:
            self.update(items)

    @classmethod
    def from_table(cls, table: TensorTable) -> TensorMap:
        m = cls()
        m._tables[table.serial] = table
        m._d = dict(zip(table.names, table.keys()))
        return m

    # -- the dict interface -------------------------------------------------------------------

    def __getitem__(self, name: str) -> Any:
        v = self._d[name]
        if type(v) is int:
            v = self._d[name] = self._tables[v >> ROW_BITS].build(v & ((1 << ROW_BITS) - 1))
        return v

    def get(self, name: str, default: Any = None) -> Any:
        return self[name] if name in self._d else default

    def __setitem__(self, name: str, info: Any) -> None:
        self._d[name] = info

    def __delitem__(self, name: str) -> None:
        del self._d[name]

    def __contains__(self, name: object) -> bool:
        return name in self._d

    def __iter__(self) -> Iterator[str]:
        return iter(self._d)

    def __len__(self) -> int:
        return len(self._d)

    def keys(self):
        return self._d.keys()

    def values(self):
        self.build_all()
        return self._d.values()

    def items(self):
        self.build_all()
        return self._d.items()

    def clear(self) -> None:
        self._d.clear()
        self._tables.clear()

    def copy(self) -> TensorMap:
        m = TensorMap()
        m._d, m._tables = dict(self._d), dict(self._tables)
        return m

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (TensorMap, dict)):
            return dict(self.items()) == dict(other.items())
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<TensorMap: {len(self._d)} tensors, {self.unbuilt()} not built yet>"

    def update(self, other: Any = (), /, **kw: Any) -> None:
        if isinstance(other, TensorMap):
            self._tables.update(other._tables)
            self._d.update(other._d)
        elif isinstance(other, dict):
            self._d.update(other)
        else:
            super().update(other)
        if kw:
            self._d.update(kw)

    # -- beyond a dict ------------------------------------------------------------------------

    def add_new(self, other: TensorMap | dict) -> None:
        """Add the names of `other` this map does not hold yet (the first copy stays)."""
        raw = other._d if isinstance(other, TensorMap) else other
        if isinstance(other, TensorMap):
            self._tables.update(other._tables)
        if self._d.keys().isdisjoint(raw):
            self._d.update(raw)
        else:
            d = self._d
            d.update({k: v for k, v in raw.items() if k not in d})

    def take(self, other: TensorMap, name: str) -> None:
        """Hold `other`'s record of `name` (built or not) under `name`."""
        v = other._d[name]
        if type(v) is int:
            self._tables.setdefault(v >> ROW_BITS, other._tables[v >> ROW_BITS])
        self._d[name] = v

    def file_of(self, name: str) -> str:
        """The file `name`'s record is in, without building it."""
        v = self._d[name]
        return self._tables[v >> ROW_BITS].file if type(v) is int else v.file

    def row_of(self, name: str) -> tuple[TensorTable, int] | None:
        """The table and row that hold `name`'s record while it is not built (None once it
        is): a view can show the columns without building the record."""
        v = self._d[name]
        if type(v) is not int:
            return None
        return self._tables[v >> ROW_BITS], v & ((1 << ROW_BITS) - 1)

    def stored_bytes(self) -> np.ndarray:
        """`stored_bytes` of every record in map order; a row never built has no
        quantization, so its figure is its length column."""
        values = list(self._d.values())
        built_at = [i for i, v in enumerate(values) if type(v) is not int]
        out = np.zeros(len(values), dtype=np.int64)
        if len(built_at) < len(values):
            keep = np.ones(len(values), dtype=bool)
            keep[built_at] = False
            rows = np.fromiter((v for v in values if type(v) is int), dtype=np.int64,
                               count=len(values) - len(built_at))
            out[keep] = self._column(rows, "length")
        if built_at:
            out[built_at] = [values[i].stored_bytes for i in built_at]
        return out

    def unbuilt(self) -> int:
        return sum(1 for v in self._d.values() if type(v) is int)

    def built_values(self) -> Iterator[Any]:
        """The records already built: a record never built is a plain one (no `quant`)."""
        return (v for v in self._d.values() if type(v) is not int)

    def build_names(self, names: Iterable[str]) -> None:
        """Build the records of `names` still held as rows, in one pass per table (a caller
        about to look up thousands of names pays one column conversion, not one per name)."""
        rows: dict[int, list[tuple[str, int]]] = {}
        mask = (1 << ROW_BITS) - 1
        d = self._d
        for name in names:
            v = d[name]
            if type(v) is int:
                rows.setdefault(v >> ROW_BITS, []).append((name, v & mask))
        self._build_rows(rows)

    def records(self, names: list[str]) -> list[Any]:
        """The records of `names`, in order, built in one pass per table where needed."""
        self.build_names(names)
        d = self._d
        return [d[n] for n in names]

    def build_all(self) -> None:
        """Build every record still held as a row (in one pass per table)."""
        self.build_names(self._d)

    def _build_rows(self, rows: dict[int, list[tuple[str, int]]]) -> None:
        with no_gc():  # many small objects, no cycles: see gcpause.py
            for serial, pairs in rows.items():
                infos = self._tables[serial].build_rows([r for _, r in pairs])
                self._d.update(zip([n for n, _ in pairs], infos))

    def _split(self) -> tuple[np.ndarray, list]:
        """The values still held as rows (an array, in map order) and the built records."""
        values = list(self._d.values())
        try:  # the usual case at open: nothing built yet, every value a row
            return np.fromiter(values, dtype=np.int64, count=len(values)), []
        except (TypeError, OverflowError):
            return (np.array([v for v in values if type(v) is int], dtype=np.int64),
                    [v for v in values if type(v) is not int])

    def _column(self, rows: np.ndarray, column: str) -> np.ndarray:
        """`column` of the tables at `rows` (map values), gathered in one step."""
        serials, which = np.unique(rows >> ROW_BITS, return_inverse=True)
        tables = [self._tables[int(s)] for s in serials]
        base = np.zeros(len(tables) + 1, dtype=np.int64)
        np.cumsum([len(t) for t in tables], out=base[1:])
        joined = np.concatenate([getattr(t, column) for t in tables])
        return joined[base[:-1][which] + (rows & ((1 << ROW_BITS) - 1))]

    def total_length(self) -> int:
        """Sum of `length` over every record plus its quantization components' lengths."""
        rows, built = self._split()
        total = int(self._column(rows, "length").sum()) if len(rows) else 0
        for t in built:
            total += t.length
            if t.quant:
                total += sum(p.length for p in t.quant.parts.values())
        return total

    def numel_total(self) -> int:
        """Elements over every record (`CheckpointRecord.parameter_count`)."""
        rows, built = self._split()
        if len(rows) and any(self._tables[int(s)].numel is None for s in np.unique(rows >> ROW_BITS)):
            return sum(t.numel for t in self.values())
        return (int(self._column(rows, "numel").sum()) if len(rows) else 0) + \
            sum(t.numel for t in built)

    def label_counts(self) -> dict[str, int]:
        """Records per `label`, most first, ties in the order met (as `Counter.most_common`).
        A row never built has no quantization: its label is its dtype. Records already built
        (a check looked one up) are counted as they are; the rest stay rows."""
        values = list(self._d.values())
        built_at = [i for i, v in enumerate(values) if type(v) is not int]
        count: dict[str, int] = {}
        first: dict[str, int] = {}
        for i in built_at:
            label = values[i].label
            count[label] = count.get(label, 0) + 1
            first.setdefault(label, i)
        if len(built_at) < len(values):
            if built_at:
                keep = np.ones(len(values), dtype=bool)
                keep[built_at] = False
                row_at = np.flatnonzero(keep)
                rows = np.fromiter((v for v in values if type(v) is int), dtype=np.int64, count=len(row_at))
            else:
                row_at, rows = None, np.fromiter(values, dtype=np.int64, count=len(values))
            serials, which = np.unique(rows >> ROW_BITS, return_inverse=True)
            names = [self._tables[int(s)].dtype_names for s in serials]
            width = max(len(n) for n in names)
            keys = which * width + self._column(rows, "codes").astype(np.int64)
            for k, at, c in zip(*(a.tolist() for a in np.unique(keys, return_index=True, return_counts=True))):
                name = names[k // width][k % width]
                at = at if row_at is None else int(row_at[at])
                count[name] = count.get(name, 0) + c
                first[name] = min(first.get(name, at), at)
        return dict(sorted(count.items(), key=lambda kv: (-kv[1], first[kv[0]])))


def records_of(tensors: Any, names: list[str]) -> list[Any]:
    """The records of `names` in order, from a TensorMap (built in one pass per table) or a
    plain dict of records."""
    return tensors.records(names) if isinstance(tensors, TensorMap) else [tensors[n] for n in names]


class SpanList:
    """`ckpt.spans`: a list of spans in which a file's part may be a builder, run the first
    time something asks for that file's spans (or iterates them all)."""

    def __init__(self) -> None:
        self._parts: list[list[Span] | _Deferred] = []

    def defer(self, file: str, build: Callable[[], list[Span]], kinds: Iterable[str] = ()) -> None:
        """`build()` makes the file's spans when first asked; `kinds`: the kinds it can make."""
        self._parts.append(_Deferred(file, build, tuple(kinds)))

    def kinds(self) -> set[str]:
        """Every kind of span, building only the files that did not declare theirs."""
        out: set[str] = set()
        for p in self._parts:
            if isinstance(p, _Deferred):
                out.update(p.kinds if p.spans is None and p.kinds else (s.kind for s in p.get()))
            else:
                out.update(s.kind for s in p)
        return out

    def files_with(self, kinds: Iterable[str]) -> list[tuple[str, list[Span] | None]]:
        """Per file, in the order met, its spans of `kinds`, or None for a file whose spans
        are not built yet and may hold such kinds (`for_file` builds them). Builds nothing."""
        wanted = set(kinds)
        out: dict[str, list[Span] | None] = {}
        for p in self._parts:
            if isinstance(p, _Deferred) and p.spans is None:
                if not p.kinds or wanted.intersection(p.kinds):
                    out[p.file] = None
                continue
            for s in (p.get() if isinstance(p, _Deferred) else p):  # built: get() reads no more
                if s.kind in wanted:
                    got = out.setdefault(s.file, [])
                    if got is not None:
                        got.append(s)
        return list(out.items())

    def pending(self) -> list[str]:
        return [p.file for p in self._parts if isinstance(p, _Deferred) and p.spans is None]

    def for_file(self, file: str) -> list[Span]:
        out: list[Span] = []
        for p in self._parts:
            if isinstance(p, _Deferred):
                if p.file == file:
                    out.extend(p.get())
            else:
                out.extend(s for s in p if s.file == file)
        return out

    def build_all(self) -> None:
        """Build every file's spans still left for later."""
        self._all()

    def _all(self) -> list[Span]:
        only = self._parts[0] if len(self._parts) == 1 else None
        if isinstance(only, list):
            return only
        flat = [s for p in self._parts for s in (p.get() if isinstance(p, _Deferred) else p)]
        self._parts = [flat]
        return flat

    def __iter__(self) -> Iterator[Span]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())

    def __getitem__(self, i):
        return self._all()[i]

    def __bool__(self) -> bool:
        return any(p.file if isinstance(p, _Deferred) else p for p in self._parts)

    def __eq__(self, other: object) -> bool:
        return list(self) == list(other) if isinstance(other, (list, SpanList)) else NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def append(self, span: Span) -> None:
        self._tail().append(span)

    def extend(self, spans: Iterable[Span]) -> None:
        self._tail().extend(spans)

    def _tail(self) -> list[Span]:
        """The last part when it is a list of spans; a new one after a deferred file."""
        last = self._parts[-1] if self._parts else None
        if not isinstance(last, list):
            last = []
            self._parts.append(last)
        return last

    def sort(self, **kw: Any) -> None:
        self._all().sort(**kw)

    def clear(self) -> None:
        self._parts.clear()

    def __repr__(self) -> str:
        return f"<SpanList: {len(self._parts)} part(s), {len(self.pending())} file(s) not built>"


class _Deferred:
    __slots__ = ("file", "build", "spans", "kinds")

    def __init__(self, file: str, build: Callable[[], list[Span]], kinds: tuple[str, ...] = ()) -> None:
        self.file, self.build, self.kinds = file, build, kinds
        self.spans: list[Span] | None = None

    def get(self) -> list[Span]:
        if self.spans is None:
            with no_gc():
                self.spans = self.build()
        return self.spans


def report_lazily(findings: list[Finding], found: Iterable[Finding]) -> None:
    """Keep the findings a deferred build made that the list does not hold yet."""
    seen = {(f.code, f.file, f.offset, f.tensor) for f in findings}
    for f in found:
        if (f.code, f.file, f.offset, f.tensor) not in seen:
            f.extra.setdefault("found_when_built", True)
            findings.append(f)
            seen.add((f.code, f.file, f.offset, f.tensor))
